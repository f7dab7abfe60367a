//! Removing a staged or replaced tree without following any link.
//!
//! Non-directories are unlinked; directories are opened relative to their parent's descriptor
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, made writable
//! for their owner (a tree received with read-only directories must still be removable),
//! emptied, and removed. Iterative, one descriptor per level.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{fchmod, openat2, unlinkat, AtFlags, Dir, Mode, OFlags};
use rustix::io::Errno;

use crate::receive::BENEATH;

fn open_dir(parent: BorrowedFd<'_>, name: &CStr) -> io::Result<Dir> {
    let fd = openat2(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )?;
    // Best effort: a directory we do not own stays as it is, and its removal reports why.
    let _ignored = fchmod(&fd, Mode::from_raw_mode(0o700));
    Ok(Dir::new(fd)?)
}

/// Removes `name` in `parent`, whatever it is; a missing entry is success.
pub fn remove_tree(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::from(Errno::INVAL))?;
    match unlinkat(parent, name.as_c_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR) => {}
        Err(errno) => return Err(errno.into()),
    }
    let mut stack: Vec<(Dir, CString)> = vec![(open_dir(parent, &name)?, name)];
    while let Some((dir, _)) = stack.last_mut() {
        let Some(item) = dir.read() else {
            let (dir, name) = stack.pop().expect("loop holds a level");
            drop(dir);
            let up = match stack.last() {
                Some((dir, _)) => dir.fd()?,
                None => parent,
            };
            match unlinkat(up, name.as_c_str(), AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(errno) => return Err(errno.into()),
            }
            continue;
        };
        let item = item?;
        let child = item.file_name();
        if child == c"." || child == c".." {
            continue;
        }
        let child = child.to_owned();
        let fd = dir.fd()?;
        match unlinkat(fd, child.as_c_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::ISDIR) => {
                let sub = open_dir(fd.as_fd(), &child)?;
                stack.push((sub, child));
            }
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}
