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
