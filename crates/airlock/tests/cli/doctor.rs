//! `airlock doctor`: one line per check, exit 0 only when every required check passes.

use crate::common::TestEnv;

#[test]
fn doctor_json_agrees_with_its_exit_status() {
    let env = TestEnv::new();
    let run = env.run(&["doctor", "--json"]);
    let v = run.json();
    let checks = v["checks"].as_array().expect("checks array");
    assert!(!checks.is_empty());
    let required_failed = checks
        .iter()
        .any(|c| c["required"] == true && c["status"] != "ok");
    assert_eq!(v["ready"], !required_failed, "{v}");
    run.assert_code(if required_failed { 69 } else { 0 });
    if required_failed {
        assert_eq!(v["error"]["code"], "backend.unavailable");
    }
    for c in checks.iter().filter(|c| c["status"] != "ok") {
        assert!(c["fix"].is_string(), "a failed check without a fix: {c}");
    }
}

#[test]
fn doctor_prints_one_line_per_check_and_changes_nothing() {
    let env = TestEnv::new();
    let before = env.snapshot();
    let v = env.run(&["doctor", "--json"]).json();
    let n = v["checks"].as_array().unwrap().len();
    let run = env.run(&["doctor"]);
    let lines = run
        .stdout
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            ["ok ", "missing ", "optional", "warning ", "unused "]
                .iter()
                .any(|p| t.starts_with(p))
        })
        .count();
    assert_eq!(lines, n, "{}", run.stdout);
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn doctor_probes_as_the_unprivileged_invoking_user() {
    let env = TestEnv::new();
    let Some(run) = env.run_as_test_user_in(&env.home, &["doctor", "--json"]) else {
        crate::common::skip_without_test_user();
        return;
    };
    let v = run.json();
    let required_failed = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["required"] == true && c["status"] != "ok");
    run.assert_code(if required_failed { 69 } else { 0 });
    // Nothing in the probes may leave a trace in the user's world.
    assert!(!env.config_home().exists() && !env.state_home().exists());
}

/// Regression: `doctor` printed `ok` on a line saying the cgroup v2 controllers were not
/// available (v1 stood in). A check that finds something missing is never labelled `ok`.
#[test]
fn no_check_says_ok_while_reporting_something_missing() {
    let env = TestEnv::new();
    let v = env.run(&["doctor", "--json"]).json();
    for c in v["checks"].as_array().expect("checks") {
        let detail = c["detail"].as_str().unwrap_or_default();
        if c["status"] == "ok" {
            assert!(
                !detail.contains("not available") && !detail.contains("not mounted"),
                "labelled ok: {c}"
            );
        }
    }
    let run = env.run(&["doctor"]);
    for line in run.stdout.lines() {
        if line.trim_start().starts_with("ok ") {
            assert!(
                !line.contains("not available") && !line.contains("not mounted"),
                "{line}"
            );
        }
    }
}
