//! A keeper started by another airlock version (another host protocol) is never talked to:
//! `status` calls its sandbox `stale` with the exact next action, `exec` refuses naming it, and
//! `down` still stops it, by the ownership proof in the record.

use super::{alive, Project};

/// Rewrites the protocol version the running keeper reported in the sandbox's record, as an
/// `up` of another airlock version would have stored it (`None`: an airlock from before
/// versioning, which stored none).
fn pretend_keeper_version(p: &Project, name: &str, version: Option<u32>) {
    let path = p.state_root().join("lifecycle/sandboxes").join(name);
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let data = doc["data"]["backend_data"].as_object_mut().unwrap();
    assert!(data.contains_key("host_version"), "{doc}");
    match version {
        Some(v) => data.insert("host_version".into(), v.into()),
        None => data.remove("host_version"),
    };
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
}

fn stale_then_stopped_by_down(version: Option<u32>) {
    let p = Project::new();
    let doc = p.up();
    let name = doc["name"].as_str().unwrap().to_owned();
    let keeper = p.record(&name).unwrap()["keeper"]["pid"].as_u64().unwrap();
    assert!(alive(keeper));
    pretend_keeper_version(&p, &name, version);

    let st = p.status();
    assert_eq!(st["health"], "stale", "{st}");
    let next = st["next"].as_str().unwrap_or_default();
    assert!(next.starts_with("airlock down"), "{st}");
    let warned = st.to_string();
    assert!(warned.contains("another airlock version"), "{st}");

    let exec = p.run(&["exec", "--", "true"]);
    exec.assert_code(1);
    assert!(exec.stderr.contains("airlock down"), "{}", exec.stderr);
    // The keeper was not stopped, nor asked anything, by status or exec.
    assert!(alive(keeper));

    p.run(&["down"]).assert_code(0);
    assert!(
        !alive(keeper),
        "down left the other version's keeper running"
    );
    assert_eq!(p.health(), "absent");
}

#[test]
fn a_sandbox_recorded_by_a_newer_airlock_is_stale_and_down_stops_it() {
    stale_then_stopped_by_down(Some(99));
}

#[test]
fn a_sandbox_recorded_by_an_airlock_before_versioning_is_stale_and_down_stops_it() {
    stale_then_stopped_by_down(None);
}

/// An upgrade: `up` ran from a binary that was then deleted and replaced by another airlock
/// version. The new binary still proves the old keeper is this sandbox's (pid, start time,
/// command line; the keeper runs `/proc/self/exe`, which keeps the deleted file's inode), calls
/// the sandbox stale, and `down` stops it.
#[test]
fn down_stops_a_keeper_whose_binary_was_replaced_by_another_version() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    let old = p.env.root().join("old-airlock");
    std::fs::copy(crate::common::AIRLOCK, &old).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    let up = crate::common::Run::from(
        p.env
            .command_for(old.as_os_str(), &p.dir)
            .args(["up", "--no-attach", "--json"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap(),
    );
    up.assert_code(0);
    let name = up.json()["name"].as_str().unwrap().to_owned();
    let keeper = p.record(&name).unwrap()["keeper"]["pid"].as_u64().unwrap();
    // The upgrade: the old file is gone, and the old keeper spoke another protocol version.
    std::fs::remove_file(&old).unwrap();
    std::fs::write(&old, b"#!/bin/sh\nexit 99\n").unwrap();
    pretend_keeper_version(&p, &name, Some(99));
    let exe = std::fs::read_link(format!("/proc/{keeper}/exe")).unwrap();
    assert!(
        exe.to_string_lossy().ends_with("(deleted)"),
        "{}",
        exe.display()
    );

    assert_eq!(p.health(), "stale");
    p.run(&["down"]).assert_code(0);
    assert!(
        !alive(keeper),
        "down left the replaced binary's keeper running"
    );
    assert_eq!(p.health(), "absent");
}
