//! `workspace_mode = "clone"` (A5): commits from inside reach the host only through the
//! `airlock-<name>` remote; the host work tree is never written.

use super::{host_git, Sandboxed};
use crate::common::TestEnv;

#[test]
fn a_clone_mode_workspace_commits_inside_and_the_host_sees_them_only_through_the_remote() {
    let env = TestEnv::new();
    let project = env.git_project("proj");
    host_git(
        &env,
        &env.home,
        &["config", "--global", "user.name", "Host"],
    );
    host_git(
        &env,
        &env.home,
        &["config", "--global", "user.email", "h@example.com"],
    );
    env.write_project_config(&project, "workspace_mode = \"clone\"\n");
    env.write(&project.join("README"), "host\n");
    host_git(&env, &project, &["add", "."]);
    host_git(&env, &project, &["commit", "-q", "-m", "host commit"]);
    let before = crate::common::snapshot(&project);
    let sb = Sandboxed {
        env: &env,
        dir: project.clone(),
    };
    let up = sb.run(&["up", "--no-attach", "--json"]);
    up.assert_code(0);
    let name = up.json()["name"].as_str().unwrap().to_owned();
    let remote = format!("airlock-{name}");
    sb.exec("echo sandbox > README && echo new > added && git add -A && git commit -q -m inside")
        .assert_code(0);
    // The host work tree (and its git directory's refs) are untouched.
    let after = crate::common::snapshot(&project);
    let changed: Vec<String> = before
        .diff(&after)
        .into_iter()
        .filter(|p| !p.contains(".git/"))
        .collect();
    assert!(changed.is_empty(), "host work tree written: {changed:?}");
    assert_eq!(
        std::fs::read_to_string(project.join("README")).unwrap(),
        "host\n"
    );
    // ... while the remote shows the sandbox's commit.
    host_git(&env, &project, &["fetch", "-q", &remote]);
    let branch = host_git(&env, &project, &["rev-parse", "--abbrev-ref", "HEAD"]);
    let log = host_git(
        &env,
        &project,
        &[
            "log",
            "-1",
            "--format=%s",
            &format!("{remote}/{}", branch.trim()),
        ],
    );
    assert_eq!(log.trim(), "inside");
    // The clone's git config is read-only inside (C8: the host fetches from it).
    assert_ne!(sb.exec("echo '[core]' >> .git/config").code, Some(0));
}

#[test]
fn down_keeps_a_clone_with_unfetched_commits_and_clean_removes_it_once_fetched() {
    let env = TestEnv::new();
    let project = env.git_project("proj");
    env.write_project_config(&project, "workspace_mode = \"clone\"\n");
    host_git(
        &env,
        &project,
        &[
            "-c",
            "user.name=H",
            "-c",
            "user.email=h@e",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "base",
        ],
    );
    let sb = Sandboxed {
        env: &env,
        dir: project.clone(),
    };
    let up = sb.run(&["up", "--no-attach", "--json"]);
    up.assert_code(0);
    let name = up.json()["name"].as_str().unwrap().to_owned();
    let clone = env
        .data_home()
        .join("airlock/clones")
        .join(&name)
        .join("proj");
    assert!(clone.join(".git").is_dir());
    sb.exec("git -c user.name=S -c user.email=s@e commit -q --allow-empty -m unfetched")
        .assert_code(0);
    let down = sb.run(&["down"]);
    down.assert_code(0);
    assert!(down.stdout.contains("kept clone"), "{}", down.stdout);
    assert!(
        clone.join(".git").is_dir(),
        "an unfetched clone was removed"
    );
    // Still unfetched: clean leaves it.
    let clean = env.run_in(&project, &["clean"]);
    clean.assert_code(0);
    assert!(clone.join(".git").is_dir());
    host_git(&env, &project, &["fetch", "-q", &format!("airlock-{name}")]);
    let clean = env.run_in(&project, &["clean"]);
    clean.assert_code(0);
    assert!(clean.stdout.contains("removed clone"), "{}", clean.stdout);
    assert!(!clone.exists());
}

#[test]
fn run_refuses_a_clone_mode_workspace_instead_of_writing_the_work_tree() {
    let env = TestEnv::new();
    let project = env.git_project("proj");
    env.write_project_config(&project, "workspace_mode = \"clone\"\n");
    let run = env.run_in(&project, &["run", "--", "touch", "written"]);
    run.assert_code(2);
    assert!(run.stderr.contains("clone"), "{}", run.stderr);
    assert!(!project.join("written").exists());
}
