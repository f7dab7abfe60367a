//! The sandbox lock (L8): bounded waiting, the holder's identity, release on death.

use std::io::BufReader;
use std::time::{Duration, Instant};

use airlock_core::{Holder, LockError, SandboxLock};

use crate::common::{spawn_worker, wait_for_line, KillOnDrop};
use crate::workers::HOLDER_COMMAND;

fn me(command: &str) -> Holder {
    Holder {
        pid: std::process::id(),
        command: command.to_string(),
    }
}

/// Starts a worker process holding the lock in `dir`; returns it and its pid.
fn holder_process(dir: &std::path::Path) -> (KillOnDrop, u32) {
    let mut child = KillOnDrop(spawn_worker("hold-lock", dir, 0));
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let line = wait_for_line(&mut out, "READY ");
    let pid = line["READY ".len()..].parse().unwrap();
    (child, pid)
}

#[test]
fn second_process_sees_busy_with_the_holders_pid_and_command() {
    let dir = tempfile::tempdir().unwrap();
    let (child, pid) = holder_process(dir.path());
    assert_eq!(pid, child.0.id());
    let path = dir.path().join("sandbox.lock");
    let started = Instant::now();
    let err =
        SandboxLock::acquire(&path, Duration::from_millis(200), &me("airlock down")).unwrap_err();
    let waited = started.elapsed();
    drop(child);
    match err {
        LockError::Busy {
            pid: got_pid,
            command,
            ..
        } => {
            assert_eq!(got_pid, Some(pid));
            assert_eq!(command.as_deref(), Some(HOLDER_COMMAND));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(
        waited >= Duration::from_millis(200),
        "gave up before the wait elapsed: {waited:?}"
    );
}

#[test]
fn killed_holder_releases_the_lock_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (child, _) = holder_process(dir.path());
    let path = dir.path().join("sandbox.lock");
    assert!(matches!(
        SandboxLock::try_acquire(&path, &me("airlock up")),
        Err(LockError::Busy { .. })
    ));
    drop(child); // SIGKILL and reap
                 // No waiting: the kernel released the flock when the holder died.
    let guard =
        SandboxLock::try_acquire(&path, &me("airlock up")).expect("lock free after holder died");
    assert_eq!(guard.path(), path);
}

#[test]
fn waiter_gets_the_lock_when_the_holder_releases_within_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandbox.lock");
    let guard = SandboxLock::acquire(&path, Duration::ZERO, &me("first")).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(guard);
    });
    let second = SandboxLock::acquire(&path, Duration::from_secs(10), &me("second"));
    releaser.join().unwrap();
    assert!(second.is_ok(), "{second:?}");
}

#[test]
fn released_lock_no_longer_names_the_old_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandbox.lock");
    let guard = SandboxLock::acquire(&path, Duration::ZERO, &me("airlock up")).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("airlock up") && text.contains(&std::process::id().to_string()));
    drop(guard);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
}

#[test]
fn lock_is_not_kept_alive_by_a_child_process_started_while_holding_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandbox.lock");
    let guard = SandboxLock::acquire(&path, Duration::ZERO, &me("airlock up")).unwrap();
    // A sandbox process started while the lock is held must not inherit the descriptor.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    drop(guard);
    // Bounded wait, not zero: a process forked by a concurrently running test holds a copy
    // of the descriptor until its `exec` closes it. The sleeper lives far longer than this.
    let again = SandboxLock::acquire(&path, Duration::from_secs(2), &me("airlock down"));
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(again.is_ok(), "child kept the lock: {again:?}");
}

#[test]
fn lock_file_planted_as_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, b"keep").unwrap();
    let path = dir.path().join("sandbox.lock");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let err = SandboxLock::try_acquire(&path, &me("airlock up")).unwrap_err();
    assert!(
        matches!(&err, LockError::Open { path: p, .. } if p == &path),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
}
