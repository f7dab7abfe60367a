//! Host-side resolution: links are followed outside sandbox-writable directories only.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use airlock_files::{host_path, ResolveError, Resolver};

fn checked(path: &Path) -> airlock_files::CheckedPath {
    host_path(path.as_os_str(), Path::new("/")).unwrap()
}

#[test]
fn a_link_planted_inside_a_workspace_is_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let secret = tmp.path().join("secret");
    fs::create_dir_all(&ws).unwrap();
    fs::create_dir_all(&secret).unwrap();
    symlink(&secret, ws.join("out")).unwrap();
    let resolver = Resolver::host(std::slice::from_ref(&ws));
    // As a parent component: refused.
    let err = resolver
        .target(&checked(&ws.join("out/new")), "x", false)
        .unwrap_err();
    assert!(
        matches!(err, ResolveError::LinkInWritable { .. }),
        "{err:?}"
    );
    // As the last component: the link itself is the target (exists), never its directory.
    let err = resolver
        .target(&checked(&ws.join("out")), "x", false)
        .unwrap_err();
    assert!(matches!(err, ResolveError::Exists { .. }), "{err:?}");
    let target = resolver
        .target(&checked(&ws.join("out")), "x", true)
        .unwrap();
    assert_eq!(target.name, "out");
    // As a source: the parent resolves, the link is what gets sent.
    let err = resolver.source(&checked(&ws.join("out/file"))).unwrap_err();
    assert!(
        matches!(err, ResolveError::LinkInWritable { .. }),
        "{err:?}"
    );
}

#[test]
fn a_host_link_outside_workspaces_is_followed_like_cp_does() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    fs::create_dir(&real).unwrap();
    symlink(&real, tmp.path().join("downloads")).unwrap();
    let resolver = Resolver::host(&[]);
    let target = resolver
        .target(&checked(&tmp.path().join("downloads")), "x", false)
        .unwrap();
    assert_eq!(target.name, "x");
    assert_eq!(
        Path::new(&target.display),
        fs::canonicalize(&real).unwrap().join("x")
    );
    let target = resolver
        .target(&checked(&tmp.path().join("downloads/sub")), "x", false)
        .unwrap();
    assert_eq!(target.name, "sub");
}

#[test]
fn a_host_link_that_leads_into_a_workspace_stops_following_there() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let secret = tmp.path().join("secret");
    fs::create_dir_all(ws.join("a")).unwrap();
    fs::create_dir_all(&secret).unwrap();
    // host link (followed) → ws/a (a directory), ws/a/b is a planted link (not followed).
    symlink(ws.join("a"), tmp.path().join("shortcut")).unwrap();
    symlink(&secret, ws.join("a/b")).unwrap();
    let resolver = Resolver::host(std::slice::from_ref(&ws));
    let ok = resolver
        .target(&checked(&tmp.path().join("shortcut/new")), "x", false)
        .unwrap();
    assert_eq!(ok.name, "new");
    let err = resolver
        .target(&checked(&tmp.path().join("shortcut/b/new")), "x", false)
        .unwrap_err();
    assert!(
        matches!(err, ResolveError::LinkInWritable { .. }),
        "{err:?}"
    );
    // A host link whose target passes through a planted link is refused as well.
    symlink(ws.join("a/b/inner"), tmp.path().join("through")).unwrap();
    let err = resolver
        .target(&checked(&tmp.path().join("through/new")), "x", false)
        .unwrap_err();
    assert!(
        matches!(err, ResolveError::LinkInWritable { .. }),
        "{err:?}"
    );
}

#[test]
fn a_host_link_into_proc_is_refused_after_resolution() {
    let tmp = tempfile::tempdir().unwrap();
    symlink("/proc/self", tmp.path().join("p")).unwrap();
    let resolver = Resolver::host(&[]);
    let err = resolver
        .target(&checked(&tmp.path().join("p/new")), "x", false)
        .unwrap_err();
    assert!(matches!(err, ResolveError::Forbidden { .. }), "{err:?}");
    let err = resolver
        .target(&checked(&tmp.path().join("p")), "x", false)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ResolveError::Forbidden { .. } | ResolveError::Exists { .. }
        ),
        "{err:?}"
    );
}

#[test]
fn the_strict_resolver_follows_no_link_at_all() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    fs::create_dir(&real).unwrap();
    symlink(&real, tmp.path().join("link")).unwrap();
    let err = Resolver::strict()
        .target(&checked(&tmp.path().join("link/new")), "x", false)
        .unwrap_err();
    assert!(
        matches!(err, ResolveError::LinkInWritable { .. }),
        "{err:?}"
    );
    let err = Resolver::strict()
        .target(&checked(&tmp.path().join("link")), "x", false)
        .unwrap_err();
    assert!(matches!(err, ResolveError::Exists { .. }), "{err:?}");
    assert!(Resolver::strict()
        .source(&checked(&tmp.path().join("link")))
        .is_ok());
}

#[test]
fn a_missing_parent_is_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let err = Resolver::host(&[])
        .target(&checked(&tmp.path().join("no/such/dir")), "x", false)
        .unwrap_err();
    assert!(matches!(err, ResolveError::NotFound { .. }), "{err:?}");
}
