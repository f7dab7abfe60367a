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
