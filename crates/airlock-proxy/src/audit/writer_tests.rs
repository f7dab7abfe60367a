use std::time::{Duration, Instant};

use super::*;
use crate::audit::{read_entries, Mode};

fn denial(host: &str, second: u32) -> AuditEntry {
    AuditEntry {
        time: format!("2026-01-01T00:00:{second:02}.000Z"),
        method: "GET".into(),
        host: host.into(),
        port: 443,
        decision: Verdict::Deny,
        rule: "no rule allows it (preset none)".into(),
        status: 403,
        bytes_up: 0,
        bytes_down: 0,
        mode: Mode::Http,
        secrets: vec![],
        warnings: vec![],
        repeated: None,
        last: None,
    }
}

fn allowed(i: usize) -> AuditEntry {
    AuditEntry {
        decision: Verdict::Allow,
        status: 200,
        rule: format!("allow h{i}.example (user config)"),
        ..denial(&format!("h{i}.example"), 0)
    }
}

#[test]
fn identical_denials_collapse_into_one_line_with_an_exact_count() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap();
    let t0 = Instant::now();
    for i in 0..1000u32 {
        log.append_at(&denial("evil.example", i % 60), t0);
    }
    log.append_at(&allowed(1), t0);
    let entries = read_entries(&path).unwrap();
    assert_eq!(entries.len(), 3, "{entries:#?}");
    assert_eq!(entries[0].repeated, None, "the first is written as it is");
    assert_eq!(entries[1].repeated, Some(999));
    assert_eq!(entries[1].time, "2026-01-01T00:00:01.000Z");
    assert_eq!(entries[1].last.as_deref(), Some("2026-01-01T00:00:39.000Z"));
    let total: u64 = entries[..2].iter().map(AuditEntry::count).sum();
    assert_eq!(total, 1000);
    assert_eq!(entries[2].host, "h1.example");
}

#[test]
fn different_denials_are_not_merged_and_a_single_repeat_is_a_plain_line() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap();
    let t0 = Instant::now();
    for host in ["a.example", "a.example", "b.example", "a.example"] {
        log.append_at(&denial(host, 0), t0);
    }
    log.flush();
    let hosts: Vec<_> = read_entries(&path)
        .unwrap()
        .into_iter()
        .map(|e| (e.host, e.repeated))
        .collect();
    let expect = [
        ("a.example", None),
        ("a.example", None),
        ("b.example", None),
        ("a.example", None),
    ];
    let expect: Vec<_> = expect.iter().map(|(h, r)| (h.to_string(), *r)).collect();
    assert_eq!(hosts, expect);
}

#[test]
fn a_long_run_of_repeats_is_written_once_per_window_and_idle_runs_are_flushed() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap();
    let t0 = Instant::now();
    // 10 repeats a second for 150 s: one line per COLLAPSE_WINDOW while it lasts.
    for i in 0..1500u64 {
        log.append_at(
            &denial("evil.example", 0),
            t0 + Duration::from_millis(100 * i),
        );
    }
    let written = read_entries(&path).unwrap();
    assert_eq!(written.len(), 3, "first + two full windows: {written:#?}");
    let last = t0 + Duration::from_millis(100 * 1499);
    log.flush_idle(last + COLLAPSE_IDLE / 2);
    assert_eq!(read_entries(&path).unwrap().len(), 3, "not idle yet");
    log.flush_idle(last + COLLAPSE_IDLE);
    let entries = read_entries(&path).unwrap();
    assert_eq!(entries.len(), 4);
    assert_eq!(entries.iter().map(AuditEntry::count).sum::<u64>(), 1500);
}

#[test]
fn counted_repeats_are_written_when_the_log_is_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("audit.jsonl");
    let log = AuditLog::open(&path).unwrap();
    for _ in 0..5 {
        log.append(&denial("evil.example", 0));
    }
    drop(log);
    let entries = read_entries(&path).unwrap();
    assert_eq!(entries.iter().map(AuditEntry::count).sum::<u64>(), 5);
    assert_eq!(entries.len(), 2);
}

#[test]
fn rotation_keeps_a_bounded_number_of_bounded_files_and_reading_keeps_order() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("audit.jsonl");
    let rotation = Rotation {
        max_bytes: 4096,
        keep: 3,
    };
    let log = AuditLog::open_with(&path, rotation).unwrap();
    for i in 0..2000 {
        log.append(&allowed(i));
    }
    for i in 1..=3 {
        let len = std::fs::metadata(rotated_path(&path, i)).unwrap().len();
        assert!(len <= 4096, ".{i} holds {len} bytes");
    }
    assert!(std::fs::metadata(&path).unwrap().len() <= 4096);
    assert!(
        !rotated_path(&path, 4).exists(),
        "more than `keep` rotated files"
    );
    let hosts: Vec<usize> = read_entries(&path)
        .unwrap()
        .iter()
        .map(|e| e.host[1..e.host.find('.').unwrap()].parse().unwrap())
        .collect();
    assert_eq!(*hosts.last().unwrap(), 1999, "the newest entry is last");
    assert!(hosts.len() > 50, "{}", hosts.len());
    assert!(
        hosts.windows(2).all(|w| w[1] == w[0] + 1),
        "entries across files are in order without gaps"
    );
}
