//! `airlock config`: creates the user config when absent, never rewrites it, refreshes the
//! schema beside it, prints the path when not on a terminal.

use std::os::unix::fs::PermissionsExt;

use crate::common::TestEnv;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn config_creates_the_user_config_and_schema_and_prints_the_path() {
    let env = TestEnv::new();
    let run = env.run(&["config"]);
    run.assert_code(0);
    let path = env.user_config();
    assert_eq!(run.stdout.trim_end(), path.to_string_lossy());
    assert!(path.is_file());
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let schema = path.with_file_name("config.schema.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&schema).unwrap()).expect("schema is JSON");
    assert!(
        v.get("properties").is_some() || v.get("$schema").is_some(),
        "{v}"
    );
    // The template validates.
    env.run(&["plan"]).assert_code(0);
}

#[test]
fn config_never_rewrites_an_existing_user_config_but_refreshes_the_schema() {
    let env = TestEnv::new();
    let path = env.write_user_config("# mine, even if invalid: memroy = 1\n");
    let schema = path.with_file_name("config.schema.json");
    std::fs::write(&schema, "stale").unwrap();
    let run = env.run(&["config", "--json"]);
    run.assert_code(0);
    let v = run.json();
    assert_eq!(v["created"], false);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "# mine, even if invalid: memroy = 1\n"
    );
    assert_ne!(std::fs::read_to_string(&schema).unwrap(), "stale");
}

#[test]
fn config_twice_is_idempotent() {
    let env = TestEnv::new();
    env.run(&["config"]).assert_code(0);
    let first = std::fs::read(env.user_config()).unwrap();
    let v = env.run(&["config", "--json"]).json();
    assert_eq!(v["created"], false);
    assert_eq!(std::fs::read(env.user_config()).unwrap(), first);
}

/// Runs `airlock config` with a terminal on stdin and stdout (through util-linux `script`).
fn config_on_a_terminal(env: &TestEnv) -> crate::common::Run {
    let cmd = format!("{} config", crate::common::AIRLOCK);
    let out = env
        .command_for("script".as_ref(), &env.home)
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script(1)");
    crate::common::Run::from(out)
}

#[test]
fn config_on_a_terminal_opens_the_editor_and_validates_what_was_saved() {
    let mut env = TestEnv::new();
    let marker = env.root().join("edited");
    let editor = env.write(
        &env.root().join("editor.sh"),
        &format!(
            "#!/bin/sh\necho \"$1\" > '{}'\necho 'memroy_mb = 1' >> \"$1\"\n",
            marker.display()
        ),
    );
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.set_env("EDITOR", &editor.to_string_lossy());
    let run = config_on_a_terminal(&env);
    let opened = std::fs::read_to_string(&marker).expect("the editor was not started");
    assert_eq!(opened.trim_end(), env.user_config().to_string_lossy());
    // The saved file has a typo: reported at once, exit 2.
    run.assert_code(2);
    assert!(run.stdout.contains("memroy_mb"), "{}", run.stdout);
}

#[test]
fn config_on_a_terminal_without_an_editor_prints_the_path() {
    let env = TestEnv::new();
    let run = config_on_a_terminal(&env);
    run.assert_code(0);
    assert!(
        run.stdout.contains(&*env.user_config().to_string_lossy()),
        "{}",
        run.stdout
    );
}

#[test]
fn config_refuses_a_config_directory_others_can_write() {
    let env = TestEnv::new();
    let dir = env.config_home().join("airlock");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = env.run(&["config"]);
    run.assert_code(1);
    assert!(run.stderr.contains("chmod go-w"), "{}", run.stderr);
    assert!(!env.user_config().exists());
}

#[test]
fn config_accepts_a_group_writable_xdg_base_of_private_user_groups() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.config_home()).unwrap();
    std::fs::set_permissions(env.config_home(), std::fs::Permissions::from_mode(0o775)).unwrap();
    env.run(&["config"]).assert_code(0);
    assert_eq!(mode(&env.config_home().join("airlock")), 0o700);
}

#[test]
fn ctrl_c_while_the_editor_runs_belongs_to_the_editor() {
    let mut env = TestEnv::new();
    let marker = env.root().join("edited");
    // The editor interrupts its grandparent (airlock: editor <- sh -c <- airlock) the way a
    // Ctrl+C on the terminal would, then finishes normally.
    let editor = env.write(
        &env.root().join("editor.sh"),
        &format!(
            "#!/bin/sh\nsh_pid=$PPID\nairlock=$(cut -d' ' -f4 /proc/$sh_pid/stat)\n\
             kill -INT $airlock\nkill -QUIT $airlock\nsleep 0.2\necho done > '{}'\n",
            marker.display()
        ),
    );
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.set_env("EDITOR", &editor.to_string_lossy());
    let run = config_on_a_terminal(&env);
    assert!(marker.exists(), "the editor did not finish: {run:?}");
    // airlock survived the signals and validated the (valid) file.
    run.assert_code(0);
}
