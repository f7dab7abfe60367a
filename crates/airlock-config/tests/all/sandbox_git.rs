//! The sandbox's git configuration, exercised with real git (A5).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use airlock_config::sandbox_git::{render, GitSetup};

fn have_git() -> bool {
    airlock_testkit::needs_tool("git")
}

/// A home holding the rendered files.
fn home_with_config(safe: &Path) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let setup = GitSetup {
        safe_directories: vec![safe.to_owned()],
        user_name: Some("Sandbox Tester".to_owned()),
        user_email: Some("tester@example.com".to_owned()),
    };
    let (files, dropped) = render(&setup, home.path());
    assert!(dropped.is_empty(), "{dropped:?}");
    for f in files {
        let path = home.path().join(f.home_rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, f.contents).unwrap();
        if f.executable {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    home
}

fn git(home: &Path, cwd: &Path, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> String {
    let mut child = Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn git_hands_the_placeholder_as_basic_credentials_for_github() {
    if !have_git() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let home = home_with_config(ws.path());
    let placeholder = "airlock-secret-0123456789abcdef0123456789abcdef";
    let out = git(
        home.path(),
        ws.path(),
        &["credential", "fill"],
        "protocol=https\nhost=github.com\npath=o/r.git\n\n",
        &[("GH_TOKEN", placeholder)],
    );
    assert!(out.contains("username=x-access-token\n"), "{out}");
    assert!(out.contains(&format!("password={placeholder}\n")), "{out}");
}

#[test]
fn a_github_ssh_remote_is_used_over_https_and_identity_is_the_hosts() {
    if !have_git() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let ws_path: PathBuf = ws.path().canonicalize().unwrap();
    let home = home_with_config(&ws_path);
    git(home.path(), &ws_path, &["init", "-q"], "", &[]);
    git(
        home.path(),
        &ws_path,
        &["remote", "add", "origin", "git@github.com:owner/repo.git"],
        "",
        &[],
    );
    let url = git(
        home.path(),
        &ws_path,
        &["remote", "get-url", "--push", "origin"],
        "",
        &[],
    );
    assert_eq!(url.trim(), "https://github.com/owner/repo.git");
    git(
        home.path(),
        &ws_path,
        &["commit", "-q", "--allow-empty", "-m", "x"],
        "",
        &[],
    );
    let who = git(
        home.path(),
        &ws_path,
        &["log", "-1", "--format=%an <%ae>"],
        "",
        &[],
    );
    assert_eq!(who.trim(), "Sandbox Tester <tester@example.com>");
    let safe = git(
        home.path(),
        &ws_path,
        &["config", "--global", "--get-all", "safe.directory"],
        "",
        &[],
    );
    assert_eq!(safe.trim(), ws_path.to_str().unwrap());
}
