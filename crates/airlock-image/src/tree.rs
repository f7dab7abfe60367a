//! File operations beneath an image root that never follow a link.
//!
//! Every path is resolved relative to the root's descriptor with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: a symbolic link anywhere in a path (stored
//! earlier by the same archive) makes the resolution fail with `ELOOP` instead of leading out of
//! the root, and `..` cannot climb above it. The final component is then handled with `*at`
//! calls on the parent's descriptor with `AT_SYMLINK_NOFOLLOW` / `O_NOFOLLOW` semantics.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::entry_path::RelPath;

pub const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Opens the directory `rel` beneath `root` (no link followed anywhere, the last component
/// included: `RESOLVE_NO_SYMLINKS` makes a trailing link `ELOOP`, where `O_NOFOLLOW` with
/// `O_DIRECTORY` would say `ENOTDIR`).
pub fn open_dir(root: BorrowedFd<'_>, rel: &RelPath) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        root,
        rel.as_path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
}

/// What occupies `name` in `dir`, without following it (`None` when nothing does).
pub fn kind_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Option<FileType>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes `name` in `dir`: a directory with everything below it (depth-first, each level
/// opened with `O_NOFOLLOW` relative to its parent, so a link is removed, never entered).
pub fn remove_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<(), Errno> {
    match kind_at(dir, name)? {
        None => Ok(()),
        Some(FileType::Directory) => {
            let sub = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )?;
            // An image's directory may be read-only for its owner (0555): make it writable
            // first. Failing that (not ours) the removal below reports EACCES.
            let _ = rustix::fs::fchmod(&sub, Mode::from_raw_mode(0o700));
            clear_dir(sub.as_fd())?;
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
        }
        Some(_) => rustix::fs::unlinkat(dir, name, AtFlags::empty()),
    }
}

/// Removes every entry of the open directory `dir`.
pub fn clear_dir(dir: BorrowedFd<'_>) -> Result<(), Errno> {
    for name in children(dir)? {
        remove_at(dir, &name)?;
    }
    Ok(())
}

/// Names in the open directory `dir`, without `.` and `..`.
pub fn children(dir: BorrowedFd<'_>) -> Result<Vec<Vec<u8>>, Errno> {
    let mut names = Vec::new();
    let mut reader = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = reader.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_symlinked_component_is_never_resolved() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        symlink(tmp.path().join("outside"), root.join("link")).unwrap();
        symlink("../outside", root.join("rel")).unwrap();
        let fd =
            rustix::fs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for name in ["link", "rel"] {
            let rel = RelPath::parse(name.as_bytes()).unwrap();
            assert_eq!(open_dir(fd.as_fd(), &rel).unwrap_err(), Errno::LOOP);
        }
    }

    #[test]
    fn removal_deletes_links_without_entering_them() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("d/sub")).unwrap();
        std::fs::create_dir(tmp.path().join("victim")).unwrap();
        std::fs::write(tmp.path().join("victim/keep"), b"x").unwrap();
        symlink(tmp.path().join("victim"), root.join("d/sub/link")).unwrap();
        let fd =
            rustix::fs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        remove_at(fd.as_fd(), b"d").unwrap();
        assert!(!root.join("d").exists());
        assert!(tmp.path().join("victim/keep").exists());
    }
}
