//! `airlock init`: creates `.airlock/config.toml` at the project root, never overwrites.

use crate::common::TestEnv;

#[test]
fn init_creates_the_project_config_at_the_git_root() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let sub = project.join("lib");
    std::fs::create_dir_all(&sub).unwrap();
    let run = env.run_in(&sub, &["init", "--agent", "claude"]);
    run.assert_code(0);
    let config = project.join(".airlock/config.toml");
    let text = std::fs::read_to_string(&config).expect("config created at the git root");
    assert!(text.contains("claude"), "{text}");
    assert!(!sub.join(".airlock").exists());
    // The template is valid: plan accepts it and shows the agent from the project file.
    let plan = env.run_in(&project, &["plan", "--json"]);
    plan.assert_code(0);
    assert_eq!(plan.json()["agent"]["value"], "claude");
}

#[test]
fn init_outside_git_uses_the_working_directory() {
    let env = TestEnv::new();
    let dir = env.dir("scratch/app");
    env.run_in(&dir, &["init"]).assert_code(0);
    assert!(dir.join(".airlock/config.toml").is_file());
}

#[test]
fn init_never_overwrites_and_refuses_where_airlock_exists() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let config = env.write_project_config(&project, "# mine\n");
    let before = env.snapshot();
    let run = env.run_in(&project, &["init"]);
    run.assert_code(2);
    assert!(run.stderr.contains(".airlock"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "# mine\n");
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn init_refuses_with_an_empty_airlock_directory_too() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    std::fs::create_dir(project.join(".airlock")).unwrap();
    env.run_in(&project, &["init"]).assert_code(2);
    assert!(!project.join(".airlock/config.toml").exists());
}

#[test]
fn init_refuses_inside_a_project_owned_by_an_ancestor() {
    let env = TestEnv::new();
    let outer = env.dir("src/outer");
    env.write_project_config(&outer, "");
    let inner = env.dir("src/outer/inner");
    let run = env.run_in(&inner, &["init"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains(&*outer.to_string_lossy()),
        "{}",
        run.stderr
    );
    assert!(!inner.join(".airlock").exists());
}

#[test]
fn init_rejects_an_unknown_agent_before_creating_anything() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let run = env.run_in(&project, &["init", "--agent", "skynet"]);
    run.assert_code(2);
    assert!(!project.join(".airlock").exists());
}

#[test]
fn init_json_names_the_created_file() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let v = env.run_in(&project, &["init", "--json"]).json();
    assert_eq!(
        v["config"],
        project
            .join(".airlock/config.toml")
            .to_string_lossy()
            .as_ref()
    );
}

#[test]
fn init_refuses_to_make_the_home_directory_a_project() {
    let env = TestEnv::new();
    let run = env.run_in(&env.home, &["init"]);
    run.assert_code(2);
    assert!(run.stderr.contains("home directory"), "{}", run.stderr);
    assert!(!env.home.join(".airlock").exists());
}

#[test]
fn init_refuses_inside_a_credential_root() {
    let env = TestEnv::new();
    let ssh = env.dir(".ssh/keys");
    env.run_in(&ssh, &["init"]).assert_code(2);
    assert!(!ssh.join(".airlock").exists());
}

/// Regression: the template, errors and the schema pointed to `airlock image import` before
/// that command existed. Whatever points to it now must name a command that works.
#[test]
fn pointers_to_image_import_name_a_command_that_exists() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.run_in(&project, &["init"]).assert_code(0);
    let template = std::fs::read_to_string(project.join(".airlock/config.toml")).unwrap();
    assert!(template.contains("\"host\""), "{template}");
    // A directory image belongs in the user config; the refusal says so.
    let rootfs = env.dir("rootfs");
    env.write_project_config(&project, &format!("image = \"{}\"\n", rootfs.display()));
    let plan = env.run_in(&project, &["plan"]);
    plan.assert_code(2);
    assert!(plan.stderr.contains("user config"), "{}", plan.stderr);
    env.run_in(&project, &["config"]).assert_code(0);
    let schema =
        std::fs::read_to_string(env.config_home().join("airlock/config.schema.json")).unwrap();
    let help = env.run(&["init", "--help"]);
    for (what, text) in [
        ("template", &template),
        ("plan error", &plan.stderr),
        ("schema", &schema),
        ("init --help", &help.stdout),
    ] {
        if text.contains("image import") {
            let import = env.run(&["image", "import", "--help"]);
            import.assert_code(0);
            assert!(
                import.stdout.contains("--name"),
                "{what}: {}",
                import.stdout
            );
        }
    }
}

#[test]
fn a_top_level_key_appended_to_the_init_template_stays_top_level() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.run_in(&project, &["init"]).assert_code(0);
    let config = project.join(".airlock/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("memory_mb = 512\n");
    std::fs::write(&config, text).unwrap();
    let plan = env.run_in(&project, &["plan", "--json"]);
    plan.assert_code(0);
    let v = plan.json();
    assert_eq!(v["memory_mb"]["value"], 512, "{v}");
    assert_eq!(v["memory_mb"]["origin"], "project", "{v}");
}

#[test]
fn init_writes_a_commented_idempotent_provision_script_that_provisions_nothing() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    env.run_in(&project, &["init"]).assert_code(0);
    let script = std::fs::read_to_string(project.join(".airlock/provision.sh")).unwrap();
    assert!(script.contains("idempotent"), "{script}");
    assert!(script.contains("# airlock: run-as root"), "{script}");
    // Everything but `set -eu` is a comment: a fresh template changes nothing.
    let active: Vec<&str> = script
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(active, ["set -eu"]);
    let plan = env.run_in(&project, &["plan", "--json"]);
    plan.assert_code(0);
    let phases: Vec<String> = plan.json()["provisioning"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["phase"].as_str().unwrap().to_owned())
        .collect();
    assert!(phases.contains(&"project-script".to_owned()), "{phases:?}");
}

#[test]
fn init_suggests_the_toolchains_it_finds_in_the_home() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.home.join(".local/bin")).unwrap();
    let project = env.git_project("src/demo");
    let run = env.run_in(&project, &["init", "--json"]);
    run.assert_code(0);
    assert_eq!(
        run.json()["toolchains_found"],
        serde_json::json!(["local-bin"])
    );
}
