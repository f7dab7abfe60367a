//! Issue 13 item 4: what an idle persistent sandbox keeps running on the host — one keeper
//! process (no janitor beside it, no egress proxy before the first request) and a guest PID 1
//! with no thread besides its main one (its relay listeners are in its event loop) — and what
//! replaces the janitor: `down` removes the cgroup a killed keeper left, proving ownership as
//! before.

use std::time::Duration;

use super::{alive, cgroup_dirs, kill9, wait_until, Project};

/// Every child of `pid` (over all its threads) with its command line.
fn children(pid: u64) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in list
            .split_whitespace()
            .filter_map(|c| c.parse::<u64>().ok())
        {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            out.push((child, cmdline));
        }
    }
    out
}

fn threads(pid: u64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

#[test]
fn an_idle_sandbox_runs_no_proxy_and_a_single_threaded_pid1_even_with_egress() {
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let record = p.record(&name).expect("record after up");
    let keeper = record["keeper"]["pid"].as_u64().unwrap();
    let guest = record["guest"]["pid"].as_u64().unwrap();
    let init = record["backend_data"]["init"]["pid"].as_u64().unwrap();

    // The sandbox has egress (the default configuration), so PID 1 has a relay listener.
    let start = p
        .state_root()
        .join("sandboxes")
        .join(&name)
        .join("start.json");
    let start: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(start).unwrap()).unwrap();
    assert!(!start["spec"]["egress"].is_null(), "no egress: {start}");
    p.run(&["sessions", "kill", "main"]).assert_code(0);
    p.run(&["exec", "--", "true"]).assert_code(0);

    // The keeper's only child is the init stage: no janitor (a second host-side owner process
    // per sandbox) and no egress proxy, since nothing inside made a request.
    let kids = children(keeper);
    assert!(
        kids.iter().any(|(pid, _)| *pid == init),
        "the init stage is not the keeper's child: {kids:?}"
    );
    let others: Vec<_> = kids.iter().filter(|(pid, _)| *pid != init).collect();
    assert!(
        others.is_empty(),
        "the keeper runs more than the sandbox: {others:?}"
    );

    // Without the session's threads, PID 1 is its main thread alone (no signal thread, no
    // relay thread), and is again after serving a command.
    let idle = 1;
    assert!(
        wait_until(Duration::from_secs(10), || threads(guest) == idle),
        "an idle PID 1 runs {} threads, not {idle}",
        threads(guest)
    );
    p.run(&["exec", "--", "true"]).assert_code(0);
    assert!(
        wait_until(Duration::from_secs(10), || threads(guest) == idle),
        "PID 1 keeps {} threads after a command ended, not {idle}",
        threads(guest)
    );
}

#[test]
fn down_removes_the_cgroup_a_killed_keeper_left_behind() {
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let record = p.record(&name).expect("record after up");
    let keeper = record["keeper"]["pid"].as_u64().unwrap();
    let guest = record["guest"]["pid"].as_u64().unwrap();
    let instance = record["epoch"]["instance"].as_str().unwrap().to_owned();
    let had_cgroup = !cgroup_dirs(&instance).is_empty();

    kill9(keeper);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(guest)),
        "PID 1 outlived its killed keeper"
    );
    assert!(wait_until(Duration::from_secs(10), || p.health() == "stale"));
    p.run(&["down"]).assert_code(0);
    assert_eq!(p.health(), "absent");
    if had_cgroup {
        assert!(
            cgroup_dirs(&instance).is_empty(),
            "down left the killed keeper's cgroup: {:?}",
            cgroup_dirs(&instance)
        );
    }
}

#[test]
fn exec_refuses_a_sandbox_whose_recorded_keeper_is_not_provably_ours() {
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    p.run(&["exec", "--", "true"]).assert_code(0);
    // An unrelated process now holds the keeper's recorded pid (as after pid reuse).
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let path = p.state_root().join("lifecycle/sandboxes").join(&name);
    let original = std::fs::read_to_string(&path).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&original).unwrap();
    doc["data"]["keeper"]["pid"] = bystander.id().into();
    std::fs::write(&path, doc.to_string()).unwrap();

    let exec = p.run(&["exec", "--", "true"]);
    exec.assert_code(1);
    assert!(exec.stderr.contains("exec.not_ready"), "{}", exec.stderr);
    assert_ne!(p.health(), "ready");
    assert!(alive(u64::from(bystander.id())));
    bystander.kill().unwrap();
    bystander.wait().unwrap();
    // The real keeper is still recorded nowhere: put the record back so drop's `down` stops it.
    std::fs::write(&path, original).unwrap();
}
