//! The runtime root when `XDG_RUNTIME_DIR` is unset (root on a server, CI, containers): a
//! directory of this user's own on a tmpfs, so a run's sockets and small per-run files cost no
//! disk inode churn (B3: ~2.6 ms per `run` on this machine's ext4). Only sockets and small files
//! live there; no writable layer of a sandbox does.
//!
//! Rule: `/dev/shm/airlock-<uid>` when `/dev/shm` is a tmpfs and that directory is ours: created
//! here with mode 0700 when missing, else accepted only when it is a real directory (not a
//! link), owned by this uid, with mode 0700 exactly. Anything else — another user's
//! directory, a link, a file, wider permissions, no tmpfs — is refused and the runtime root
//! stays on disk (`<state>/run`); `airlock doctor` says which and what the disk costs.
//! `/dev/shm` is used rather than `/run/user/<uid>`, which exists only while the user has a
//! login session: a persistent sandbox's sockets must stay where the next command looks.

use std::path::{Path, PathBuf};

/// Where the tmpfs runtime base is looked for.
pub const SHM_DIR: &str = "/dev/shm";

/// Why the tmpfs runtime base was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FastRuntimeError {
    #[error("{dir} is not a tmpfs")]
    NotTmpfs { dir: PathBuf },
    #[error("{path} exists and is not a directory of this user with mode 0700 ({found})")]
    NotOurs { path: PathBuf, found: String },
    #[error("cannot create {path}: {reason}")]
    Create { path: PathBuf, reason: String },
}

/// The tmpfs runtime base for `uid` below `shm` (see the module docs), created when missing.
pub fn tmpfs_runtime_base(shm: &Path, uid: u32) -> Result<PathBuf, FastRuntimeError> {
    use rustix::fs::{statfs, Mode};
    match statfs(shm) {
        Ok(s) if is_tmpfs_magic(s.f_type) => {}
        _ => {
            return Err(FastRuntimeError::NotTmpfs {
                dir: shm.to_path_buf(),
            })
        }
    }
    let path = shm.join(format!("airlock-{uid}"));
    match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700)) {
        // Ours, just created in a sticky directory (no one else can replace the entry): a
        // umask narrower than 077 is widened back to exactly 0700.
        Ok(()) => {
            let _ = rustix::fs::chmod(&path, Mode::from_raw_mode(0o700));
        }
        Err(rustix::io::Errno::EXIST) => {}
        Err(e) => {
            return Err(FastRuntimeError::Create {
                path,
                reason: e.to_string(),
            })
        }
    }
    check_ours(&path, uid)?;
    Ok(path)
}

/// Whether a `statfs` filesystem type is tmpfs's (`f_type`'s width differs between
/// architectures, hence the cast).
#[allow(clippy::unnecessary_cast)]
pub fn is_tmpfs_magic(f_type: impl Into<i64>) -> bool {
    f_type.into() as i64 == 0x0102_1994
}

/// `path` is a real directory owned by `uid` with mode 0700.
fn check_ours(path: &Path, uid: u32) -> Result<(), FastRuntimeError> {
    use rustix::fs::{lstat, FileType};
    let not_ours = |found: String| FastRuntimeError::NotOurs {
        path: path.to_path_buf(),
        found,
    };
    let st = lstat(path).map_err(|e| not_ours(e.to_string()))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::Directory {
        return Err(not_ours(format!("{kind:?}")));
    }
    if st.st_uid != uid {
        return Err(not_ours(format!("owner uid {}", st.st_uid)));
    }
    let mode = st.st_mode & 0o7777;
    if mode != 0o700 {
        return Err(not_ours(format!("mode {mode:04o}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A throw-away directory on a tmpfs standing in for `/dev/shm`; `None` (with the reason
    /// printed) when this host has no tmpfs there.
    fn fake_shm() -> Option<tempfile::TempDir> {
        let dir = tempfile::Builder::new()
            .prefix("airlock-rt-test")
            .tempdir_in(SHM_DIR)
            .ok()?;
        // The sticky, world-writable directory a real /dev/shm is.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).ok()?;
        Some(dir)
    }

    fn skip(why: &str) {
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    #[test]
    fn a_missing_tmpfs_runtime_base_is_created_private_to_the_user() {
        let Some(shm) = fake_shm() else {
            return skip("no tmpfs at /dev/shm");
        };
        let base = tmpfs_runtime_base(shm.path(), me()).unwrap();
        assert_eq!(base, shm.path().join(format!("airlock-{}", me())));
        let meta = std::fs::symlink_metadata(&base).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o7777, 0o700);
        assert_eq!(meta.uid(), me());
        // The second resolution accepts what the first created.
        assert_eq!(tmpfs_runtime_base(shm.path(), me()).unwrap(), base);
    }

    #[test]
    fn a_pre_created_runtime_base_that_is_not_private_is_refused() {
        let Some(shm) = fake_shm() else {
            return skip("no tmpfs at /dev/shm");
        };
        let path = shm.path().join(format!("airlock-{}", me()));
        // Readable by others: someone may have planted entries in it.
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            tmpfs_runtime_base(shm.path(), me()),
            Err(FastRuntimeError::NotOurs { .. })
        ));
        std::fs::remove_dir(&path).unwrap();
        // A link to a directory that is private and ours is still refused: never followed.
        let target = shm.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(matches!(
            tmpfs_runtime_base(shm.path(), me()),
            Err(FastRuntimeError::NotOurs { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            tmpfs_runtime_base(shm.path(), me()),
            Err(FastRuntimeError::NotOurs { .. })
        ));
    }

    #[test]
    fn a_runtime_base_pre_created_by_another_user_is_refused() {
        let Some(shm) = fake_shm() else {
            return skip("no tmpfs at /dev/shm");
        };
        if me() != 0 {
            return skip("needs root to create a directory owned by another user");
        }
        // What another local user would plant for uid 0: their own 0700 directory.
        let path = shm.path().join("airlock-0");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let err = tmpfs_runtime_base(shm.path(), 0).unwrap_err();
        assert!(
            matches!(&err, FastRuntimeError::NotOurs { found, .. } if found.contains("65534")),
            "{err}"
        );
    }

    #[test]
    fn a_runtime_base_off_tmpfs_is_refused() {
        let disk = Path::new(env!("CARGO_MANIFEST_DIR"));
        let tmpfs = rustix::fs::statfs(disk).is_ok_and(|s| is_tmpfs_magic(s.f_type));
        if tmpfs {
            return skip("the source tree is on a tmpfs");
        }
        assert!(matches!(
            tmpfs_runtime_base(disk, me()),
            Err(FastRuntimeError::NotTmpfs { .. })
        ));
        assert!(!disk.join(format!("airlock-{}", me())).exists());
    }
}
