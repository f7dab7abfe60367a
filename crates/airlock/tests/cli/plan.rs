//! `airlock plan`: strict validation with every error at once, origins, and no side effects.

use crate::common::TestEnv;

const BROKEN_PROJECT: &str = r#"# demo project
agent = "claude"
memroy_mb = 4096

[network]
deny = "example.com"
"#;

#[test]
fn misspelled_key_and_wrong_type_in_another_table_are_both_reported_with_file_and_line() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let file = env.write_project_config(&project, BROKEN_PROJECT);
    let before = env.snapshot();
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(2);
    let err = &run.stderr;
    assert!(
        err.contains("memroy_mb"),
        "misspelled key not named:\n{err}"
    );
    assert!(
        err.contains("network.deny"),
        "wrong-typed key not named:\n{err}"
    );
    assert!(
        err.contains(&*file.to_string_lossy()),
        "file not named:\n{err}"
    );
    assert!(err.contains(":3:"), "line of memroy_mb missing:\n{err}");
    assert!(err.contains(":6:"), "line of network.deny missing:\n{err}");
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn invalid_config_with_json_is_one_error_document_naming_both_keys() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let file = env.write_project_config(&project, BROKEN_PROJECT);
    let run = env.run_in(&project, &["plan", "--json"]);
    run.assert_code(2);
    let v = run.json();
    assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    assert_eq!(v["error"]["code"], "config.invalid");
    let message = v["error"]["message"].as_str().unwrap();
    for needle in [
        "memroy_mb",
        "network.deny",
        ":3:",
        ":6:",
        &*file.to_string_lossy(),
    ] {
        assert!(message.contains(needle), "{needle} missing in {message}");
    }
    assert!(v["error"]["hint"].is_string());
}

fn valid_world() -> (TestEnv, std::path::PathBuf) {
    let env = TestEnv::new();
    env.write_user_config("memory_mb = 4096\n");
    let project = env.git_project("src/demo");
    env.write_project_config(&project, "agent = \"claude\"\npids_max = 512\n");
    (env, project)
}

/// The `key:` line of human output, e.g. `memory_mb:   4096  (user)`.
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.trim_start().starts_with(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} line in:\n{out}"))
}

#[test]
fn valid_plan_shows_every_value_with_its_origin() {
    let (env, project) = valid_world();
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    let out = &run.stdout;
    assert!(line(out, "memory_mb").contains("4096") && line(out, "memory_mb").contains("(user)"));
    assert!(line(out, "agent").contains("claude") && line(out, "agent").contains("(project)"));
    assert!(line(out, "pids_max").contains("512") && line(out, "pids_max").contains("(project)"));
    assert!(line(out, "image").contains("(default)"), "{out}");
    assert!(line(out, "preset").contains("dev"), "{out}");
    // The workspace appears at the same absolute path inside (I3).
    let ws = project.to_string_lossy();
    assert!(out.contains(&format!("{ws} -> {ws}")), "{out}");
    assert!(out.contains("Provisioning"), "{out}");
}

#[test]
fn memory_flag_overrides_for_one_run_with_origin_flag() {
    let (env, project) = valid_world();
    let run = env.run_in(&project, &["plan", "--memory-mb", "1024"]);
    run.assert_code(0);
    let l = line(&run.stdout, "memory_mb");
    assert!(l.contains("1024") && l.contains("(flag)"), "{l}");
    let json = env
        .run_in(&project, &["plan", "--memory-mb", "1024", "--json"])
        .json();
    assert_eq!(json["memory_mb"]["value"], 1024);
    assert_eq!(json["memory_mb"]["origin"], "flag");
}

#[test]
fn memory_flag_below_the_minimum_is_a_configuration_error() {
    let (env, project) = valid_world();
    let run = env.run_in(&project, &["plan", "--memory-mb", "16"]);
    run.assert_code(2);
    assert!(run.stderr.contains("memory"), "{}", run.stderr);
}

#[test]
fn plan_json_is_one_document_with_origins() {
    let (env, project) = valid_world();
    let run = env.run_in(&project, &["plan", "--json"]);
    run.assert_code(0);
    let v = run.json();
    assert_eq!(v["memory_mb"]["origin"], "user");
    assert_eq!(v["agent"]["value"], "claude");
    assert_eq!(v["agent"]["origin"], "project");
    assert_eq!(v["pids_max"]["origin"], "project");
    assert!(v["network"]["preset"]["value"].is_string(), "{v}");
    assert!(v["provisioning"].is_array(), "{v}");
}

