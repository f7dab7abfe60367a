//! Config sync on `up` (A2) for every catalogue agent, and git's identity inside (A5).

use super::{host_git, Sandboxed};
use crate::common::TestEnv;
use airlock_config::agents::CATALOGUE;

#[test]
fn up_syncs_every_agents_allowlist_and_skips_credentials_naming_file_and_line() {
    let env = TestEnv::new();
    let mut user = String::new();
    let token = format!("gh{}_{}", "p", "Z".repeat(36));
    for spec in CATALOGUE {
        user.push_str(&format!("[agents.{}]\nsync_config = true\n", spec.name));
        let dir = env.home.join(spec.config_dir);
        // The first allowlisted entry gets good content, the second (when any) a token.
        let entries: Vec<&str> = spec.config_sync.to_vec();
        let good = entries[0].trim_end_matches('/');
        let good_path = if entries[0].ends_with('/') {
            dir.join(good).join("ok.md")
        } else {
            dir.join(good)
        };
        env.write(&good_path, &format!("synced for {}\n", spec.name));
        if let Some(bad) = entries.get(1) {
            let bad = bad.trim_end_matches('/');
            let bad_path = if entries[1].ends_with('/') {
                dir.join(bad).join("bad.md")
            } else {
                dir.join(bad)
            };
            env.write(&bad_path, &format!("line one\nTOKEN={token}\n"));
        }
        // Never synced, whatever the agent.
        env.write(&dir.join("credentials-like.json"), "{\"never\": true}\n");
    }
    env.write_user_config(&user);
    let project = env.git_project("proj");
    let sb = Sandboxed {
        env: &env,
        dir: project,
    };
    let up = sb.run(&["up", "--no-attach"]);
    up.assert_code(0);
    for spec in CATALOGUE {
        let dir = env.home.join(spec.config_dir);
        let entries: Vec<&str> = spec.config_sync.to_vec();
        let good = entries[0].trim_end_matches('/');
        let good_path = if entries[0].ends_with('/') {
            dir.join(good).join("ok.md")
        } else {
            dir.join(good)
        };
        let cat = sb.exec(&format!("cat '{}'", good_path.display()));
        cat.assert_code(0);
        assert_eq!(cat.stdout, format!("synced for {}\n", spec.name));
        sb.exec(&format!(
            "test ! -e '{}'",
            dir.join("credentials-like.json").display()
        ))
        .assert_code(0);
        if entries.len() > 1 {
            let bad = entries[1].trim_end_matches('/');
            let bad_path = if entries[1].ends_with('/') {
                dir.join(bad).join("bad.md")
            } else {
                dir.join(bad)
            };
            let named = format!("{}:2:", bad_path.display());
            assert!(
                up.stderr.contains(&named),
                "{} not named in:\n{}",
                named,
                up.stderr
            );
            sb.exec(&format!("test ! -e '{}'", bad_path.display()))
                .assert_code(0);
        }
    }
    assert!(!up.stderr.contains(&token) && !up.stdout.contains(&token));
    let grep = sb.exec(&format!("grep -r '{token}' \"$HOME\" || true"));
    assert_eq!(grep.stdout, "", "the token reached the sandbox home");
}

#[test]
fn git_inside_commits_as_the_host_user_and_trusts_only_the_workspace() {
    let env = TestEnv::new();
    let project = env.git_project("proj");
    host_git(
        &env,
        &env.home,
        &["config", "--global", "user.name", "Host Person"],
    );
    host_git(
        &env,
        &env.home,
        &["config", "--global", "user.email", "host@example.com"],
    );
    let sb = Sandboxed {
        env: &env,
        dir: project.clone(),
    };
    sb.run(&["up", "--no-attach"]).assert_code(0);
    sb.exec("git commit -q --allow-empty -m inside")
        .assert_code(0);
    let who = host_git(&env, &project, &["log", "-1", "--format=%an <%ae>"]);
    assert_eq!(who.trim(), "Host Person <host@example.com>");
    let safe = sb.exec("git config --global --get-all safe.directory");
    safe.assert_code(0);
    assert_eq!(safe.stdout.trim(), project.to_str().unwrap());
    // The workspace's .git/config is read-only inside (C8): expand without writing it.
    let url = sb.exec("git ls-remote --get-url git@github.com:o/r.git");
    assert_eq!(url.stdout.trim(), "https://github.com/o/r.git");
}

