//! `protect` and `[[unprotect]]` (issue 9.9): user config only, validated strictly.

use crate::common::{find, World};
use airlock_config::protect::IfMissing;
use airlock_config::Origin;

fn protected(eff: &airlock_config::Effective) -> Vec<(String, bool)> {
    eff.protect
        .iter()
        .map(|p| (p.path.clone(), p.lifted))
        .collect()
}

#[test]
fn defaults_protect_airlock_git_hooks_and_git_config() {
    let w = World::new();
    let p = w.project("proj", None);
    let eff = w.ok(Some(&p));
    let got = protected(&eff);
    for path in [
        ".airlock",
        ".git/hooks",
        ".git/config",
        ".git/modules/*/hooks",
    ] {
        assert!(got.contains(&(path.to_owned(), false)), "{path}: {got:?}");
    }
    let hooks = eff.protect.iter().find(|p| p.path == ".git/hooks").unwrap();
    assert_eq!(hooks.if_missing, IfMissing::Dir);
    assert_eq!(hooks.origin, Origin::Default);
}

#[test]
fn user_config_adds_paths_and_lifts_one_for_one_project_only() {
    let w = World::new();
    let p = w.project("proj", None);
    let other = w.project("other", None);
    w.write_user(&format!(
        "protect = [\".envrc\", \"packages/*/Makefile\"]\n\n[[unprotect]]\nproject = \"{}\"\npaths = [\".git/config\", \".envrc\"]\n",
        p.root.display()
    ));
    let got = protected(&w.ok(Some(&p)));
    assert!(got.contains(&(".envrc".to_owned(), true)), "{got:?}");
    assert!(got.contains(&(".git/config".to_owned(), true)), "{got:?}");
    assert!(
        got.contains(&("packages/*/Makefile".to_owned(), false)),
        "{got:?}"
    );
    assert!(got.contains(&(".git/hooks".to_owned(), false)), "{got:?}");
    let got = protected(&w.ok(Some(&other)));
    assert!(got.contains(&(".git/config".to_owned(), false)), "{got:?}");
}

#[test]
fn a_project_config_can_neither_add_nor_lift_protection() {
    let w = World::new();
    let p = w.project(
        "proj",
        Some("protect = [\"x\"]\n\n[[unprotect]]\nproject = \"/\"\npaths = [\".git/hooks\"]\n"),
    );
    let diags = w.errors(Some(&p));
    assert!(find(&diags, "protect").message.contains("user config"));
    assert!(find(&diags, "unprotect").message.contains("user config"));
}

#[test]
fn bad_protect_entries_are_each_reported() {
    let w = World::new();
    let diags = w.user_errors(
        "protect = [\"/etc/passwd\", \"a/../b\", \".git/hooks\", \"x\", \"x\"]\n\n\
         [[unprotect]]\nproject = \"relative\"\npaths = []\n\n\
         [[unprotect]]\nproject = \"/p\"\npaths = [\".airlock\", \"nope\"]\n",
    );
    assert!(find(&diags, "protect[0]").message.contains("relative"));
    assert!(find(&diags, "protect[1]").message.contains(".."));
    assert!(find(&diags, "protect[2]")
        .message
        .contains("already protected"));
    assert!(find(&diags, "protect[4]")
        .message
        .contains("already protected"));
    assert!(find(&diags, "unprotect[0].project")
        .message
        .contains("absolute"));
    assert!(find(&diags, "unprotect[1].paths[0]")
        .message
        .contains("cannot be lifted"));
    assert!(find(&diags, "unprotect[1].paths[1]")
        .message
        .contains("not a protected path"));
}
