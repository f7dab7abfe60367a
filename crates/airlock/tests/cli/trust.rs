//! `airlock trust` / `untrust` (PRODUCT C6): an untrusted project may only tighten the network
//! policy; trust is keyed by path and config hash, so an edited config is untrusted again.

use crate::common::TestEnv;

const WIDENING: &str = "[network]\nallow = [\"widen.example.org\"]\n";

fn project_with_widening_rule() -> (TestEnv, std::path::PathBuf) {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.write_project_config(&project, WIDENING);
    (env, project)
}

fn ignored_as_untrusted(out: &str) -> bool {
    out.lines().any(|l| {
        l.contains("widen.example.org") && l.contains("untrusted") && l.contains("airlock trust")
    })
}

#[test]
fn untrusted_project_rule_is_listed_as_ignored_with_the_trust_command() {
    let (env, project) = project_with_widening_rule();
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    assert!(ignored_as_untrusted(&run.stdout), "{}", run.stdout);
    let v = env.run_in(&project, &["plan", "--json"]).json();
    assert_eq!(v["files"]["project_trusted"], false);
    let ignored = v["network"]["ignored"].as_array().unwrap();
    assert_eq!(ignored.len(), 1, "{v}");
}

#[test]
fn trust_lets_the_project_widen_the_policy() {
    let (env, project) = project_with_widening_rule();
    env.run_in(&project, &["trust"]).assert_code(0);
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    assert!(!ignored_as_untrusted(&run.stdout), "{}", run.stdout);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("allow widen.example.org")),
        "{}",
        run.stdout
    );
    let v = env.run_in(&project, &["plan", "--json"]).json();
    assert_eq!(v["files"]["project_trusted"], true);
}

#[test]
fn editing_a_trusted_config_makes_it_untrusted_again() {
    let (env, project) = project_with_widening_rule();
    env.run_in(&project, &["trust"]).assert_code(0);
    env.write_project_config(&project, &format!("{WIDENING}# pulled from upstream\n"));
    let run = env.run_in(&project, &["plan"]);
    run.assert_code(0);
    assert!(ignored_as_untrusted(&run.stdout), "{}", run.stdout);
}

#[test]
fn trust_from_a_subdirectory_trusts_the_project_root() {
    let (env, project) = project_with_widening_rule();
    let sub = project.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let v = env.run_in(&sub, &["trust", "--json"]).json();
    assert_eq!(v["project"], project.to_string_lossy().as_ref());
    let run = env.run_in(&project, &["plan"]);
    assert!(!ignored_as_untrusted(&run.stdout), "{}", run.stdout);
}

#[test]
fn untrust_revokes_and_a_second_untrust_is_a_no_op_success() {
    let (env, project) = project_with_widening_rule();
    env.run_in(&project, &["trust"]).assert_code(0);
    let first = env.run_in(&project, &["untrust", "--json"]);
    first.assert_code(0);
    assert_eq!(first.json()["was_trusted"], true);
    assert!(ignored_as_untrusted(
        &env.run_in(&project, &["plan"]).stdout
    ));
    let before = env.snapshot();
    let second = env.run_in(&project, &["untrust"]);
    second.assert_code(0);
    assert!(
        second.stdout.contains("nothing changed"),
        "{}",
        second.stdout
    );
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn trust_refuses_an_invalid_config_and_records_nothing() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.write_project_config(&project, "[network]\nallow = 5\n");
    let run = env.run_in(&project, &["trust"]);
    run.assert_code(2);
    assert!(run.stderr.contains("network.allow"), "{}", run.stderr);
    assert!(!env.state_home().join("airlock/trust.json").exists());
}

#[test]
fn trust_without_a_project_config_points_to_init() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let run = env.run_in(&project, &["trust"]);
    run.assert_code(2);
    assert!(run.stderr.contains("airlock init"), "{}", run.stderr);
}

#[test]
fn trust_store_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let (env, project) = project_with_widening_rule();
    env.run_in(&project, &["trust"]).assert_code(0);
    let dir = env.state_home().join("airlock");
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", dir.display());
}

const USER_PRESET_NONE: &str = "[network]\npreset = \"none\"\n";

#[test]
fn repository_that_selects_an_agent_stays_untrusted_and_adds_no_api_hosts() {
    let env = TestEnv::new();
    env.write_user_config(USER_PRESET_NONE);
    let project = env.git_project("src/demo");
    env.write_project_config(&project, "agent = \"claude\"\n");
    let check = env.run_in(&project, &["policy", "check", "api.anthropic.com"]);
    check.assert_code(1);
    let plan = env.run_in(&project, &["plan"]);
    plan.assert_code(0);
    assert!(
        plan.stdout
            .lines()
            .any(|l| l.contains("api.anthropic.com") && l.contains("untrusted")),
        "{}",
        plan.stdout
    );
}

#[test]
fn init_with_an_agent_trusts_the_file_it_wrote_so_the_agent_works_at_once() {
    let env = TestEnv::new();
    env.write_user_config(USER_PRESET_NONE);
    let project = env.git_project("src/demo");
    let init = env.run_in(&project, &["init", "--agent", "claude", "--json"]);
    init.assert_code(0);
    assert_eq!(init.json()["trusted"], true);
    env.run_in(&project, &["policy", "check", "api.anthropic.com"])
        .assert_code(0);
    // Trust is keyed by the file's hash: an edit (e.g. a pull) revokes it.
    let config = project.join(".airlock/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}# pulled\n")).unwrap();
    env.run_in(&project, &["policy", "check", "api.anthropic.com"])
        .assert_code(1);
}

#[test]
fn plan_shows_a_limit_raised_by_an_untrusted_project_as_ignored() {
    let env = TestEnv::new();
    env.write_user_config("cpus = 2\n");
    let project = env.git_project("src/demo");
    env.write_project_config(
        &project,
        "memory_mb = 1048576\npids_max = 4194304\ncpus = 64\n",
    );
    let plan = env.run_in(&project, &["plan"]);
    plan.assert_code(0);
    for (key, value) in [
        ("memory_mb", "1048576"),
        ("pids_max", "4194304"),
        ("cpus", "64"),
    ] {
        assert!(
            plan.stdout
                .lines()
                .any(|l| l.contains(key) && l.contains(&format!("{value} ignored (untrusted)"))),
            "{key}:\n{}",
            plan.stdout
        );
    }
    let v = env.run_in(&project, &["plan", "--json"]).json();
    assert_eq!(v["memory_mb"]["value"], 8192);
    assert_eq!(v["pids_max"]["value"], 4096);
    env.run_in(&project, &["trust"]).assert_code(0);
    let v = env.run_in(&project, &["plan", "--json"]).json();
    assert_eq!(v["memory_mb"]["value"], 1048576);
}