#[test]
fn credentials_opt_in_without_a_stored_key_tells_how_to_store_it() {
    let env = TestEnv::new();
    env.write_user_config("[agents.codex]\ncredentials = true\nsync_config = false\n");
    let project = env.git_project("proj");
    let sb = Sandboxed {
        env: &env,
        dir: project.clone(),
    };
    let up = sb.run(&["up", "--no-attach"]);
    up.assert_code(0);
    assert!(
        up.stderr
            .contains("airlock secret set OPENAI_API_KEY --host api.openai.com"),
        "{}",
        up.stderr
    );
    let mut set = env.command(
        &project,
        &[
            "secret",
            "set",
            "OPENAI_API_KEY",
            "--host",
            "api.openai.com",
        ],
    );
    let mut child = set
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"sk-test-value\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    let again = sb.run(&["up", "--no-attach"]);
    again.assert_code(0);
    assert!(
        !again.stderr.contains("credentials = true"),
        "{}",
        again.stderr
    );
    let key = sb.exec("echo $OPENAI_API_KEY");
    assert!(key.stdout.starts_with("airlock-secret-"), "{}", key.stdout);
}

#[test]
fn persisted_agent_state_survives_down_and_lives_under_the_data_root() {
    let env = TestEnv::new();
    env.write_user_config("[agents.claude]\npersist_state = true\nsync_config = false\n");
    let project = env.git_project("proj");
    let sb = Sandboxed {
        env: &env,
        dir: project,
    };
    sb.run(&["up", "--no-attach"]).assert_code(0);
    sb.exec(
        "echo '{\"login\":1}' > ~/.claude.json && mkdir -p ~/.claude && echo s > ~/.claude/state",
    )
    .assert_code(0);
    sb.run(&["down"]).assert_code(0);
    let host = env.data_home().join("airlock/agent-state/claude");
    assert_eq!(
        std::fs::read_to_string(host.join(".claude.json")).unwrap(),
        "{\"login\":1}\n"
    );
    sb.run(&["up", "--no-attach"]).assert_code(0);
    let run = sb.exec("cat ~/.claude.json ~/.claude/state");
    run.assert_code(0);
    assert_eq!(run.stdout, "{\"login\":1}\ns\n");
}

#[test]
fn plan_shows_the_agents_tool_dir_sync_allowlist_and_persisted_state() {
    let env = TestEnv::new();
    env.write_user_config("agent = \"claude\"\n[agents.claude]\npersist_state = true\n");
    let project = env.git_project("proj");
    let plan = env.run_in(&project, &["plan"]);
    plan.assert_code(0);
    for needle in [
        "/var/lib/airlock/agents/claude (read-only",
        "npm @anthropic-ai/claude-code",
        "~/.claude: CLAUDE.md, settings.json, commands/, agents/, skills/",
        ".claude/, .claude.json (kept under airlock's data root",
    ] {
        assert!(
            plan.stdout.contains(needle),
            "{needle:?} not in:\n{}",
            plan.stdout
        );
    }
}

#[test]
fn home_files_land_with_their_modes_as_the_sandbox_user_on_a_fresh_and_a_retained_up() {
    let env = TestEnv::new();
    let project = env.git_project("proj");
    let sb = Sandboxed {
        env: &env,
        dir: project,
    };
    let files = "\"$HOME/.gitconfig\" \"$HOME/.config\" \"$HOME/.config/airlock\" \
                 \"$HOME/.config/airlock/git-credential-placeholder\"";
    let expected = |user: &str| format!("600 {user}\n700 {user}\n700 {user}\n700 {user}\n");
    sb.run(&["up", "--no-attach"]).assert_code(0);
    let user = sb.exec("id -un");
    user.assert_code(0);
    let user = user.stdout.trim().to_owned();
    let modes = sb.exec(&format!("stat -c '%a %U' {files}"));
    modes.assert_code(0);
    assert_eq!(modes.stdout, expected(&user));
    // Retained: `.config` and `.config/airlock` exist (kept with what else they hold), the
    // files are replaced whole.
    sb.exec(
        "echo mine > \"$HOME/.config/other\" && echo edited > \"$HOME/.gitconfig\" && \
         chmod 644 \"$HOME/.gitconfig\" && rm \"$HOME/.config/airlock/git-credential-placeholder\"",
    )
    .assert_code(0);
    let again = sb.run(&["up", "--no-attach", "--json"]);
    again.assert_code(0);
    assert_eq!(again.json()["reused"], true);
    let modes = sb.exec(&format!("stat -c '%a %U' {files}"));
    assert_eq!(modes.stdout, expected(&user));
    let kept = sb.exec("cat \"$HOME/.config/other\" && grep -c airlock \"$HOME/.gitconfig\"");
    kept.assert_code(0);
    assert!(kept.stdout.starts_with("mine\n"), "{}", kept.stdout);
    sb.run(&["down"]).assert_code(0);
}
