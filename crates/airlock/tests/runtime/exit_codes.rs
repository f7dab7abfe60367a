//! O5: one test per exit status, each driven through the real binary by a real cause: 0
//! success, 1 the operation failed, 2 usage, 69 the backend is unavailable on this host, 70 an
//! internal failure, 75 busy. 130 (Ctrl+C) is driven in `run_end` (for `run`) and in
//! `lifecycle::interrupt` (for `up`).

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::harness::Rt;
use crate::common::{wait_until, Run, AIRLOCK};

#[test]
fn exit_0_when_the_command_succeeds() {
    let rt = Rt::invoker();
    rt.sh(&[], "true").assert_code(0);
}

#[test]
fn exit_1_when_the_operation_fails_because_no_sandbox_is_running() {
    let rt = Rt::invoker();
    let run = rt.run_args(&["exec", "--", "true"], None);
    run.assert_code(1);
}

/// The shell's codes for a command that could not be started: 127 when no `PATH` entry has
/// it, 126 when it was found but cannot be executed (no execute permission, a directory).
#[test]
fn exit_127_for_a_command_not_found_and_126_for_one_that_cannot_be_executed() {
    let rt = Rt::invoker();
    rt.run_args(&["run", "--", "airlock-no-such-command"], None)
        .assert_code(127);
    rt.run_args(&["run", "--", "/etc/passwd"], None)
        .assert_code(126);
    rt.run_args(&["run", "--", "/etc"], None).assert_code(126);
}

#[test]
fn exit_2_for_a_usage_error() {
    let rt = Rt::invoker();
    let run = rt.run_args(&["run", "--no-such-flag", "--", "true"], None);
    run.assert_code(2);
}

/// User namespaces switched off for real: inside an outer user and mount namespace, the
/// per-namespace limit `user.max_user_namespaces` is set to 0, so airlock's `unshare` fails
/// the way it does on a host that forbids them.
#[test]
fn exit_69_when_the_host_cannot_create_user_namespaces() {
    // Run by a non-root user, the outer `unshare -Ur` makes airlock a root invoker without a
    // root-owned /run: it fails claiming an id range before it reaches the namespaces.
    if !airlock_testkit::needs_root("switching user namespaces off in an outer namespace") {
        return;
    }
    let rt = Rt::invoker();
    for verb in [&["run", "--", "true"][..], &["up", "--no-attach"]] {
        let airlock = rt.command(&rt.project, verb);
        let mut line = vec![AIRLOCK.to_owned()];
        line.extend(verb.iter().map(|a| (*a).to_owned()));
        let mut cmd = Command::new("unshare");
        cmd.args(["-Urm", "sh", "-c"])
            .arg(format!(
                "echo 0 > /proc/sys/user/max_user_namespaces || exit 99; exec {}",
                line.join(" ")
            ))
            .current_dir(&rt.project)
            .env_clear()
            .stdin(Stdio::null());
        for (k, v) in airlock.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        let run = Run::from(cmd.output().expect("run unshare"));
        assert_ne!(
            run.code,
            Some(99),
            "cannot switch user namespaces off: {run:?}"
        );
        run.assert_code(69);
        assert!(
            run.stderr.contains("backend.namespaces"),
            "{verb:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("airlock doctor"), "{}", run.stderr);
    }
}

#[test]
fn exit_70_when_the_sandbox_drops_the_command_stream() {
    let rt = Rt::invoker();
    let run = Run::from(
        rt.command(&rt.project, &["run", "--", "true"])
            .env("AIRLOCK_TEST_FAULT", "stream-closed")
            .stdin(Stdio::null())
            .output()
            .unwrap(),
    );
    run.assert_code(70);
    assert!(run.stderr.contains("run.channel"), "{}", run.stderr);
}

#[test]
fn exit_75_when_another_command_holds_the_sandboxs_lock() {
    let rt = Rt::invoker();
    let status = Run::from(
        rt.command(&rt.project, &["status", "--json"])
            .stdin(Stdio::null())
            .output()
            .unwrap(),
    );
    let name = status.json()["name"].as_str().unwrap().to_owned();
    let locks = rt.env.state_home().join("airlock/lifecycle/locks");
    // Let airlock create its directories, then hold the lock as another process would.
    rt.run_args(&["down"], None).assert_code(0);
    let lock = locks.join(format!("{name}.lock"));
    // Its own process group, so the `sleep` flock forks is killed with it.
    let mut holder = Command::new("flock")
        .args(["-x"])
        .arg(&lock)
        .args(["sleep", "30"])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || {
            Command::new("flock")
                .args(["-n", "-x"])
                .arg(&lock)
                .arg("true")
                .status()
                .is_ok_and(|s| !s.success())
        }),
        "the test could not take the lock"
    );
    let run = Run::from(
        rt.command(&rt.project, &["down"])
            .env("AIRLOCK_TEST_LOCK_WAIT_MS", "200")
            .stdin(Stdio::null())
            .output()
            .unwrap(),
    );
    let group = format!("-{}", holder.id());
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
    holder.wait().unwrap();
    run.assert_code(75);
    assert!(run.stderr.contains("lock"), "{}", run.stderr);
}
