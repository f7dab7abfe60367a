//! Frozen schema snapshot: `schema/protocol.json` describes the wire format (versions, frame
//! kinds, frame limit and the JSON schema of every control message). Any change to the message
//! set fails this test until it is re-blessed on purpose with `BLESS=1 cargo test -p
//! airlock-protocol`, which is the moment to bump `MAX_VERSION` and record `Message::since`.

use airlock_protocol::{FrameKind, Message, MAX_FRAME_LEN, MAX_VERSION, MIN_VERSION};

fn current_snapshot() -> String {
    let kinds: serde_json::Map<String, serde_json::Value> = FrameKind::ALL
        .iter()
        .map(|kind| (kind.name().to_string(), serde_json::json!(*kind as u8)))
        .collect();
    let doc = serde_json::json!({
        "versions": { "min": MIN_VERSION, "max": MAX_VERSION },
        "frame": { "header": "kind u8, length u32 big-endian", "max_len": MAX_FRAME_LEN, "kinds": kinds },
        "control_message": schemars::schema_for!(Message),
    });
    let mut doc = doc;
    strip_descriptions(&mut doc);
    serde_json::to_string_pretty(&doc).expect("schema serializes") + "\n"
}

/// Doc comments are not wire format: dropping them keeps the snapshot about structure only.
fn strip_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("description");
            map.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// The host↔host messages (`airlock_protocol::host`): their version, the keeper's mode bytes
/// and the JSON schema of each message. The start request's `spec` is the backend's own type.
fn current_host_snapshot() -> String {
    use airlock_protocol::host::{
        KeeperAnswer, KeeperReport, PortsReply, PortsRequest, ProxyAnswer, ProxyStart,
        StartRequest, HOST_VERSION, MODE_DETACHED, MODE_PORTS, MODE_RELOAD, MODE_STREAM,
        PROXY_RELOAD,
    };
    let mut doc = serde_json::json!({
        "version": HOST_VERSION,
        "keeper_modes": {
            "stream": (MODE_STREAM as char).to_string(),
            "detached": (MODE_DETACHED as char).to_string(),
            "reload": (MODE_RELOAD as char).to_string(),
            "ports": (MODE_PORTS as char).to_string(),
        },
        "proxy_requests": [PROXY_RELOAD],
        "start_request": schemars::schema_for!(StartRequest<serde_json::Value>),
        "keeper_report": schemars::schema_for!(KeeperReport),
        "keeper_answer": schemars::schema_for!(KeeperAnswer),
        "proxy_start": schemars::schema_for!(ProxyStart),
        "proxy_answer": schemars::schema_for!(ProxyAnswer),
        "ports_request": schemars::schema_for!(PortsRequest),
        "ports_reply": schemars::schema_for!(PortsReply),
    });
    strip_descriptions(&mut doc);
    serde_json::to_string_pretty(&doc).expect("schema serializes") + "\n"
}

#[test]
fn host_schema_matches_the_blessed_snapshot() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/host.json");
    let current = current_host_snapshot();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &current).expect("write snapshot");
        return;
    }
    let blessed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        blessed == current,
        "the host protocol schema changed; bump HOST_VERSION and re-bless with \
         `BLESS=1 cargo test -p airlock-protocol`.\n--- current ---\n{current}"
    );
}

#[test]
fn wire_schema_matches_the_blessed_snapshot() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/protocol.json");
    let current = current_snapshot();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &current).expect("write snapshot");
        return;
    }
    let blessed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        blessed == current,
        "the protocol schema changed; if this is intended, bump the version as needed and re-bless with \
         `BLESS=1 cargo test -p airlock-protocol`.\n--- current ---\n{current}"
    );
}
