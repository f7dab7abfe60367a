//! Git inside the sandbox (A5): linked worktrees (C7, C8).

use super::{host_git, Sandboxed};
use crate::common::TestEnv;

/// A main repository with one commit and a linked worktree `wt1` of it, both under HOME.
fn repo_with_worktree(env: &TestEnv) -> (std::path::PathBuf, std::path::PathBuf) {
    let main = env.git_project("src/main");
    host_git(env, &main, &["config", "user.name", "Host User"]);
    host_git(env, &main, &["config", "user.email", "host@example.com"]);
    host_git(
        env,
        &main,
        &["commit", "-q", "--allow-empty", "-m", "first"],
    );
    let wt = env.home.join("src/wt1");
    host_git(
        env,
        &main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            wt.to_str().unwrap(),
        ],
    );
    (main, wt)
}

#[test]
fn a_linked_worktree_commits_from_inside_and_plan_shows_its_git_dir() {
    let env = TestEnv::new();
    let (main, wt) = repo_with_worktree(&env);
    let plan = env.run_in(&wt, &["plan"]);
    plan.assert_code(0);
    let common = main.join(".git");
    assert!(
        plan.stdout.contains("git dir") && plan.stdout.contains(common.to_str().unwrap()),
        "{}",
        plan.stdout
    );
    let sb = Sandboxed {
        env: &env,
        dir: wt.clone(),
    };
    sb.run(&["up", "--no-attach"]).assert_code(0);
    let run = sb.exec(
        "echo hi > file && git add file && \
         git -c user.name=In -c user.email=in@example.com commit -q -m inside && git status --short",
    );
    run.assert_code(0);
    let log = host_git(&env, &main, &["log", "--format=%s", "feature"]);
    assert_eq!(log.lines().next(), Some("inside"), "{log}");
}

#[test]
fn the_main_repositorys_hooks_and_config_are_read_only_inside() {
    let env = TestEnv::new();
    let (main, wt) = repo_with_worktree(&env);
    let sb = Sandboxed {
        env: &env,
        dir: wt.clone(),
    };
    sb.run(&["up", "--no-attach"]).assert_code(0);
    let hooks = main.join(".git/hooks");
    let config = main.join(".git/config");
    let run = sb.exec(&format!(
        "echo 'touch /tmp/pwned' > {}/post-commit; echo '[core]' >> {}",
        hooks.display(),
        config.display()
    ));
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(!hooks.join("post-commit").exists());
    // The work-tree protection rules are not applied to the git directory itself.
    assert!(!main.join(".git/.git").exists() && !main.join(".git/.airlock").exists());
    assert!(!std::fs::read_to_string(&config)
        .unwrap()
        .ends_with("[core]\n"));
}

#[test]
fn a_forged_dot_git_file_is_refused_before_anything_starts() {
    let env = TestEnv::new();
    let (_main, wt) = repo_with_worktree(&env);
    let victim = env.dir("victim");
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", victim.display())).unwrap();
    let run = env.run_in(&wt, &["up", "--no-attach"]);
    run.assert_code(2);
    assert!(run.stderr.contains(".git"), "{}", run.stderr);
    assert!(
        !env.state_home()
            .join("airlock/lifecycle/sandboxes")
            .exists()
            || std::fs::read_dir(env.state_home().join("airlock/lifecycle/sandboxes"))
                .unwrap()
                .next()
                .is_none()
    );
}
