//! Usage errors and the output contract (PRODUCT O1–O5, L2).

use std::process::Stdio;

use crate::common::TestEnv;

#[test]
fn mistyped_option_exits_2_and_creates_nothing() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let before = env.snapshot();
    for args in [
        &["plan", "--memroy-mb", "512"][..],
        &["plan", "--memory-mb", "lots"],
        &["init", "--agnet", "claude"],
        &["trust", "extra-arg"],
        &["no-such-command"],
    ] {
        let run = env.run_in(&project, args);
        run.assert_code(2);
        assert!(
            run.stdout.is_empty(),
            "usage error wrote to stdout: {}",
            run.stdout
        );
        assert!(!run.stderr.is_empty(), "usage error is silent for {args:?}");
    }
    // No directory, no lock file, no state: the world is byte-identical.
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn mistyped_option_with_json_prints_exactly_the_error_document() {
    let env = TestEnv::new();
    let before = env.snapshot();
    let run = env.run(&["plan", "--memroy-mb", "512", "--json"]);
    run.assert_code(2);
    let v = run.json();
    let obj = v.as_object().unwrap();
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["error"]);
    let err = v["error"].as_object().unwrap();
    let mut keys: Vec<_> = err.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "hint", "message"]);
    assert_eq!(v["error"]["code"], "usage.invalid");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--memroy-mb"));
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

#[test]
fn missing_command_is_a_usage_error() {
    let env = TestEnv::new();
    env.run(&[]).assert_code(2);
}

#[test]
fn help_is_a_result_on_stdout_and_lists_no_hidden_verbs() {
    let env = TestEnv::new();
    let run = env.run(&["--help"]);
    run.assert_code(0);
    for verb in [
        "init", "config", "plan", "trust", "untrust", "doctor", "version",
    ] {
        assert!(
            run.stdout.contains(verb),
            "--help lacks {verb}:\n{}",
            run.stdout
        );
    }
    assert!(!run.stdout.contains("guest"), "{}", run.stdout);
}

#[test]
fn closed_stdout_ends_quietly() {
    let env = TestEnv::new();
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader); // Every write to stdout now fails with EPIPE.
    let out = env
        .command(&env.home, &["version"])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// A start of the binary loads no shared object but the C library: the unwinder is linked in
/// (build.rs) and `pow`, all it took from libm, is defined in it (main.rs). Seen in a running
/// airlock: `secret set` waits for the value on its stdin.
#[test]
fn the_binary_loads_neither_libgcc_s_nor_libm() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let args = [
        "secret",
        "set",
        "T",
        "--host",
        "example.com",
        "--header",
        "X: {value}",
    ];
    let mut child = env
        .command(&project, &args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let maps_path = format!("/proc/{}/maps", child.id());
    // The loader maps the libraries in the order the binary lists them, the C library last.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let maps = loop {
        let maps = std::fs::read_to_string(&maps_path).unwrap_or_default();
        if maps.contains("/libc.so") || std::time::Instant::now() > deadline {
            break maps;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        maps.contains("/libc.so"),
        "the C library never showed:\n{maps}"
    );
    for lib in ["libgcc_s.so", "libm.so"] {
        assert!(!maps.contains(lib), "{lib} is loaded:\n{maps}");
    }
}

#[test]
fn no_color_output_without_a_terminal() {
    let env = TestEnv::new();
    let run = env.run(&["version"]);
    assert!(!run.stdout.contains('\x1b') && !run.stderr.contains('\x1b'));
    let run = env.run(&["version", "--bogus"]);
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
}

/// Runs `airlock ARGS` with a terminal on stdin and stdout (util-linux `script`).
fn on_a_terminal(env: &TestEnv, args: &str) -> String {
    let cmd = format!("{} {args}", crate::common::AIRLOCK);
    let out = env
        .command_for("script".as_ref(), &env.home)
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script(1)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn color_on_a_terminal_unless_no_color_is_set() {
    let mut env = TestEnv::new();
    env.set_env("TERM", "xterm-256color");
    let colored = on_a_terminal(&env, "version --bogus-flag");
    assert!(
        colored.contains('\x1b'),
        "expected color on a terminal: {colored:?}"
    );
    let colored = on_a_terminal(&env, "plan");
    assert!(
        colored.contains("\x1b["),
        "expected color on a terminal: {colored:?}"
    );
    env.set_env("NO_COLOR", "1");
    let plain = on_a_terminal(&env, "plan");
    assert!(!plain.contains('\x1b'), "NO_COLOR ignored: {plain:?}");
    let plain = on_a_terminal(&env, "version --bogus-flag");
    assert!(
        !plain.contains('\x1b'),
        "NO_COLOR ignored by usage errors: {plain:?}"
    );
}

#[test]
fn help_and_version_flags_with_json_still_print_one_json_document() {
    let env = TestEnv::new();
    let v = env.run(&["--json", "--version"]);
    v.assert_code(0);
    assert_eq!(v.json()["version"], env!("CARGO_PKG_VERSION"));
    let h = env.run(&["plan", "--help", "--json"]);
    h.assert_code(0);
    assert!(h.json()["help"].as_str().unwrap().contains("--memory-mb"));
}
