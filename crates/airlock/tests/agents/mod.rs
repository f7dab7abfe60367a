//! The agent in its sandbox and git inside (issue 10 items 5–7; PRODUCT A1–A5, C7, C8): real
//! sandboxes, real git, each test in its own [`TestEnv`] world.

mod clone;
mod git;
mod install;
mod sync;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Run, TestEnv};

/// A sandboxed project directory (the world's drop runs `airlock down`).
pub struct Sandboxed<'a> {
    pub env: &'a TestEnv,
    pub dir: PathBuf,
}

impl Sandboxed<'_> {
    pub fn run(&self, args: &[&str]) -> Run {
        self.env.run_in(&self.dir, args)
    }

    pub fn exec(&self, script: &str) -> Run {
        self.run(&["exec", "--", "sh", "-c", script])
    }
}

/// Runs host git in `dir` with the world's HOME; returns stdout, panicking on failure.
pub fn host_git(env: &TestEnv, dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", &env.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
