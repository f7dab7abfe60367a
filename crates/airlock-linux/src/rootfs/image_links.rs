//! Refuses a non-host image that has a symbolic link on any path airlock creates or mounts.
//!
//! Before `pivot_root`, the init stage resolves paths against the host's root: an image (an
//! imported archive is hostile input) with `home -> /etc` would make `create_dir_all` of the
//! sandbox home create a directory in the host's `/etc`, and a link on a mount target would
//! move a mount or an empty mount-point file onto a host path. So every component of every
//! such path, below the new root, must be a real directory (or the final file) or absent.
//! Nothing else writes to the image while the init stage runs: the store is the user's own
//! 0700 directory and the upper layer is a fresh tmpfs.

use std::path::{Component, Path, PathBuf};

use super::{RootfsError, EMPTY_DIRS};
use crate::bootstrap::Bootstrap;
use crate::spec::{EGRESS_DIR, SYSTEM_CA_BUNDLE};

/// Files under `/etc` that the init stage masks or replaces (see `etc.rs`).
const ETC_TARGETS: &[&str] = &[
    "etc/shadow",
    "etc/shadow-",
    "etc/gshadow",
    "etc/gshadow-",
    "etc/ssh",
    "etc/ssl/private",
    "etc/NetworkManager/system-connections",
    "etc/machine-id",
    "etc/passwd",
    "etc/group",
    "etc/hostname",
    "etc/hosts",
];

pub(super) fn refuse_links(root: &Path, boot: &Bootstrap) -> Result<(), RootfsError> {
    let mut targets: Vec<PathBuf> = EMPTY_DIRS.iter().map(|(d, _)| PathBuf::from(d)).collect();
    targets.extend(ETC_TARGETS.iter().map(PathBuf::from));
    // The bundle itself is replaced only when it is a regular file (`bind_egress`); the
    // directories on its way must not be links.
    if let Some(dir) = Path::new(SYSTEM_CA_BUNDLE).parent() {
        targets.push(dir.to_path_buf());
    }
    targets.push(PathBuf::from(EGRESS_DIR));
    targets.push(boot.spec.user.home.clone());
    targets.extend(
        boot.spec
            .mappings_in_mount_order()
            .iter()
            .map(|m| m.sandbox.clone()),
    );
    for t in &targets {
        check(root, t)?;
    }
    Ok(())
}

/// Each existing component of `target` below `root` must not be a symbolic link.
fn check(root: &Path, target: &Path) -> Result<(), RootfsError> {
    let mut at = root.to_path_buf();
    let mut shown = PathBuf::from("/");
    for c in target.components() {
        let Component::Normal(name) = c else {
            continue;
        };
        at.push(name);
        shown.push(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(RootfsError::ImageLink { path: shown })
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(RootfsError::Inspect { path: at, source }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_link_anywhere_on_a_target_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        symlink("/etc", root.join("home/alice")).unwrap();
        symlink("../tmp", root.join("etc/hosts")).unwrap();
        let err = check(root, Path::new("/home/alice/proj")).unwrap_err();
        assert!(err.to_string().contains("/home/alice"), "{err}");
        assert!(check(root, Path::new("/etc/hosts")).is_err());
        assert!(check(root, Path::new("/home/bob/proj")).is_ok());
        assert!(check(root, Path::new("/srv")).is_ok());
    }
}
