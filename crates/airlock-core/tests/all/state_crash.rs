//! A writer SIGKILLed at any moment leaves the old or the new record, never a torn one (R1).

use std::io::BufReader;
use std::time::Duration;

use airlock_core::atomic::{is_temp_name_for, remove_stray_temps};
use airlock_core::StateStore;
use serde::{Deserialize, Serialize};

use crate::common::{spawn_worker, wait_for_line, KillOnDrop};

pub const BIG_NAME: &str = "big.json";
const KILLS: u64 = 40;
const TEXT_BYTES: usize = 1 << 20;

/// A large record whose content is fully determined by `tag`, so a reader can tell a complete
/// record from a mix of two.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Big {
    pub tag: u64,
    pub text: String,
}

/// 1 MiB of text, so writing and fsyncing it dominates the writer's loop and kills land
/// inside the write.
pub fn big_record(tag: u64) -> Big {
    let line = format!("record {tag} {}\n", "x".repeat(50));
    Big {
        tag,
        text: line.repeat(TEXT_BYTES / line.len()),
    }
}

fn stray_temps(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| is_temp_name_for(&e.as_ref().unwrap().file_name(), BIG_NAME.as_ref()))
        .count()
}

/// Spins until a write of the big record is visibly in progress: a temporary file exists
/// (what `write_atomic` does) or the record itself is shorter than a complete one (what an
/// in-place rewrite would do, so a non-atomic implementation is caught here too). False when
/// nothing was seen within `wait`.
fn wait_for_write_in_progress(dir: &std::path::Path, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        let short =
            std::fs::metadata(dir.join(BIG_NAME)).is_ok_and(|m| m.len() < (TEXT_BYTES / 2) as u64);
        if short || (dir.exists() && stray_temps(dir) > 0) {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

#[test]
fn writer_killed_mid_write_leaves_old_or_new_record_never_torn() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path().join("store")).unwrap();
    store.write(BIG_NAME, None, &big_record(1)).unwrap();
    let expected: Vec<Big> = (1..=3).map(big_record).collect();

    let mut kills_with_stray_temp = 0;
    let mut last_revision = 1;
    for round in 0..KILLS {
        let mut child = KillOnDrop(spawn_worker("rewrite", dir.path(), 0));
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        wait_for_line(&mut out, "READY");
        if round % 2 == 0 {
            // Aim inside the write: once the temporary file exists, wait 0..=1.9 ms (the
            // write and fsync of 1 MiB take about that long) and kill.
            assert!(
                wait_for_write_in_progress(store.root(), Duration::from_secs(10)),
                "round {round}: the writer never started a write"
            );
            std::thread::sleep(Duration::from_micros((round * 397) % 2_000));
        } else if round == 1 {
            // Once after a completed write, so the test exercises a record that changed
            // whatever the disk's speed (a loaded disk's fsync can outlast every sleep below).
            wait_for_line(&mut out, "WROTE");
            std::thread::sleep(Duration::from_micros(round * 7_919));
        } else {
            // Anywhere in the cycle (encode, lock, write, fsync, rename, directory fsync):
            // 0..=48 ms in a scattered order.
            std::thread::sleep(Duration::from_micros((round * 7_919) % 49_000));
        }
        drop(child); // SIGKILL and reap

        let record = store
            .read::<Big>(BIG_NAME)
            .unwrap_or_else(|e| panic!("round {round}: record unreadable after SIGKILL: {e}"))
            .expect("record exists");
        assert!(
            expected.contains(&record.data),
            "round {round}: record is not one of the complete records (tag {})",
            record.data.tag
        );
        assert!(record.revision >= last_revision, "revision went backwards");
        last_revision = record.revision;
        if stray_temps(store.root()) > 0 {
            kills_with_stray_temp += 1;
            // No writer runs now; clear them so the next round waits for a fresh one.
            remove_stray_temps(store.root(), BIG_NAME.as_ref()).unwrap();
        }
    }
    eprintln!(
        "state_crash: {KILLS} kills, {kills_with_stray_temp} left a temp file (killed mid-write), \
         final revision {last_revision}"
    );
    assert!(
        last_revision > 1,
        "the worker never completed a write; the test exercised nothing"
    );
    assert!(
        kills_with_stray_temp > 0,
        "no kill landed inside a write; the test did not exercise the torn-write window"
    );

    // The next write under the record lock cleans what a killed writer left behind.
    std::fs::write(store.root().join(".big.json.tmp.1.2"), b"{\"torn").unwrap();
    let current = store.read::<Big>(BIG_NAME).unwrap().unwrap();
    store
        .write(BIG_NAME, Some(current.revision), &big_record(2))
        .unwrap();
    assert_eq!(
        stray_temps(store.root()),
        0,
        "stray temp files were not cleaned"
    );
    assert_eq!(store.names().unwrap(), vec![BIG_NAME.to_string()]);
}
