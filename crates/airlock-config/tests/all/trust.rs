//! C6: an untrusted project may only tighten the network policy.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use airlock_config::policy::{Action, RuleOrigin};
use airlock_config::raw::Preset;
use airlock_config::{config_hash, Origin, Overrides};

use crate::common::World;

const WIDENING: &str = "[network]\npreset = \"open\"\nallow = [\"widen.example.com\"]\n\
                        deny = [\"github.com\"]\n[network.hosts]\ndb = \"10.0.0.5\"\n";

#[test]
fn untrusted_project_cannot_widen_policy_and_each_dropped_rule_is_listed() {
    let w = World::new();
    let project = w.project("p", Some(WIDENING));
    let e = w.ok(Some(&project));
    assert!(!e.files.project_trusted);
    assert_eq!(e.network.preset.value, Preset::Dev);
    assert_eq!(e.network.preset.origin, Origin::Default);
    assert!(e.network.hosts.is_empty());
    let keys: Vec<&str> = e.network.ignored.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        ["network.preset", "network.allow[0]", "network.hosts.db"]
    );
    for ignored in &e.network.ignored {
        assert!(ignored.reason.contains("untrusted"), "{}", ignored.reason);
        assert!(
            ignored.reason.contains("airlock trust"),
            "{}",
            ignored.reason
        );
    }
    let policy = e.network.policy();
    assert!(!policy.decide("widen.example.com", 443).allowed);
    assert!(!policy.decide("anything.example.net", 443).allowed);
}

#[test]
fn untrusted_project_deny_rules_and_narrower_preset_always_apply() {
    let w = World::new();
    let project = w.project(
        "p",
        Some("[network]\npreset = \"none\"\ndeny = [\"github.com\"]\n"),
    );
    let e = w.ok(Some(&project));
    assert_eq!(e.network.preset.value, Preset::None);
    assert_eq!(e.network.preset.origin, Origin::Project);
    assert!(e.network.ignored.is_empty());
    let d = e.network.policy().decide("github.com", 443);
    assert!(!d.allowed);
    assert_eq!(d.rule.unwrap().origin, RuleOrigin::Project);
}

#[test]
fn trusted_project_widens_policy() {
    let w = World::new();
    let project = w.project("p", Some(WIDENING));
    let e = w
        .load_with(Some(&project), Overrides::default(), &|_, _| true)
        .unwrap();
    assert!(e.files.project_trusted);
    assert_eq!(e.network.preset.value, Preset::Open);
    assert!(e.network.ignored.is_empty());
    assert_eq!(e.network.hosts[0].name, "db");
    let policy = e.network.policy();
    assert!(policy.decide("widen.example.com", 443).allowed);
    assert!(
        !policy.decide("github.com", 443).allowed,
        "deny still beats allow"
    );
}

#[test]
fn trust_is_asked_with_the_canonical_root_and_the_config_hash_and_edits_revoke_it() {
    let w = World::new();
    let project = w.project("p", Some(WIDENING));
    let calls: RefCell<Vec<(PathBuf, String)>> = RefCell::new(Vec::new());
    let trusted_hash = config_hash(WIDENING.as_bytes());
    let store = |root: &Path, hash: &str| {
        calls.borrow_mut().push((root.to_owned(), hash.to_owned()));
        root == project.root && hash == trusted_hash
    };
    let e = w
        .load_with(Some(&project), Overrides::default(), &store)
        .unwrap();
    assert!(e.files.project_trusted);
    assert_eq!(
        calls.borrow()[0],
        (project.root.clone(), trusted_hash.clone())
    );
    assert_eq!(
        e.files.project.as_ref().unwrap().sha256.as_deref(),
        Some(trusted_hash.as_str())
    );

    std::fs::write(&project.config_path, format!("{WIDENING}# edited\n")).unwrap();
    let e = w
        .load_with(Some(&project), Overrides::default(), &store)
        .unwrap();
    assert!(
        !e.files.project_trusted,
        "an edited config is untrusted again"
    );
    assert_eq!(e.network.ignored.len(), 3);
}

#[test]
fn project_without_config_file_needs_no_trust() {
    let w = World::new();
    let project = w.project("p", None);
    let e = w.ok(Some(&project));
    assert!(e.files.project_trusted);
    assert!(!e.files.project.unwrap().present);
}

#[test]
fn user_config_widening_needs_no_trust() {
    let w = World::new();
    w.write_user("[network]\npreset = \"open\"\nallow = [\"x.example.com:8443\"]\n");
    let project = w.project("p", Some("[network]\npreset = \"dev\"\n"));
    let e = w.ok(Some(&project));
    assert_eq!(
        e.network.preset.value,
        Preset::Dev,
        "project narrows open → dev"
    );
    assert_eq!(e.network.rules[0].action, Action::Allow);
    assert_eq!(e.network.rules[0].origin, RuleOrigin::User);
    assert!(e.network.policy().decide("x.example.com", 8443).allowed);
}

#[test]
fn config_hash_is_sha256_hex() {
    assert_eq!(
        config_hash(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        config_hash(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}
