//! L7 and L8: Ctrl+C during `up` cancels cleanly and exits 130; a second concurrent mutating
//! command waits boundedly on the lock and then fails naming the holder, exit 75.

use std::process::Child;
use std::time::Duration;

use super::{wait_until, Project};

fn signal(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// The phase the latest operation of the project's sandbox is in.
fn phase(p: &Project) -> Option<String> {
    p.status()["operation"]["phase"].as_str().map(str::to_owned)
}

/// Starts `up --no-attach` with the debug hook that pauses it at phase `at`, and returns once
/// the operation record shows that phase.
fn up_paused_at(p: &Project, at: &str) -> Child {
    let child = p
        .command(&["up", "--no-attach"])
        .env("AIRLOCK_TEST_PAUSE_AT", at)
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || phase(p).as_deref() == Some(at)),
        "up never reached phase {at}"
    );
    child
}

#[test]
fn ctrl_c_while_waiting_for_the_sandbox_cancels_cleanly_and_exits_130() {
    let p = Project::new();
    let child = up_paused_at(&p, "wait");
    signal(child.id(), "-INT");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("nothing is left running"), "{stderr}");
    let doc = p.status();
    assert_eq!(doc["health"], "absent", "{doc}");
    assert_eq!(doc["operation"]["result"], "cancelled", "{doc}");
    // Nothing half-made blocks the next up.
    p.up();
}

#[test]
fn ctrl_c_after_the_sandbox_is_ready_keeps_it() {
    let p = Project::new();
    let child = up_paused_at(&p, "record");
    signal(child.id(), "-INT");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The sandbox was ready when Ctrl+C came: it is kept, and up says so and exits 130.
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("already ready and is kept"), "{stderr}");
    assert_eq!(p.health(), "ready");
}

#[test]
fn a_second_mutating_command_waits_then_fails_busy_naming_the_holder() {
    let mut p = Project::new();
    let holder = up_paused_at(&p, "cleanup");
    p.env.set_env("AIRLOCK_TEST_LOCK_WAIT_MS", "200");
    let run = p.run(&["down"]);
    run.assert_code(75);
    assert!(
        run.stderr.contains(&holder.id().to_string()),
        "{}",
        run.stderr
    );
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(p.health(), "ready");
}
