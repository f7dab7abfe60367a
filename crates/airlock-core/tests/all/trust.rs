//! Trust (C6): keyed by canonical project path and config digest; reading changes nothing.

use airlock_config::config_hash;
use airlock_core::{TrustError, TrustStore};

fn world() -> (tempfile::TempDir, TrustStore, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let store = TrustStore::open(dir.path().join("state/airlock")).unwrap();
    (dir, store, project)
}

#[test]
fn trusted_project_with_the_same_config_is_trusted() {
    let (_dir, store, project) = world();
    let hash = config_hash(b"[network]\nallow = [\"example.com\"]\n");
    assert!(!store.is_trusted(&project, &hash).unwrap());
    store.trust(&project, &hash).unwrap();
    assert!(store.is_trusted(&project, &hash).unwrap());
}

#[test]
fn edited_config_is_untrusted_again() {
    let (_dir, store, project) = world();
    store.trust(&project, &config_hash(b"allow = []")).unwrap();
    assert!(!store
        .is_trusted(&project, &config_hash(b"allow = [\"evil.com\"]"))
        .unwrap());
}

#[test]
fn trust_of_one_project_does_not_extend_to_another() {
    let (dir, store, project) = world();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let hash = config_hash(b"same");
    store.trust(&project, &hash).unwrap();
    assert!(!store.is_trusted(&other, &hash).unwrap());
}

#[test]
fn untrust_reports_whether_the_project_was_trusted() {
    let (_dir, store, project) = world();
    let hash = config_hash(b"x");
    assert!(!store.untrust(&project).unwrap());
    store.trust(&project, &hash).unwrap();
    assert!(store.untrust(&project).unwrap());
    assert!(!store.is_trusted(&project, &hash).unwrap());
    assert!(!store.untrust(&project).unwrap());
}

#[test]
fn symlinked_spelling_of_the_project_hits_the_same_entry() {
    let (dir, store, project) = world();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&project, &link).unwrap();
    let hash = config_hash(b"x");
    store.trust(&link, &hash).unwrap();
    assert!(store.is_trusted(&project, &hash).unwrap());
    assert!(store
        .is_trusted(&project.join("../project"), &hash)
        .unwrap());
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].root, project.canonicalize().unwrap());
    assert_eq!(listed[0].config_sha256, hash);
}

#[test]
fn is_trusted_and_list_create_no_file_or_directory() {
    let (dir, store, project) = world();
    assert!(!store.is_trusted(&project, &config_hash(b"x")).unwrap());
    assert!(store.list().unwrap().is_empty());
    assert!(!store.untrust(&project).unwrap());
    assert!(
        !dir.path().join("state").exists(),
        "reading trust created state"
    );
}

#[test]
fn invalid_digest_or_relative_root_is_rejected() {
    let (_dir, store, project) = world();
    assert!(matches!(
        store.trust(&project, "abc"),
        Err(TrustError::InvalidHash { .. })
    ));
    let upper = config_hash(b"x").to_uppercase();
    assert!(matches!(
        store.trust(&project, &upper),
        Err(TrustError::InvalidHash { .. })
    ));
    assert!(matches!(
        store.trust(std::path::Path::new("project"), &config_hash(b"x")),
        Err(TrustError::NotAbsolute { .. })
    ));
}

#[test]
fn concurrent_trusts_of_different_projects_are_all_kept() {
    let (dir, store, _project) = world();
    let roots: Vec<_> = (0..8)
        .map(|i| {
            let p = dir.path().join(format!("p{i}"));
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    std::thread::scope(|s| {
        for root in &roots {
            let store = store.clone();
            s.spawn(move || store.trust(root, &config_hash(b"x")).unwrap());
        }
    });
    assert_eq!(store.list().unwrap().len(), 8);
}
