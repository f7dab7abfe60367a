//! Spawning worker processes: this same test binary, running only `workers::worker_entry`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

pub const ROLE_VAR: &str = "AIRLOCK_CORE_TEST_WORKER";
pub const DIR_VAR: &str = "AIRLOCK_CORE_TEST_DIR";
pub const COUNT_VAR: &str = "AIRLOCK_CORE_TEST_COUNT";

/// A worker process in `role`, working in `dir`, stdout piped for `READY`/result lines.
pub fn spawn_worker(role: &str, dir: &Path, count: u64) -> Child {
    Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--exact",
            "workers::worker_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_VAR, role)
        .env(DIR_VAR, dir)
        .env(COUNT_VAR, count.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn worker process")
}

/// Reads the worker's stdout until a line containing `prefix` (the test harness may print
/// `test workers::worker_entry ... ` before it on the same line); returns the line from
/// `prefix` on. Panics if the worker exits first.
pub fn wait_for_line(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read worker stdout");
        assert!(n > 0, "worker exited before printing {prefix:?}");
        if let Some(at) = line.find(prefix) {
            return line[at..].trim_end().to_string();
        }
    }
}

/// A worker that is SIGKILLed and reaped when dropped, also when a test panics.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
