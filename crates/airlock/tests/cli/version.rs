//! `airlock version`: format of the build label and revision; touches no state.

use crate::common::TestEnv;

/// `YYYY.MM.DD.HHMMZ` with a plausible date and time.
fn is_build_label(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let num = |r: std::ops::Range<usize>| s[r].parse::<u32>().unwrap_or(99);
    b.len() == 16
        && digits(0..4)
        && b[4] == b'.'
        && digits(5..7)
        && b[7] == b'.'
        && digits(8..10)
        && b[10] == b'.'
        && digits(11..15)
        && b[15] == b'Z'
        && (1..=12).contains(&num(5..7))
        && (1..=31).contains(&num(8..10))
        && num(11..13) < 24
        && num(13..15) < 60
}

fn is_revision(s: &str) -> bool {
    s == "unknown" || (s.len() >= 7 && s.chars().all(|c| c.is_ascii_hexdigit()))
}

#[test]
fn build_label_checker_rejects_malformed_labels() {
    assert!(is_build_label("2026.11.29.1835Z"));
    for bad in [
        "2026.13.29.1835Z",
        "2026.11.29.1835",
        "2026-11-29.1835Z",
        "2026.11.29.2460Z",
    ] {
        assert!(!is_build_label(bad), "{bad}");
    }
}

#[test]
fn version_prints_release_build_label_and_revision() {
    let env = TestEnv::new();
    let run = env.run(&["version"]);
    run.assert_code(0);
    let field = |name: &str| {
        run.stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} line in:\n{}", run.stdout))
            .to_owned()
    };
    assert_eq!(field("version"), env!("CARGO_PKG_VERSION"));
    assert!(is_build_label(&field("build")), "{}", run.stdout);
    assert!(is_revision(&field("revision")), "{}", run.stdout);
}

#[test]
fn version_json_is_one_document_with_the_same_fields() {
    let env = TestEnv::new();
    let run = env.run(&["version", "--json"]);
    run.assert_code(0);
    let v = run.json();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(is_build_label(v["build"].as_str().unwrap()), "{v}");
    assert!(is_revision(v["revision"].as_str().unwrap()), "{v}");
}

#[test]
fn version_touches_no_state() {
    let env = TestEnv::new();
    let before = env.snapshot();
    env.run(&["version"]).assert_code(0);
    env.run(&["--json", "version"]).assert_code(0);
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}
