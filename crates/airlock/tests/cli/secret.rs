//! `airlock secret set|ls|rm` (PRODUCT §2, N5, N8): the value comes from stdin only and shows up
//! nowhere but in the secret store.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{Run, TestEnv, AIRLOCK};

const VALUE: &str = "s3cr3t-Value-7f2c9a0e";

/// Runs airlock with `input` on a pipe as stdin.
pub(super) fn run_with_stdin(env: &TestEnv, cwd: &Path, args: &[&str], input: &[u8]) -> Run {
    let mut child = env
        .command(cwd, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn airlock");
    // airlock may exit without reading (a usage error): a closed pipe is not a failure here.
    let _ = child.stdin.take().unwrap().write_all(input);
    let out = child.wait_with_output().expect("wait for airlock");
    Run::from(out)
}

fn secrets_dir(env: &TestEnv) -> PathBuf {
    env.data_home().join("airlock/secrets")
}

/// Every regular file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        if meta.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).expect("read file");
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn secret_set_from_a_pipe_is_listed_by_name_and_the_value_is_nowhere_else() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let set = run_with_stdin(
        &env,
        &project,
        &[
            "secret",
            "set",
            "GH_TOKEN",
            "--host",
            "api.github.com,**.githubusercontent.com",
            "--header",
            "Authorization: Bearer {value}",
        ],
        format!("{VALUE}\n").as_bytes(),
    );
    set.assert_code(0);
    let mut outputs = vec![set];
    for args in [
        &["secret", "ls"][..],
        &["secret", "ls", "--json"],
        &["plan"],
        &["plan", "--json"],
        &["policy", "ls", "--json"],
    ] {
        let run = env.run_in(&project, args);
        run.assert_code(0);
        outputs.push(run);
    }
    let ls = &outputs[1];
    assert!(ls.stdout.contains("GH_TOKEN"), "{}", ls.stdout);
    assert!(
        ls.stdout
            .contains("api.github.com, **.githubusercontent.com"),
        "{}",
        ls.stdout
    );
    assert!(ls.stdout.contains("Authorization"), "{}", ls.stdout);
    let v = outputs[2].json();
    assert_eq!(v["secrets"][0]["name"], "GH_TOKEN");
    assert_eq!(
        v["secrets"][0]["hosts"],
        serde_json::json!(["api.github.com", "**.githubusercontent.com"])
    );
    assert_eq!(v["secrets"][0]["header"], "Authorization");
    for run in &outputs {
        assert!(
            !run.stdout.contains(VALUE),
            "value on stdout: {}",
            run.stdout
        );
        assert!(
            !run.stderr.contains(VALUE),
            "value on stderr: {}",
            run.stderr
        );
    }
    let holders = files_containing(env.root(), VALUE.as_bytes());
    assert_eq!(holders, [secrets_dir(&env).join("GH_TOKEN.json")]);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&holders[0]).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn exactly_one_trailing_newline_is_stripped_from_the_value() {
    let env = TestEnv::new();
    run_with_stdin(
        &env,
        &env.home,
        &["secret", "set", "TOK", "--host", "x.example.com"],
        b"abc\r\n",
    )
    .assert_code(0);
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(secrets_dir(&env).join("TOK.json")).unwrap())
            .unwrap();
    assert_eq!(record["value"], "abc");
    // A second newline is part of the value, and a header value cannot hold one.
    let run = run_with_stdin(
        &env,
        &env.home,
        &["secret", "set", "TOK2", "--host", "x.example.com"],
        b"abc\n\n",
    );
    run.assert_code(2);
    assert!(!secrets_dir(&env).join("TOK2.json").exists());
}

#[test]
fn the_value_cannot_be_given_on_the_command_line() {
    let env = TestEnv::new();
    for args in [
        &[
            "secret",
            "set",
            "TOK",
            "--host",
            "x.example.com",
            "--value",
            VALUE,
        ][..],
        &["secret", "set", "TOK", VALUE, "--host", "x.example.com"],
        &[
            "secret",
            "set",
            "TOK",
            "--host",
            "x.example.com",
            &format!("--value={VALUE}"),
        ],
    ] {
        let run = env.run(args);
        run.assert_code(2);
    }
    assert!(
        !secrets_dir(&env).exists(),
        "a usage error created the store"
    );
    assert!(files_containing(env.root(), VALUE.as_bytes()).is_empty());
}

#[test]
fn an_empty_value_is_refused_and_nothing_is_stored() {
    let env = TestEnv::new();
    for input in [&b""[..], b"\n"] {
        let run = run_with_stdin(
            &env,
            &env.home,
            &["secret", "set", "TOK", "--host", "x.example.com", "--json"],
            input,
        );
        run.assert_code(2);
        assert_eq!(run.json()["error"]["code"], "secret.bad_value");
        assert!(
            !secrets_dir(&env).exists(),
            "an empty value created the store"
        );
    }
    let v = env.run(&["secret", "ls", "--json"]).json();
    assert_eq!(v["secrets"], serde_json::json!([]));
}

#[test]
fn bad_names_hosts_and_templates_exit_2_before_anything_is_created() {
    let env = TestEnv::new();
    let cases: [&[&str]; 7] = [
        &["secret", "set", "gh_token", "--host", "x.example.com"],
        &["secret", "set", "1TOKEN", "--host", "x.example.com"],
        &["secret", "set", "../TOKEN", "--host", "x.example.com"],
        &["secret", "set", "A-B", "--host", "x.example.com"],
        &["secret", "set", "TOK", "--host", "bad..host"],
        &["secret", "set", "TOK"],
        &[
            "secret",
            "set",
            "TOK",
            "--host",
            "x.example.com",
            "--header",
            "X: a\r\nY: {value}",
        ],
    ];
    for args in cases {
        let run = run_with_stdin(&env, &env.home, args, VALUE.as_bytes());
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
    }
    assert!(
        !secrets_dir(&env).exists(),
        "a refused command created the store"
    );
    env.run(&["secret", "rm", "bad-name"]).assert_code(2);
}

