//! Worker side of the multi-process tests. Without `AIRLOCK_CORE_TEST_WORKER` the entry test
//! does nothing (it runs, harmlessly, in every normal `cargo test`).

use std::path::PathBuf;
use std::time::Duration;

use airlock_core::{Holder, SandboxLock, StateError, StateStore};

use crate::common::{COUNT_VAR, DIR_VAR, ROLE_VAR};
use crate::state_crash::{big_record, BIG_NAME};

/// Printed by the lock-holding worker as its `Holder::command`.
pub const HOLDER_COMMAND: &str = "airlock up --no-attach (lock test worker)";

#[test]
fn worker_entry() {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR_VAR).expect("worker dir"));
    let count: u64 = std::env::var(COUNT_VAR)
        .expect("worker count")
        .parse()
        .expect("numeric count");
    match role.as_str() {
        "increment" => increment(&dir, count),
        "rewrite" => rewrite_forever(&dir),
        "hold-lock" => hold_lock(&dir),
        other => panic!("unknown worker role {other}"),
    }
}

/// Waits for the parent's start signal so that all workers contend from the first write.
/// Exits the process if the parent test died meanwhile.
fn wait_for_go(dir: &std::path::Path) {
    let parent = std::os::unix::process::parent_id();
    while !dir.join("go").exists() {
        assert_eq!(
            std::os::unix::process::parent_id(),
            parent,
            "parent test died"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `count` read-modify-write increments of `counter.json`: even ones through
/// `StateStore::update`, odd ones through an explicit read + CAS write + retry loop that counts
/// the stale-revision conflicts it saw (printed as `CONFLICTS n`).
fn increment(dir: &std::path::Path, count: u64) {
    let store = StateStore::open(dir.join("store")).unwrap();
    println!("READY");
    wait_for_go(dir);
    let mut conflicts = 0u64;
    for i in 0..count {
        if i % 2 == 0 {
            store
                .update("counter.json", |n: Option<u64>| n.unwrap_or(0) + 1)
                .unwrap();
            continue;
        }
        loop {
            let current = store.read::<u64>("counter.json").unwrap();
            let expected = current.as_ref().map(|r| r.revision);
            let next = current.map_or(0, |r| r.data) + 1;
            // Some work between read and write, as real read-modify-write callers have; it
            // widens the window in which another process writes, so a lost update would show.
            std::thread::sleep(Duration::from_micros(200));
            match store.write("counter.json", expected, &next) {
                Ok(_) => break,
                Err(StateError::StaleRevision { .. }) => conflicts += 1,
                Err(e) => panic!("increment failed: {e}"),
            }
        }
    }
    println!("CONFLICTS {conflicts}");
}

/// Rewrites the big record with rotating tags until the parent SIGKILLs it (or dies).
fn rewrite_forever(dir: &std::path::Path) {
    let store = StateStore::open(dir.join("store")).unwrap();
    let records: Vec<_> = (1..=3).map(big_record).collect();
    let parent = std::os::unix::process::parent_id();
    let mut revision = store
        .read::<serde::de::IgnoredAny>(BIG_NAME)
        .unwrap()
        .map(|r| r.revision);
    println!("READY");
    for i in 0.. {
        if std::os::unix::process::parent_id() != parent {
            return;
        }
        revision = Some(store.write(BIG_NAME, revision, &records[i % 3]).unwrap());
        if i == 0 {
            // Once only: a test that needs a completed write waits for this line.
            println!("WROTE");
        }
    }
}

fn hold_lock(dir: &std::path::Path) {
    let holder = Holder {
        pid: std::process::id(),
        command: HOLDER_COMMAND.to_string(),
    };
    let _guard = SandboxLock::acquire(&dir.join("sandbox.lock"), Duration::ZERO, &holder)
        .expect("worker takes the free lock");
    println!("READY {}", std::process::id());
    std::thread::sleep(Duration::from_secs(120));
}
