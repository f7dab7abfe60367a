//! L7, L8 and issue 4 acceptance: airlock killed mid-`up` at several points, `up` and `down` at
//! the same time, twenty concurrent `up`s. Each leaves a state `status` describes truthfully
//! and the next `up` recovers from.

use std::process::Child;
use std::time::Duration;

use super::{alive, wait_until, Project};

/// Phases of `up` at which the debug-build crash hook aborts airlock.
const PHASES: [&str; 5] = ["cleanup", "prepare", "start", "wait", "record"];

#[test]
fn airlock_killed_mid_up_at_each_phase_is_reported_and_recovered() {
    for phase in PHASES {
        let p = Project::new();
        let out = p
            .command(&["up", "--no-attach"])
            .env("AIRLOCK_TEST_CRASH_AT", phase)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            None,
            "{phase}: up was not aborted: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status = p.run(&["status", "--json"]);
        status.assert_code(1);
        let doc = status.json();
        let health = doc["health"].as_str().unwrap().to_owned();
        assert!(
            ["absent", "stale"].contains(&health.as_str()),
            "{phase}: health {health}: {doc}"
        );
        assert_eq!(doc["operation"]["result"], "interrupted", "{phase}: {doc}");
        assert_eq!(doc["operation"]["phase"], phase, "{phase}: {doc}");
        let up = p.up();
        assert_eq!(up["reused"], false, "{phase}");
        let status = p.run(&["status", "--json"]);
        status.assert_code(0);
        p.run(&["exec", "--", "true"]).assert_code(0);
        let down = p.run(&["down", "--json"]);
        down.assert_code(0);
        // Whatever the crashed `up` had started is gone too (no second sandbox survived).
        let ls = p.run(&["ls", "--json"]).json();
        assert_eq!(
            ls["sandboxes"].as_array().unwrap().len(),
            0,
            "{phase}: {ls}"
        );
        assert_no_keepers_of(&p);
    }
}

/// No keeper process of this world is left.
fn assert_no_keepers_of(p: &Project) {
    let gone = wait_until(Duration::from_secs(10), || !keeper_of(p));
    assert!(gone, "a keeper of this test world is still running");
}

/// Whether a keeper process of this world exists (a zombie has no command line).
fn keeper_of(p: &Project) -> bool {
    let world = p.env.root().to_string_lossy().into_owned();
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        cmd.contains("__keeper") && cmd.contains(&world)
    })
}

/// L2 with the keeper `up` spawns parked before validating: an `up` refused by its
/// validation leaves no process (the parked keeper is killed and reaped before `up` exits)
/// and no file, not even the sandbox's state directory or log.
#[test]
fn a_refused_up_leaves_no_keeper_and_changes_nothing() {
    let p = Project::new();
    let before = p.env.snapshot();
    let refused = p.run(&["up", "--no-attach", "--memory-mb", "1"]);
    refused.assert_code(2);
    assert!(!keeper_of(&p), "the parked keeper outlived the refused up");
    assert_eq!(before.diff(&p.env.snapshot()), Vec::<String>::new());
    // A refused `up` changed nothing the next one trips over.
    p.up();
    p.run(&["down"]).assert_code(0);
    assert_no_keepers_of(&p);
}

fn finish(child: Child) -> (Option<i32>, String, String) {
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn up_and_down_at_the_same_time_serialize_and_leave_a_truthful_state() {
    let p = Project::new();
    for round in 0..3 {
        let up = p.command(&["up", "--no-attach"]).spawn().unwrap();
        let down = p.command(&["down"]).spawn().unwrap();
        let (up_code, _, up_err) = finish(up);
        let (down_code, _, down_err) = finish(down);
        assert_eq!(up_code, Some(0), "round {round}: {up_err}");
        assert_eq!(down_code, Some(0), "round {round}: {down_err}");
        let doc = p.status();
        match doc["health"].as_str().unwrap() {
            "ready" => {
                let guest = doc["guest"]["pid"].as_u64().unwrap();
                assert!(alive(guest));
                p.run(&["exec", "--", "true"]).assert_code(0);
            }
            "absent" => assert_no_keepers_of(&p),
            other => panic!("round {round}: health {other} after up and down: {doc}"),
        }
    }
}

/// `up --no-attach` paused by the debug hook at `at`, a `down` run to its end meanwhile, then
/// `up` resumed: `up`'s exit code and stderr.
fn up_with_a_down_at(p: &Project, at: &str) -> (Option<i32>, String) {
    use std::io::{BufRead, BufReader, Read};
    let mut up = p
        .command(&["up", "--no-attach"])
        .env("AIRLOCK_TEST_PAUSE_AT", at)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(up.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).unwrap();
        assert!(read > 0, "up ended before pausing at {at}: {seen}");
        seen.push_str(&line);
        if line.contains(&format!("pausing at {at}")) {
            break;
        }
    }
    p.run(&["down"]).assert_code(0);
    stderr.read_to_string(&mut seen).unwrap();
    (up.wait().unwrap().code(), seen)
}

/// The race behind `up_and_down_at_the_same_time_…`, made certain: `down` wins the lock after
/// the sandbox is ready, before the agent setup (`home`) or between it and the default
/// session's request (`session`). `up` then starts no session in a sandbox that is gone: it
/// says so and succeeds, like the `down` that ran after it, and `status` says absent.
#[test]
fn a_down_after_up_made_the_sandbox_ready_leaves_both_successful_and_no_session() {
    let p = Project::new();
    for at in ["home", "session"] {
        let (code, stderr) = up_with_a_down_at(&p, at);
        assert_eq!(code, Some(0), "down at {at}: {stderr}");
        assert!(
            stderr.contains("stopped or replaced meanwhile"),
            "down at {at}: {stderr}"
        );
        assert_eq!(p.health(), "absent", "down at {at}");
        assert_no_keepers_of(&p);
    }
    // Nothing of it trips the next `up`.
    p.up();
    p.run(&["exec", "--", "true"]).assert_code(0);
}

#[test]
fn twenty_concurrent_ups_of_one_project_make_exactly_one_sandbox() {
    let p = Project::new();
    let children: Vec<Child> = (0..20)
        .map(|_| p.command(&["up", "--no-attach", "--json"]).spawn().unwrap())
        .collect();
    let mut epochs = Vec::new();
    let mut created = 0;
    for child in children {
        let (code, stdout, stderr) = finish(child);
        assert_eq!(code, Some(0), "{stderr}");
        let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
        if doc["reused"] == false {
            created += 1;
        }
        epochs.push(doc["epoch"].as_str().unwrap().to_owned());
    }
    assert_eq!(created, 1, "more than one up created a sandbox");
    epochs.dedup();
    assert_eq!(epochs.len(), 1, "different epochs: {epochs:?}");
    let ls = p.run(&["ls", "--json"]).json();
    assert_eq!(ls["sandboxes"].as_array().unwrap().len(), 1, "{ls}");
    assert_eq!(p.health(), "ready");
}
