//! `airlock policy ls|allow|deny|check|log` (PRODUCT §2, N2, N7, C1, C6, O5).

use crate::common::TestEnv;

const COMMENTED: &str = "\
# my airlock settings — keep this comment
memory_mb = 1024 # and this one

[network]
# why: the company mirror
allow = [\"mirror.example.com\"]
";

fn user_config(env: &TestEnv) -> String {
    std::fs::read_to_string(env.user_config()).expect("read user config")
}

#[test]
fn allow_and_deny_round_trip_keeps_the_user_configs_comments() {
    let env = TestEnv::new();
    env.write_user_config(COMMENTED);
    env.run(&["policy", "allow", "api.example.com"])
        .assert_code(0);
    env.run(&["policy", "deny", "tracker.example.net:8443"])
        .assert_code(0);
    let text = user_config(&env);
    for kept in [
        "# my airlock settings — keep this comment",
        "memory_mb = 1024 # and this one",
        "# why: the company mirror",
        "allow = [\"mirror.example.com\", \"api.example.com\"]",
        "deny = [\"tracker.example.net:8443\"]",
    ] {
        assert!(text.contains(kept), "{kept:?} missing from:\n{text}");
    }
    let v = env.run(&["policy", "ls", "--json"]).json();
    let rules: Vec<String> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {} {}", r["action"], r["pattern"], r["origin"]["kind"]))
        .collect();
    assert_eq!(
        rules,
        [
            r#""deny" "tracker.example.net:8443" "user""#,
            r#""allow" "mirror.example.com" "user""#,
            r#""allow" "api.example.com" "user""#,
        ]
    );
}

#[test]
fn denying_an_allowed_pattern_replaces_the_allow_instead_of_contradicting_it() {
    let env = TestEnv::new();
    env.write_user_config(COMMENTED);
    let run = env.run(&["policy", "deny", "Mirror.Example.com", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["removed_opposite"], true);
    let text = user_config(&env);
    assert!(text.contains("allow = []"), "{text}");
    assert!(text.contains("deny = [\"mirror.example.com\"]"), "{text}");
    assert!(text.contains("# why: the company mirror"), "{text}");
}

#[test]
fn allow_without_a_user_config_creates_it_from_the_template() {
    let env = TestEnv::new();
    let run = env.run(&["policy", "allow", "api.example.com", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["created"], true);
    let text = user_config(&env);
    assert!(text.starts_with("#:schema ./config.schema.json"), "{text}");
    assert!(text.contains("allow = [\"api.example.com\"]"), "{text}");
    assert!(env
        .user_config()
        .with_file_name("config.schema.json")
        .is_file());
    env.run(&["plan"]).assert_code(0);
}

#[test]
fn a_duplicate_rule_is_an_idempotent_success_that_writes_nothing() {
    let env = TestEnv::new();
    env.write_user_config(COMMENTED);
    let before = env.snapshot();
    let run = env.run(&["policy", "allow", "MIRROR.example.com", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["changed"], false);
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
    let human = env.run(&["policy", "allow", "mirror.example.com"]);
    human.assert_code(0);
    assert!(
        human.stdout.contains("nothing was written"),
        "{}",
        human.stdout
    );
}

#[test]
fn invalid_patterns_exit_2_and_change_nothing() {
    let env = TestEnv::new();
    env.write_user_config(COMMENTED);
    let before = env.snapshot();
    for bad in [
        "bad..example.com",
        "*",
        "*.com",
        "a.*.example.com",
        "example.com:0",
        "example.com:99999",
        "exa mple.com",
        "127.1",
    ] {
        for verb in ["allow", "deny"] {
            let run = env.run(&["policy", verb, bad, "--json"]);
            run.assert_code(2);
            assert_eq!(run.json()["error"]["code"], "policy.bad_pattern", "{bad}");
        }
    }
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn a_broken_user_config_is_reported_and_never_rewritten() {
    let env = TestEnv::new();
    let broken = "# mine\nmemroy_mb = 1024\n";
    env.write_user_config(broken);
    let run = env.run(&["policy", "allow", "api.example.com"]);
    run.assert_code(2);
    assert!(run.stderr.contains("memroy_mb"), "{}", run.stderr);
    assert_eq!(user_config(&env), broken);
}

/// A user config with its own rules under preset `none`, so only those rules decide.
fn rules_env() -> TestEnv {
    let env = TestEnv::new();
    env.write_user_config(
        "[network]\npreset = \"none\"\n\
         allow = [\"**.example.com\", \"*.example.org\", \"db.internal.test:5432\"]\n\
         deny = [\"bad.example.com\"]\n",
    );
    env
}

#[test]
fn check_exits_0_when_allowed_and_names_the_deciding_rule() {
    let env = rules_env();
    let run = env.run(&["policy", "check", "api.example.com"]);
    run.assert_code(0);
    assert!(
        run.stdout.starts_with("allowed  api.example.com:443"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("allow **.example.com (user config)"),
        "{}",
        run.stdout
    );
    let v = env.run(&["policy", "check", "db.internal.test:5432", "--json"]);
    v.assert_code(0);
    let v = v.json();
    assert_eq!(v["allowed"], true);
    assert_eq!(v["rule"]["pattern"], "db.internal.test:5432");
}

#[test]
fn check_exits_1_when_denied_and_deny_beats_allow() {
    let env = rules_env();
    let run = env.run(&["policy", "check", "bad.example.com"]);
    run.assert_code(1);
    assert!(
        run.stdout.starts_with("denied  bad.example.com:443"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("deny bad.example.com (user config)"),
        "{}",
        run.stdout
    );
    // A portless deny covers every port, not just 80/443.
    let v = env.run(&["policy", "check", "bad.example.com:8080", "--json"]);
    v.assert_code(1);
    assert_eq!(v.json()["rule"]["action"], "deny");
}

#[test]
fn check_applies_the_wildcard_semantics_of_n2() {
    let env = rules_env();
    let cases = [
        // `**.` any depth, never the bare domain.
        ("a.example.com", 0),
        ("a.b.c.example.com", 0),
        ("example.com", 1),
        // `*.` exactly one extra label, never the bare domain.
        ("x.example.org", 0),
        ("x.y.example.org", 1),
        ("example.org", 1),
        // Portless allow rules cover 80 and 443 only; explicit ports only themselves.
        ("a.example.com:80", 0),
        ("a.example.com:8443", 1),
        ("db.internal.test", 1),
        // Lookalikes do not match.
        ("example.com.evil.net", 1),
        ("notexample.com", 1),
    ];
    for (target, code) in cases {
        let run = env.run(&["policy", "check", target, "--json"]);
        assert_eq!(run.code, Some(code), "{target}: {}", run.stdout);
        assert_eq!(run.json()["allowed"], code == 0, "{target}");
    }
}

#[test]
fn check_of_a_default_denial_offers_the_allow_command() {
    let env = rules_env();
    let v = env.run(&["policy", "check", "new.example.net:8443", "--json"]);
    v.assert_code(1);
    let v = v.json();
    assert_eq!(v["rule"], serde_json::Value::Null);
    assert_eq!(v["hint"], "airlock policy allow new.example.net:8443");
}

#[test]
fn check_refuses_a_pattern_as_a_target_with_a_usage_error() {
    let env = rules_env();
    for bad in ["*.example.com", "bad..name", "host:0"] {
        let run = env.run(&["policy", "check", bad, "--json"]);
        run.assert_code(2);
        assert_eq!(run.json()["error"]["code"], "policy.bad_target", "{bad}");
    }
}

#[test]
fn untrusted_project_rules_are_listed_as_ignored_and_do_not_widen() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.write_project_config(
        &project,
        "[network]\nallow = [\"widen.example.org\"]\ndeny = [\"github.com\"]\n",
    );
    let run = env.run_in(&project, &["policy", "ls"]);
    run.assert_code(0);
    assert!(
        run.stdout.lines().any(|l| l.contains("ignored")
            && l.contains("widen.example.org")
            && l.contains("airlock trust")),
        "{}",
        run.stdout
    );
    let v = env.run_in(&project, &["policy", "ls", "--json"]).json();
    assert_eq!(v["ignored"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["ignored"][0]["value"], "widen.example.org");
    // Ignored means ignored: the widening rule does not allow, the tightening one denies.
    env.run_in(&project, &["policy", "check", "widen.example.org"])
        .assert_code(1);
    let deny = env.run_in(&project, &["policy", "check", "github.com"]);
    deny.assert_code(1);
    assert!(deny.stdout.contains("(project config)"), "{}", deny.stdout);
    // Once trusted, the project's allow applies.
    env.run_in(&project, &["trust"]).assert_code(0);
    env.run_in(&project, &["policy", "check", "widen.example.org"])
        .assert_code(0);
}

#[test]
fn allow_warns_when_a_project_deny_still_decides() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.write_project_config(&project, "[network]\ndeny = [\"blocked.example.com\"]\n");
    let run = env.run_in(&project, &["policy", "allow", "blocked.example.com"]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("still denied") && run.stderr.contains("(project config)"),
        "{}",
        run.stderr
    );
}

#[test]
fn log_without_a_sandbox_says_so_and_exits_0() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let run = env.run_in(&project, &["policy", "log"]);
    run.assert_code(0);
    assert!(run.stdout.contains("no audit log"), "{}", run.stdout);
    let v = env.run_in(&project, &["policy", "log", "--json"]);
    v.assert_code(0);
    assert_eq!(v.json()["entries"], serde_json::json!([]));
}

/// Records a sandbox for `project` the way the lifecycle does (no sandbox runs) and returns
/// its audit log path.
fn record_sandbox(env: &TestEnv, project: &std::path::Path) -> std::path::PathBuf {
    use airlock_core::lifecycle::Stores;
    use airlock_core::names::SandboxName;
    use airlock_core::records::{Epoch, Phase, PlanSummary, SandboxPaths, SandboxRecord};
    let name = SandboxName::for_project(project);
    let state_dir = env
        .state_home()
        .join("airlock/sandboxes")
        .join(name.as_str());
    std::fs::create_dir_all(&state_dir).unwrap();
    let record = SandboxRecord {
        name: name.clone(),
        project_root: project.to_owned(),
        backend: "linux".into(),
        plan: PlanSummary {
            image: "host".into(),
            workspaces: vec![],
            mounts: vec![],
            home: env.home.clone(),
            memory_mb: None,
            pids_max: None,
            cpus: None,
        },
        epoch: Epoch {
            instance: "0".into(),
            boot_nonce: "0".into(),
        },
        phase: Phase::Ready,
        keeper: None,
        guest: None,
        created_ms: 0,
        ready_ms: None,
        paths: SandboxPaths {
            state_dir: state_dir.clone(),
            runtime_dir: env
                .runtime_dir
                .join("airlock/sandboxes")
                .join(name.as_str()),
        },
        backend_data: serde_json::Value::Null,
    };
    let stores = Stores::open(&env.state_home().join("airlock")).unwrap();
    stores
        .sandboxes
        .write(name.as_str(), None, &record)
        .unwrap();
    state_dir.join("audit.jsonl")
}

fn audit_line(host: &str, decision: &str) -> String {
    serde_json::json!({
        "time": "2026-01-01T00:00:00.000Z", "method": "GET", "host": host, "port": 80,
        "decision": decision, "rule": "no rule allows it (preset dev)", "status": 403,
        "bytes_up": 0, "bytes_down": 0, "mode": "http", "secrets": [], "warnings": [],
    })
    .to_string()
        + "\n"
}

#[test]
fn log_prints_the_sandboxs_entries_with_control_characters_escaped() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let log = record_sandbox(&env, &project);
    let quiet = env.run_in(&project, &["policy", "log"]);
    quiet.assert_code(0);
    assert!(
        quiet.stdout.contains("no request has been logged yet"),
        "{}",
        quiet.stdout
    );
    let hostile = "evil\u{1b}]0;owned\u{7}.example";
    std::fs::write(
        &log,
        audit_line(hostile, "deny") + &audit_line("ok.example", "allow"),
    )
    .unwrap();
    let run = env.run_in(&project, &["policy", "log"]);
    run.assert_code(0);
    assert!(!run.stdout.contains('\u{1b}'), "{:?}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines[0].contains("deny") && lines[0].contains("evil\\x1b]0;owned\\x07.example:80"));
    assert!(lines[1].contains("allow") && lines[1].contains("ok.example:80"));
    let v = env.run_in(&project, &["policy", "log", "--json"]).json();
    assert_eq!(
        v["entries"][0]["host"], hostile,
        "JSON keeps the exact value"
    );
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
}

#[test]
fn log_follow_prints_entries_appended_later() {
    use std::io::{BufRead, BufReader};
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let log = record_sandbox(&env, &project);
    std::fs::write(&log, audit_line("first.example", "allow")).unwrap();
    let mut child = env
        .command(&project, &["policy", "log", "--follow", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["host"], "first.example");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, audit_line("later.example", "deny").as_bytes()).unwrap();
    let later: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(later["host"], "later.example");
    assert_eq!(later["decision"], "deny");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn concurrent_edits_of_the_user_config_lose_no_rule() {
    let env = TestEnv::new();
    env.write_user_config(COMMENTED);
    let children: Vec<_> = (0..8)
        .map(|i| {
            env.command(
                &env.home,
                &["policy", "allow", &format!("h{i}.example.com")],
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = user_config(&env);
    for i in 0..8 {
        assert!(
            text.contains(&format!("\"h{i}.example.com\"")),
            "h{i} lost:\n{text}"
        );
    }
    assert!(text.contains("# why: the company mirror"), "{text}");
}

/// Regression: `policy ls` said "43 built-in rules" and listed none of them.
#[test]
fn policy_ls_lists_every_built_in_rule_of_the_preset() {
    let env = TestEnv::new();
    let v = env.run(&["policy", "ls", "--json"]).json();
    let patterns: Vec<&str> = v["preset_rules"]
        .as_array()
        .expect("preset_rules")
        .iter()
        .map(|r| r["pattern"].as_str().expect("pattern"))
        .collect();
    assert!(patterns.len() > 10, "{v}");
    let run = env.run(&["policy", "ls"]);
    run.assert_code(0);
    let listed: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("built-in:"))
        .collect();
    assert_eq!(listed.len(), patterns.len(), "{}", run.stdout);
    for (line, pattern) in listed.iter().zip(&patterns) {
        assert!(
            line.split_whitespace().any(|w| w == *pattern) && line.contains("allow"),
            "{pattern} not on {line:?}"
        );
    }
}
