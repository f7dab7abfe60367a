//! `airlock completions SHELL` (PRODUCT §2): generated from the clap definition, accepted by the
//! shells themselves, and never naming a hidden verb.

use std::process::Command;

use crate::common::TestEnv;

const PUBLIC_VERBS: &[&str] = &[
    "init",
    "config",
    "plan",
    "run",
    "up",
    "exec",
    "status",
    "ls",
    "down",
    "clean",
    "policy",
    "secret",
    "trust",
    "untrust",
    "doctor",
    "version",
    "completions",
];

const HIDDEN_VERBS: &[&str] = &["__init", "__keeper", "__proxy"];

/// Whether `tool` can run here; fails under CI (scripts/test installs it), else says why the
/// test is skipped.
fn have(tool: &str) -> bool {
    airlock_testkit::needs_tool(tool)
}

#[test]
fn completions_for_every_shell_name_every_public_verb_and_no_hidden_one() {
    let env = TestEnv::new();
    for shell in ["bash", "zsh", "fish"] {
        let run = env.run(&["completions", shell]);
        run.assert_code(0);
        for verb in PUBLIC_VERBS {
            assert!(run.stdout.contains(verb), "{shell}: no {verb}");
        }
        // As a word: generated function names such as `airlock__subcmd__init` do not count.
        let words: Vec<&str> = run
            .stdout
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .collect();
        for hidden in HIDDEN_VERBS {
            assert!(!words.contains(hidden), "{shell} names {hidden}");
        }
        assert!(run.stderr.is_empty(), "{}", run.stderr);
    }
}

#[test]
fn bash_completes_verbs_and_policy_subcommands() {
    let env = TestEnv::new();
    let script = env.write(
        &env.root().join("airlock.bash"),
        &env.run(&["completions", "bash"]).stdout,
    );
    let complete = |words: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 _airlock airlock \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.display()
            ))
            .output()
            .expect("run bash");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let verbs = complete("airlock pol");
    assert_eq!(verbs.lines().collect::<Vec<_>>(), ["policy"], "{verbs}");
    let subs = complete("airlock policy ''");
    for sub in ["ls", "allow", "deny", "check", "log"] {
        assert!(subs.lines().any(|l| l == sub), "{sub} not in {subs}");
    }
    assert!(!subs.contains("__"), "{subs}");
}

#[test]
fn zsh_and_fish_accept_their_scripts() {
    let env = TestEnv::new();
    for (shell, check) in [("zsh", &["-n"][..]), ("fish", &["--no-execute"][..])] {
        if !have(shell) {
            continue;
        }
        let script = env.write(
            &env.root().join(format!("airlock.{shell}")),
            &env.run(&["completions", shell]).stdout,
        );
        let out = Command::new(shell)
            .args(check)
            .arg(&script)
            .output()
            .expect("run the shell");
        assert!(out.status.success(), "{shell}: {out:?}");
    }
}

#[test]
fn completions_for_an_unknown_shell_is_a_usage_error_naming_the_choices() {
    let env = TestEnv::new();
    let run = env.run(&["completions", "tcsh"]);
    run.assert_code(2);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    for shell in ["bash", "zsh", "fish"] {
        assert!(run.stderr.contains(shell), "{}", run.stderr);
    }
}

#[test]
fn completions_json_is_one_document_holding_the_script() {
    let env = TestEnv::new();
    let run = env.run(&["completions", "fish", "--json"]);
    run.assert_code(0);
    let v = run.json();
    assert_eq!(v["shell"], "fish");
    assert_eq!(
        v["script"].as_str(),
        Some(env.run(&["completions", "fish"]).stdout.as_str())
    );
}
