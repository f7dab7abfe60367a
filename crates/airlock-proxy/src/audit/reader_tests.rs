use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::audit::{AuditLog, Mode, Rotation, Verdict};

fn entry(host: &str) -> AuditEntry {
    AuditEntry {
        time: "2026-01-01T00:00:00.000Z".into(),
        method: "GET".into(),
        host: host.into(),
        port: 443,
        decision: Verdict::Allow,
        rule: "allow x (user config)".into(),
        status: 200,
        bytes_up: 0,
        bytes_down: 5,
        mode: Mode::Intercept,
        secrets: vec!["TOKEN".into()],
        warnings: vec![],
        repeated: None,
        last: None,
    }
}

#[test]
fn follower_sees_appended_lines_once_and_skips_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("sub/audit.jsonl");
    let log = AuditLog::open(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let mut follow = AuditFollower::from_end(&path).unwrap();
    log.append(&entry("a.example"));
    assert_eq!(follow.poll().unwrap(), [entry("a.example")]);
    assert!(follow.poll().unwrap().is_empty());
    let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
    raw.write_all(br#"{"time":"#).unwrap();
    assert!(
        follow.poll().unwrap().is_empty(),
        "a torn line is not an entry yet"
    );
    raw.write_all(b"\n").unwrap();
    log.append(&entry("b.example"));
    assert_eq!(follow.poll().unwrap(), [entry("b.example")]);
    assert_eq!(read_entries(&path).unwrap().len(), 2);
}

#[test]
fn absent_log_reads_as_empty() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(read_entries(&tmp.path().join("none")).unwrap().is_empty());
}

#[test]
fn follower_reads_across_rotations_between_polls_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("audit.jsonl");
    let rotation = Rotation {
        max_bytes: 1024,
        keep: 5,
    };
    let log = AuditLog::open_with(&path, rotation).unwrap();
    let mut from_start = AuditFollower::from_start(&path);
    log.append(&entry("h0.example"));
    let mut follow = AuditFollower::from_end(&path).unwrap();
    let mut seen = Vec::new();
    for round in 0..4 {
        // About two rotations' worth between polls.
        for i in 0..8 {
            log.append(&entry(&format!("h{}.example", 1 + round * 8 + i)));
        }
        seen.extend(follow.poll().unwrap());
    }
    let hosts: Vec<_> = seen.iter().map(|e| e.host.clone()).collect();
    let expect: Vec<_> = (1..=32).map(|i| format!("h{i}.example")).collect();
    assert_eq!(hosts, expect);
    assert!(rotated_path(&path, 2).exists(), "the test did rotate");
    let all = from_start.poll().unwrap();
    assert_eq!(all.last().unwrap().host, "h32.example");
    assert_eq!(all, read_entries(&path).unwrap());
}