#[test]
fn secret_rm_removes_and_a_missing_secret_exits_1_with_a_hint() {
    let env = TestEnv::new();
    let missing = env.run(&["secret", "rm", "TOK", "--json"]);
    missing.assert_code(1);
    assert_eq!(missing.json()["error"]["code"], "secret.not_found");
    run_with_stdin(
        &env,
        &env.home,
        &["secret", "set", "TOK", "--host", "x.example.com"],
        b"v1",
    )
    .assert_code(0);
    env.run(&["secret", "rm", "TOK"]).assert_code(0);
    assert!(!secrets_dir(&env).join("TOK.json").exists());
    let v = env.run(&["secret", "ls", "--json"]).json();
    assert_eq!(v["secrets"], serde_json::json!([]));
    let again = env.run(&["secret", "rm", "TOK"]);
    again.assert_code(1);
    assert!(again.stderr.contains("hint:"), "{}", again.stderr);
}

#[test]
fn secret_ls_creates_nothing() {
    let env = TestEnv::new();
    let before = env.snapshot();
    env.run(&["secret", "ls"]).assert_code(0);
    assert_eq!(before.diff(&env.snapshot()), Vec::<String>::new());
}

/// Runs `airlock ARGS` on a terminal (util-linux `script`), types `input` once the hidden-input
/// prompt is shown, and returns everything the terminal displayed, ending with the terminal's
/// settings after airlock exited (`stty -a`) and airlock's exit status.
fn on_a_terminal(env: &TestEnv, args: &str, input: &[u8]) -> String {
    let cmd = format!("{AIRLOCK} {args}; echo \"status=$?\"; stty -a");
    let mut child = env
        .command_for("script".as_ref(), &env.home)
        .args(["-qec", &cmd, "/dev/null"])
        // script(1) runs the command with $SHELL; bash, unlike dash, keeps running after a
        // child that handled SIGINT itself, so the status and settings get printed.
        .env("SHELL", "/bin/bash")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run script(1)");
    let shown = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = Arc::clone(&shown);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&shown.lock().unwrap()).contains("(input hidden") {
        assert!(Instant::now() < deadline, "no prompt appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    stdin.flush().unwrap();
    child.wait().expect("wait for script");
    drop(stdin);
    reader.join().unwrap();
    let text = String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
    text
}

fn echo_is_on(stty: &str) -> bool {
    stty.split_whitespace().any(|w| w == "echo")
}

#[test]
fn a_value_typed_on_a_terminal_is_not_echoed() {
    let env = TestEnv::new();
    let shown = on_a_terminal(
        &env,
        "secret set TOK --host x.example.com",
        format!("{VALUE}\n").as_bytes(),
    );
    assert!(shown.contains("status=0"), "{shown}");
    assert!(!shown.contains(VALUE), "the value was echoed:\n{shown}");
    assert!(echo_is_on(&shown), "echo was not restored:\n{shown}");
    let record = std::fs::read_to_string(secrets_dir(&env).join("TOK.json")).unwrap();
    assert!(record.contains(VALUE));
}

#[test]
fn ctrl_c_at_the_hidden_prompt_restores_echo_and_exits_130() {
    let env = TestEnv::new();
    let shown = on_a_terminal(&env, "secret set TOK --host x.example.com", b"abc\x03");
    assert!(shown.contains("status=130"), "{shown}");
    assert!(echo_is_on(&shown), "echo stayed off after Ctrl+C:\n{shown}");
    assert!(!secrets_dir(&env).join("TOK.json").exists());
}

#[test]
fn binding_a_secret_to_a_denied_host_warns_with_the_allow_command() {
    let env = TestEnv::new();
    env.write_user_config("[network]\npreset = \"none\"\nallow = [\"ok.example.com\"]\n");
    let run = run_with_stdin(
        &env,
        &env.home,
        &[
            "secret",
            "set",
            "TOK",
            "--host",
            "ok.example.com,blocked.example.com",
        ],
        VALUE.as_bytes(),
    );
    run.assert_code(0);
    assert!(
        run.stderr.contains("denies blocked.example.com:443")
            && run
                .stderr
                .contains("airlock policy allow blocked.example.com"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("ok.example.com:443"), "{}", run.stderr);
}

#[test]
fn secret_set_header_name_lists_the_headers_the_value_may_travel_in() {
    let env = TestEnv::new();
    let project = env.git_project("src/demo");
    let args = [
        "secret",
        "set",
        "API_TOKEN",
        "--host",
        "api.example.com",
        "--header-name",
        "X-Api-Key",
        "--json",
    ];
    let set = run_with_stdin(&env, &project, &args, format!("{VALUE}\n").as_bytes());
    set.assert_code(0);
    assert_eq!(
        set.json()["secret"]["headers"],
        serde_json::json!(["authorization", "proxy-authorization", "x-api-key"])
    );
    let ls = env.run_in(&project, &["secret", "ls"]);
    assert!(ls.stdout.contains("x-api-key"), "{}", ls.stdout);
    let bad = [
        "secret",
        "set",
        "API_TOKEN",
        "--host",
        "api.example.com",
        "--header-name",
        "x key",
    ];
    run_with_stdin(&env, &project, &bad, b"v\n").assert_code(2);
}
