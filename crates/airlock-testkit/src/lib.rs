//! airlock-testkit: the one way a test says it cannot run here.
//!
//! A test that needs root, the unprivileged test user or a tool calls [`needs_root`],
//! [`needs_test_user`] or [`needs_tool`] (or [`skip`] for another reason) and returns when it
//! is told no. Outside CI that prints `skipped: <test>: <reason>` on stderr; with `CI` set
//! (scripts/test in CI) it fails the test, because there a missing privilege or tool is a broken
//! setup, never a pass. The unprivileged pass leaves root-only tests out by the declared filter
//! of the nextest profile `unprivileged` (`.config/nextest.toml`), not by returning early.
//!
//! Only a dev-dependency: nothing here is part of airlock.

use std::fmt::Display;
use std::path::Path;

/// Name of the unprivileged user the tests switch to (created by `scripts/setup-test-user`).
pub const TEST_USER: &str = "airlock-test";

/// Whether `CI` is set (to anything): skips become failures.
pub fn in_ci() -> bool {
    std::env::var_os(airlock_env::CI).is_some()
}

/// This test cannot run here: fails under CI, otherwise prints the reason (and the test's
/// name) on stderr. The caller returns right after.
#[track_caller]
pub fn skip(reason: impl Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    assert!(
        !in_ci(),
        "{test} cannot run here: {reason} (CI is set, so this is a failure, not a skip)"
    );
    eprintln!("skipped: {test}: {reason}");
}

/// This test exercises a kernel feature the host does not have (not a privilege or a tool
/// scripts/test could provide): prints the reason, also under CI, where such a host is a
/// supported configuration. Never use it for root, users or tools.
pub fn host_lacks(feature: impl Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    eprintln!("skipped: {test}: this host's kernel lacks {feature}");
}

/// The effective uid of this process (from `/proc/self/status`).
pub fn effective_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse().ok())
        .expect("Uid: line in /proc/self/status")
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    effective_uid() == 0
}

/// `true` when running as root; otherwise [`skip`]s with `why` (what needs root) and returns
/// `false`.
#[track_caller]
pub fn needs_root(why: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(format_args!("needs root: {why} (run scripts/test as root)"));
    false
}

/// uid and gid of [`TEST_USER`] when this process is root (to switch to it) and the user
/// exists; otherwise [`skip`]s and returns `None`.
#[track_caller]
pub fn needs_test_user() -> Option<(u32, u32)> {
    if !is_root() {
        skip(format_args!(
            "needs root to switch to the unprivileged user {TEST_USER} (run scripts/test as root)"
        ));
        return None;
    }
    let ids = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| passwd_ids(&text, TEST_USER));
    if ids.is_none() {
        skip(format_args!(
            "the unprivileged user {TEST_USER} does not exist (scripts/setup-test-user creates it)"
        ));
    }
    ids
}

/// uid and gid of `user` in an `/etc/passwd` text.
pub fn passwd_ids(passwd: &str, user: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() > 3 && f[0] == user {
            Some((f[2].parse().ok()?, f[3].parse().ok()?))
        } else {
            None
        }
    })
}

/// Whether an executable `tool` is on `PATH` (or is an existing absolute path).
pub fn tool_exists(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if tool.contains('/') {
        return executable(Path::new(tool));
    }
    let path = std::env::var(airlock_env::PATH).unwrap_or_default();
    path.split(':')
        .filter(|d| !d.is_empty())
        .any(|dir| executable(&Path::new(dir).join(tool)))
}

/// `true` when `tool` is installed; otherwise [`skip`]s (scripts/test installs every tool the
/// tests need) and returns `false`.
#[track_caller]
pub fn needs_tool(tool: &str) -> bool {
    if tool_exists(tool) {
        return true;
    }
    skip(format_args!("needs {tool} (scripts/test installs it)"));
    false
}

#[cfg(test)]
mod tests;
