//! Directories that only the invoking user controls (issue 4 item 9, PRODUCT R1).
//!
//! airlock keeps state, secrets and sockets under its roots; another user able to write,
//! replace or redirect any directory on the way there could plant or read that state. So every
//! component *below* a trusted anchor (usually `$HOME`, or the directory the caller names) and
//! the target itself must be:
//! - a real directory, not a symbolic link (checked with `O_NOFOLLOW`, so a link swapped in
//!   between the check and the use is still refused: each step opens the next component
//!   relative to the already-verified parent descriptor);
//! - owned by the effective uid;
//! - not writable by group or others.
//!
//! The anchor itself and its ancestors are the caller's trust boundary and are not checked
//! (`/home` may legitimately be a symlink, `/` is owned by root).
//!
//! [`ensure_private_dir`] creates missing components with mode 0700 (set with `fchmod`, so the
//! umask cannot widen or narrow it); [`check_private_dir`] creates nothing and reports a missing
//! directory as [`DirPresence::Absent`], for read-only commands such as `plan` and `status`.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Whether the checked directory exists (it is private when it does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirPresence {
    Present,
    Absent,
}

/// Why a directory may not hold airlock's private data; messages end with the fix.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    #[error("{path} is not below {anchor}; airlock only keeps private data under that directory")]
    NotBelow { path: PathBuf, anchor: PathBuf },
    #[error("{path} contains `.`, `..` or a non-normal component; use a plain absolute path")]
    Unclean { path: PathBuf },
    #[error("{path} is a symbolic link; airlock refuses private directories reached through links. Fix: replace it with a real directory (`rm {path} && mkdir -m 700 {path}`)")]
    Symlink { path: PathBuf },
    #[error("{path} exists but is not a directory. Fix: move it away")]
    NotADirectory { path: PathBuf },
    #[error("{path} is owned by uid {owner}, not by you (uid {uid}); another user could tamper with airlock's data. Fix: remove it, or `chown {uid} {path}` if it is yours")]
    OwnedByOther { path: PathBuf, owner: u32, uid: u32 },
    #[error("{path} has mode {mode:04o}, writable by group or others; they could tamper with airlock's data. Fix: `chmod go-w {path}`")]
    Writable { path: PathBuf, mode: u32 },
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create directory {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot inspect {path}: {source}")]
    Stat {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot set mode 0700 on {path}: {source}")]
    Chmod {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Makes sure `path` (below `anchor`) exists as a private directory, creating missing
/// components with mode 0700. Fails on the first component that is not private.
pub fn ensure_private_dir(path: &Path, anchor: &Path) -> Result<(), PrivateDirError> {
    walk(path, anchor, true).map(|_| ())
}

/// Verifies `path` (below `anchor`) without creating or changing anything.
pub fn check_private_dir(path: &Path, anchor: &Path) -> Result<DirPresence, PrivateDirError> {
    walk(path, anchor, false)
}

fn walk(path: &Path, anchor: &Path, create: bool) -> Result<DirPresence, PrivateDirError> {
    let rel = path
        .strip_prefix(anchor)
        .map_err(|_| PrivateDirError::NotBelow {
            path: path.to_path_buf(),
            anchor: anchor.to_path_buf(),
        })?;
    if !path.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(PrivateDirError::Unclean {
            path: path.to_path_buf(),
        });
    }
    let uid = rustix::process::geteuid().as_raw();
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd =
        rustix::fs::open(anchor, dir_flags, Mode::empty()).map_err(|e| PrivateDirError::Open {
            path: anchor.to_path_buf(),
            source: e.into(),
        })?;
    let mut current = anchor.to_path_buf();
    if rel.as_os_str().is_empty() {
        verify(&fd, &current, uid)?;
        return Ok(DirPresence::Present);
    }
    for component in rel.components() {
        current.push(component);
        let name = component.as_os_str();
        fd = match open_child(&fd, name, &current, create)? {
            Some(child) => child,
            None => return Ok(DirPresence::Absent),
        };
        verify(&fd, &current, uid)?;
    }
    Ok(DirPresence::Present)
}

/// Opens `name` under `parent` without following a link; creates it (0700) when asked.
fn open_child(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    path: &Path,
    create: bool,
) -> Result<Option<OwnedFd>, PrivateDirError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut created = false;
    loop {
        match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => {
                if created {
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(|e| {
                        PrivateDirError::Chmod {
                            path: path.to_path_buf(),
                            source: e.into(),
                        }
                    })?;
                }
                return Ok(Some(fd));
            }
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(Errno::NOENT) if !created => {
                match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                    Ok(()) => created = true,
                    // Someone else created it meanwhile: open and verify theirs.
                    Err(Errno::EXIST) => {}
                    Err(e) => {
                        return Err(PrivateDirError::Create {
                            path: path.to_path_buf(),
                            source: e.into(),
                        })
                    }
                }
            }
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(classify_non_dir(parent, name, path)),
            Err(e) => {
                return Err(PrivateDirError::Open {
                    path: path.to_path_buf(),
                    source: e.into(),
                })
            }
        }
    }
}

fn classify_non_dir(parent: &OwnedFd, name: &std::ffi::OsStr, path: &Path) -> PrivateDirError {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
            PrivateDirError::Symlink {
                path: path.to_path_buf(),
            }
        }
        Ok(_) => PrivateDirError::NotADirectory {
            path: path.to_path_buf(),
        },
        Err(e) => PrivateDirError::Stat {
            path: path.to_path_buf(),
            source: e.into(),
        },
    }
}

fn verify(fd: &OwnedFd, path: &Path, uid: u32) -> Result<(), PrivateDirError> {
    let st = rustix::fs::fstat(fd).map_err(|e| PrivateDirError::Stat {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    if st.st_uid != uid {
        return Err(PrivateDirError::OwnedByOther {
            path: path.to_path_buf(),
            owner: st.st_uid,
            uid,
        });
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(PrivateDirError::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}