#[test]
fn plan_creates_no_file_or_directory_anywhere() {
    let (env, project) = valid_world();
    // The XDG state/data/cache roots do not exist yet; plan must not create them either.
    assert!(!env.state_home().exists() && !env.data_home().exists());
    let before = env.snapshot();
    env.run_in(&project, &["plan"]).assert_code(0);
    env.run_in(&project, &["plan", "--json"]).assert_code(0);
    env.run_in(&project, &["plan", "--memory-mb", "2048"])
        .assert_code(0);
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn plan_outside_any_project_shows_user_settings_only() {
    let env = TestEnv::new();
    let dir = env.dir("scratch");
    let before = env.snapshot();
    let run = env.run_in(&dir, &["plan"]);
    run.assert_code(0);
    assert!(
        line(&run.stdout, "memory_mb").contains("(default)"),
        "{}",
        run.stdout
    );
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn hostile_config_values_cannot_drive_the_terminal() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.write_project_config(&project, "detach_key = \"\\u001b]0;pwned\\u0007\"\n");
    let run = env.run_in(&project, &["plan"]);
    assert!(!run.stdout.contains('\x1b'), "{:?}", run.stdout);
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
}

#[test]
fn hostile_project_path_is_escaped_in_human_output() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo\x1b]0;owned\x07\n");
    let init = env.run_in(&project, &["init"]);
    init.assert_code(0);
    let plan = env.run_in(&project, &["plan"]);
    plan.assert_code(0);
    for out in [&init.stdout, &plan.stdout, &plan.stderr] {
        assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    }
    assert!(
        plan.stdout.contains("demo\\x1b]0;owned\\x07\\n"),
        "{}",
        plan.stdout
    );
    // JSON keeps the real path (JSON escaping makes it safe).
    let v = env.run_in(&project, &["plan", "--json"]).json();
    assert_eq!(v["project"]["root"], project.to_string_lossy().as_ref());
}

/// Regression: `plan` had no secrets section (PRODUCT §2: names and bound hosts, never values).
#[test]
fn plan_lists_secrets_by_name_and_bound_hosts_never_their_values() {
    let (env, project) = valid_world();
    let value = "plan-must-not-show-this-9d1f";
    super::secret::run_with_stdin(
        &env,
        &project,
        &[
            "secret",
            "set",
            "NPM_TOKEN",
            "--host",
            "registry.npmjs.org",
            "--header",
            "Authorization: Bearer {value}",
        ],
        format!("{value}\n").as_bytes(),
    )
    .assert_code(0);
    let before = env.snapshot();
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    let out = &run.stdout;
    let section = out
        .split("\n\n")
        .find(|s| s.starts_with("Secrets"))
        .unwrap_or_else(|| panic!("no Secrets section in:\n{out}"));
    assert!(
        section.contains("NPM_TOKEN") && section.contains("registry.npmjs.org"),
        "{section}"
    );
    let json = env.run_in(&project, &["plan", "--json"]);
    json.assert_code(0);
    let v = json.json();
    assert_eq!(v["secrets"][0]["name"], "NPM_TOKEN", "{v}");
    assert_eq!(
        v["secrets"][0]["hosts"],
        serde_json::json!(["registry.npmjs.org"])
    );
    for run in [&run, &json] {
        assert!(!run.stdout.contains(value) && !run.stderr.contains(value));
    }
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn plan_without_secrets_says_so_and_creates_no_secret_store() {
    let (env, project) = valid_world();
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    let section = run
        .stdout
        .split("\n\n")
        .find(|s| s.starts_with("Secrets"))
        .unwrap_or_else(|| panic!("no Secrets section in:\n{}", run.stdout));
    assert!(section.contains("airlock secret set"), "{section}");
    let v = env.run_in(&project, &["plan", "--json"]).json();
    assert_eq!(v["secrets"], serde_json::json!([]), "{v}");
    assert!(!env.data_home().join("airlock/secrets").exists());
}

#[test]
fn an_image_that_does_not_exist_is_a_config_error_naming_what_works_today() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.write_project_config(&project, "image = \"unknown\"\n");
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("image") && run.stderr.contains("\"unknown\""),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("airlock image ls"), "{}", run.stderr);
    assert!(
        run.stderr.contains("airlock image import"),
        "{}",
        run.stderr
    );
}

#[test]
fn plan_says_dot_git_is_protected_only_when_it_is_a_file() {
    // A repository's `.git` directory stays writable (commits work inside); only a `gitdir:`
    // file is read-only. The plan must not tell the user their whole `.git` is read-only.
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    let out = &run.stdout;
    assert!(
        out.contains(".git  (read-only when it is a file, default)"),
        "{out}"
    );
    assert!(!out.contains(".git  (read-only, default)"), "{out}");
}

#[test]
fn plan_lists_protected_paths_with_their_origin_and_lifted_ones() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let root = std::fs::canonicalize(&project).unwrap();
    env.write_user_config(&format!(
        "protect = [\".envrc\"]\n\n[[unprotect]]\nproject = \"{}\"\npaths = [\".git/config\"]\n",
        root.display()
    ));
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    let out = &run.stdout;
    for line in [
        ".git/hooks  (read-only, default)",
        ".airlock  (read-only, default)",
        ".envrc  (read-only, user)",
        ".git/config  (lifted for this project)",
    ] {
        assert!(out.contains(line), "{line:?} missing:\n{out}");
    }
    let v = env.run_in(&project, &["plan", "--json"]).json();
    let lifted: Vec<&str> = v["protect"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["lifted"] == true)
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(lifted, [".git/config"]);
}
