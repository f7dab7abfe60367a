//! Private directories (issue 4 item 9): refuse what another user could control.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use airlock_core::{check_private_dir, ensure_private_dir, DirPresence, PrivateDirError};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn missing_components_are_created_0700() {
    let home = tempfile::tempdir().unwrap();
    let target = home.path().join(".local/state/airlock");
    ensure_private_dir(&target, home.path()).unwrap();
    for p in [
        home.path().join(".local"),
        home.path().join(".local/state"),
        target.clone(),
    ] {
        assert_eq!(mode(&p), 0o700, "{}", p.display());
    }
    // Idempotent.
    ensure_private_dir(&target, home.path()).unwrap();
    assert_eq!(
        check_private_dir(&target, home.path()).unwrap(),
        DirPresence::Present
    );
}

#[test]
fn existing_0755_directories_are_accepted() {
    let home = tempfile::tempdir().unwrap();
    let local = home.path().join(".local");
    std::fs::create_dir(&local).unwrap();
    chmod(&local, 0o755);
    ensure_private_dir(&local.join("state"), home.path()).unwrap();
}

#[test]
fn check_creates_nothing_and_reports_absent() {
    let home = tempfile::tempdir().unwrap();
    let target = home.path().join("a/b/c");
    assert_eq!(
        check_private_dir(&target, home.path()).unwrap(),
        DirPresence::Absent
    );
    assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0);
}

#[test]
fn group_writable_ancestor_is_refused_with_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let shared = home.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o775);
    let err = ensure_private_dir(&shared.join("airlock"), home.path()).unwrap_err();
    assert!(
        matches!(&err, PrivateDirError::Writable { path, mode: 0o775 } if path == &shared),
        "{err:?}"
    );
    assert!(err.to_string().contains("chmod go-w"), "{err}");
    assert!(
        !shared.join("airlock").exists(),
        "nothing may be created under a refused ancestor"
    );
}

#[test]
fn world_writable_target_is_refused_by_check_too() {
    let home = tempfile::tempdir().unwrap();
    let target = home.path().join("airlock");
    std::fs::create_dir(&target).unwrap();
    chmod(&target, 0o777);
    assert!(matches!(
        check_private_dir(&target, home.path()),
        Err(PrivateDirError::Writable { mode: 0o777, .. })
    ));
}

#[test]
fn symlinked_component_is_refused_even_when_it_points_at_a_private_dir() {
    let home = tempfile::tempdir().unwrap();
    let real = home.path().join("real");
    std::fs::create_dir(&real).unwrap();
    chmod(&real, 0o700);
    let link = home.path().join("state");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for target in [link.clone(), link.join("airlock")] {
        let err = ensure_private_dir(&target, home.path()).unwrap_err();
        assert!(
            matches!(&err, PrivateDirError::Symlink { path } if path == &link),
            "{err:?}"
        );
    }
    assert!(!real.join("airlock").exists());
}

#[test]
fn regular_file_in_place_of_a_directory_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("state");
    std::fs::write(&file, b"").unwrap();
    assert!(matches!(
        ensure_private_dir(&file.join("airlock"), home.path()),
        Err(PrivateDirError::NotADirectory { .. })
    ));
}

#[test]
fn directory_owned_by_another_user_is_refused() {
    let uid = rustix::process::geteuid().as_raw();
    let (anchor, target, owner) = if uid == 0 {
        let home = tempfile::tempdir().unwrap();
        let theirs = home.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chmod(&theirs, 0o700);
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        (home.keep(), theirs, 65534)
    } else {
        // Unprivileged: /usr is root's and not writable by others.
        (
            Path::new("/").to_path_buf(),
            Path::new("/usr").to_path_buf(),
            0,
        )
    };
    let err = check_private_dir(&target, &anchor).unwrap_err();
    assert!(
        matches!(&err, PrivateDirError::OwnedByOther { path, owner: o, uid: u } if path == &target && *o == owner && *u == uid),
        "{err:?}"
    );
    if uid == 0 {
        std::fs::remove_dir_all(&anchor).unwrap();
    }
}

#[test]
fn paths_outside_the_anchor_or_with_dot_dot_are_refused() {
    let home = tempfile::tempdir().unwrap();
    assert!(matches!(
        ensure_private_dir(Path::new("/etc/airlock"), home.path()),
        Err(PrivateDirError::NotBelow { .. })
    ));
    assert!(matches!(
        ensure_private_dir(&home.path().join("a/../b"), home.path()),
        Err(PrivateDirError::Unclean { .. })
    ));
}
