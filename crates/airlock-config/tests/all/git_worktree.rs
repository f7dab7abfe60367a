//! Linked worktrees (A5) and the `.git` file as hostile input (C7).

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_config::git_worktree::{linked_worktree, WorktreeError};

use crate::common::World;

/// Whether git exists; without it these tests skip (and fail under CI).
fn have_git() -> bool {
    airlock_testkit::needs_tool("git")
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A main repository at `<home>/src/main` and a linked worktree at `<home>/src/wt1`.
fn repo_with_worktree(w: &World) -> (PathBuf, PathBuf) {
    let main = w.dir("home/user/src/main");
    git(&main, &["init", "-q", "-b", "main"]);
    git(&main, &["commit", "-q", "--allow-empty", "-m", "first"]);
    let wt = main.parent().unwrap().join("wt1");
    git(&main, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    (main, wt)
}

#[test]
fn a_linked_worktree_maps_its_confirmed_common_git_dir() {
    if !have_git() {
        return;
    }
    let w = World::new();
    let (main, wt) = repo_with_worktree(&w);
    let linked = linked_worktree(&wt, &w.roots).unwrap().unwrap();
    assert_eq!(linked.common_dir, main.join(".git"));
    assert_eq!(linked.worktree_git_dir, main.join(".git/worktrees/wt1"));
    // The main work tree itself has a `.git` directory: nothing extra to map.
    assert!(linked_worktree(&main, &w.roots).unwrap().is_none());
}

#[test]
fn a_forged_gitdir_without_gits_back_pointer_is_not_mapped() {
    if !have_git() {
        return;
    }
    let w = World::new();
    let (_main, wt) = repo_with_worktree(&w);
    // Another repository, never registered with this worktree.
    let victim = w.dir("home/user/src/victim");
    git(&victim, &["init", "-q"]);
    let fake = victim.join(".git/worktrees/x");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::write(fake.join("commondir"), "../..\n").unwrap();
    std::fs::write(fake.join("gitdir"), "/elsewhere/.git\n").unwrap();
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", fake.display())).unwrap();
    match linked_worktree(&wt, &w.roots) {
        Err(WorktreeError::NotConfirmed { .. }) => {}
        other => panic!("expected NotConfirmed, got {other:?}"),
    }
    // Naming the victim's git directory itself: no back-pointer file at all.
    std::fs::write(
        wt.join(".git"),
        format!("gitdir: {}\n", victim.join(".git").display()),
    )
    .unwrap();
    assert!(matches!(
        linked_worktree(&wt, &w.roots),
        Err(WorktreeError::BadPath { .. })
    ));
}

#[test]
fn a_gitdir_naming_a_credential_root_is_refused_even_with_a_back_pointer() {
    let w = World::new();
    let wt = w.dir("home/user/src/wt");
    // Everything git would check, laid out inside ~/.ssh.
    let fake = w.dir("home/user/.ssh/worktrees/wt");
    std::fs::write(fake.join("commondir"), "../..\n").unwrap();
    std::fs::write(
        fake.join("gitdir"),
        format!("{}\n", wt.join(".git").display()),
    )
    .unwrap();
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", fake.display())).unwrap();
    match linked_worktree(&wt, &w.roots) {
        Err(WorktreeError::BadPath { reason, .. }) => assert!(reason.contains(".ssh"), "{reason}"),
        other => panic!("expected BadPath, got {other:?}"),
    }
}

#[test]
fn a_gitdir_whose_common_dir_contains_the_workspace_is_refused() {
    let w = World::new();
    let common = w.dir("home/user/src/big/.git");
    let wt = w.dir("home/user/src/big/.git/inner-wt");
    let g = w.dir("home/user/src/big/.git/worktrees/inner");
    std::fs::write(g.join("commondir"), "../..\n").unwrap();
    std::fs::write(g.join("gitdir"), format!("{}\n", wt.join(".git").display())).unwrap();
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", g.display())).unwrap();
    match linked_worktree(&wt, &w.roots) {
        Err(WorktreeError::BadPath { reason, .. }) => {
            assert!(reason.contains(&common.display().to_string()), "{reason}")
        }
        other => panic!("expected BadPath, got {other:?}"),
    }
}

#[test]
fn a_symlinked_dot_git_or_gitdir_component_is_refused_not_followed() {
    if !have_git() {
        return;
    }
    let w = World::new();
    let (main, wt) = repo_with_worktree(&w);
    let text = std::fs::read_to_string(wt.join(".git")).unwrap();
    // `.git` itself a link.
    std::fs::remove_file(wt.join(".git")).unwrap();
    let elsewhere = w.base.join("gitfile");
    std::fs::write(&elsewhere, &text).unwrap();
    symlink(&elsewhere, wt.join(".git")).unwrap();
    assert!(matches!(
        linked_worktree(&wt, &w.roots),
        Err(WorktreeError::Read(_))
    ));
    // A link on the way to the worktree's git dir.
    std::fs::remove_file(wt.join(".git")).unwrap();
    let link = w.base.join("linked-main");
    symlink(&main, &link).unwrap();
    std::fs::write(
        wt.join(".git"),
        format!("gitdir: {}\n", link.join(".git/worktrees/wt1").display()),
    )
    .unwrap();
    match linked_worktree(&wt, &w.roots) {
        Err(WorktreeError::BadPath { reason, .. }) => {
            assert!(reason.contains("symbolic link"), "{reason}")
        }
        other => panic!("expected BadPath, got {other:?}"),
    }
}

#[test]
fn a_malformed_or_oversized_dot_git_file_is_an_error() {
    let w = World::new();
    let wt = w.dir("home/user/src/wt");
    std::fs::write(wt.join(".git"), "not a link\n").unwrap();
    assert!(matches!(
        linked_worktree(&wt, &w.roots),
        Err(WorktreeError::Malformed { .. })
    ));
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", "x".repeat(5000))).unwrap();
    assert!(matches!(
        linked_worktree(&wt, &w.roots),
        Err(WorktreeError::Read(_))
    ));
}

#[test]
fn the_effective_workspace_of_a_linked_worktree_carries_its_git_dir_and_a_forgery_is_an_error() {
    if !have_git() {
        return;
    }
    let w = World::new();
    let (main, wt) = repo_with_worktree(&w);
    let project = airlock_config::Project::at(wt.clone(), airlock_config::ProjectKind::Git);
    let eff = w.ok(Some(&project));
    let linked = eff.workspaces[0].linked_git_dir.as_ref().unwrap();
    assert_eq!(linked.common_dir, main.join(".git"));

    std::fs::write(wt.join(".git"), "gitdir: /etc\n").unwrap();
    let errors = w.errors(Some(&project));
    let d = crate::common::find(&errors, "workspace");
    assert_eq!(d.file, wt.join(".git"));
}

#[test]
fn a_clone_mode_worktree_maps_no_main_git_dir() {
    if !have_git() {
        return;
    }
    let w = World::new();
    let (_main, wt) = repo_with_worktree(&w);
    std::fs::create_dir_all(wt.join(".airlock")).unwrap();
    std::fs::write(
        wt.join(".airlock/config.toml"),
        "workspace_mode = \"clone\"\n",
    )
    .unwrap();
    let project = airlock_config::Project::at(wt.clone(), airlock_config::ProjectKind::Airlock);
    let eff = w.ok(Some(&project));
    assert!(eff.workspaces[0].linked_git_dir.is_none());
}
