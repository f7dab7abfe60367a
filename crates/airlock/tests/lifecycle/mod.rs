//! Persistent sandboxes (issue 4, PRODUCT §4): `up`, `exec`, `status`, `ls`, `down`, `clean`,
//! run as the real binary, each test in its own [`TestEnv`] world. Every test that creates a
//! sandbox does so in a [`TestEnv`] world, whose drop runs `airlock down` for every sandbox
//! still recorded in it, so a failing assertion never leaks a sandbox. No assertion depends on wall-clock speed: waits are bounded polls.

mod crash;
mod files;
mod idle;
mod interrupt;
mod names;
mod ports;
mod provision;
mod reuse;
mod teardown;
mod unprivileged;
mod versions;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use crate::common::wait_until;
use crate::common::{Run, TestEnv};

/// A world with one git project in it.
pub struct Project {
    pub env: TestEnv,
    pub dir: PathBuf,
}

impl Project {
    pub fn new() -> Project {
        let env = TestEnv::new();
        let dir = env.git_project("proj");
        Project { env, dir }
    }

    /// Runs airlock in the project directory.
    pub fn run(&self, args: &[&str]) -> Run {
        self.env.run_in(&self.dir, args)
    }

    /// A command for airlock in the project directory (for concurrent runs).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.env.command(&self.dir, args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `up --no-attach --json`, which must succeed; returns its document.
    pub fn up(&self) -> serde_json::Value {
        let run = self.run(&["up", "--no-attach", "--json"]);
        run.assert_code(0);
        run.json()
    }

    /// `status --json` (any exit status).
    pub fn status(&self) -> serde_json::Value {
        self.run(&["status", "--json"]).json()
    }

    pub fn health(&self) -> String {
        self.status()["health"].as_str().unwrap_or("?").to_owned()
    }

    pub fn state_root(&self) -> PathBuf {
        self.env.state_home().join("airlock")
    }

    pub fn runtime_root(&self) -> PathBuf {
        self.env.runtime_dir.join("airlock")
    }

    /// The sandbox record as stored (for pids and the epoch instance).
    pub fn record(&self, name: &str) -> Option<serde_json::Value> {
        let path = self.state_root().join("lifecycle/sandboxes").join(name);
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .map(|v| v["data"].clone())
    }
}

/// Whether a process with this pid exists and is not a zombie.
pub fn alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .unwrap_or("X");
            !matches!(state, "Z" | "X")
        }
        Err(_) => false,
    }
}

pub fn kill9(pid: u64) {
    let st = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -9 {pid} failed");
}

/// Every cgroup directory named `name` under an `airlock` parent on this host.
pub fn cgroup_dirs(name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") else {
        return out;
    };
    for e in entries.flatten() {
        for base in [e.path(), e.path().join("unified")] {
            let p = base.join("airlock").join(name);
            if p.exists() {
                out.push(p);
            }
        }
    }
    let unified = Path::new("/sys/fs/cgroup/airlock").join(name);
    if unified.exists() {
        out.push(unified);
    }
    out
}
