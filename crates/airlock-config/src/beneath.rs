//! Reading files inside a project without trusting it (C7).
//!
//! Everything under a project root was written by a repository or a sandbox, so it is hostile
//! input to the host. Every host-side read of such a file goes through [`read_beneath`] (or
//! [`open_beneath`]), which:
//!
//! 1. opens the project root itself as a directory (the root is the canonical path discovery
//!    found; it is the one path the user chose);
//! 2. resolves the relative path beneath that directory without following any link:
//!    `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, or, on kernels
//!    without `openat2` (before 5.6), one `openat(O_NOFOLLOW)` per component, each relative to
//!    the directory opened before it. A symbolic link anywhere on the path (`.airlock` itself
//!    included) is an error, never followed;
//! 3. opens with `O_NONBLOCK`, so a FIFO cannot hang the host, and `O_NOCTTY`;
//! 4. requires a regular file (`fstat` on the opened descriptor, so there is no window between
//!    the check and the read);
//! 5. reads at most `cap + 1` bytes and refuses more than `cap` (the size `fstat` reports is
//!    never trusted: files can grow while read, and some report 0).
//!
//! Errors name the file and say what to do. An absent file is `Ok(None)`: callers decide
//! whether that is fine.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{openat, openat2, FileType, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

/// Size cap of a configuration file inside a project (`.airlock/config.toml`).
pub const CONFIG_CAP: u64 = 1024 * 1024;

/// Errors of reading a file beneath a project root.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The relative path is absolute or holds `.`/`..` (a caller bug, never user input).
    #[error("{path}: not a plain relative path beneath the project root")]
    BadPath {
        /// The path as given.
        path: PathBuf,
    },
    /// The project root cannot be opened as a directory.
    #[error("cannot open the project root {path}: {source}")]
    Root {
        /// The root.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A component of the path is a symbolic link (or the kernel found it escaping the root).
    #[error(
        "{path} is a symbolic link; airlock never follows links inside a project: replace \
         the link with the file or directory itself"
    )]
    Link {
        /// The link (the first one on the path), or the full path when none is found.
        path: PathBuf,
    },
    /// The path names something other than a regular file.
    #[error("{path} is {kind}, not a regular file: replace it with a regular file")]
    NotRegular {
        /// The full path.
        path: PathBuf,
        /// What it is ("a FIFO", "a directory", …).
        kind: &'static str,
    },
    /// The file holds more than the cap.
    #[error("{path} is larger than {cap} bytes, the most airlock reads from a project file")]
    TooLarge {
        /// The full path.
        path: PathBuf,
        /// The cap in bytes.
        cap: u64,
    },
    /// Any other failure to open or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The full path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// How a path is resolved beneath the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    /// `openat2` with `RESOLVE_*`; falls back to [`Strategy::PerComponent`] on `ENOSYS`.
    Openat2,
    /// One `openat(O_NOFOLLOW)` per component.
    PerComponent,
}

/// Opens `root/rel` as a regular file without following links; `Ok(None)` when absent.
pub fn open_beneath(root: &Path, rel: &Path) -> Result<Option<File>, BeneathError> {
    open_with(root, rel, Strategy::Openat2)
}

/// Reads `root/rel` (at most `cap` bytes) without following links; `Ok(None)` when absent.
pub fn read_beneath(root: &Path, rel: &Path, cap: u64) -> Result<Option<Vec<u8>>, BeneathError> {
    read_with(root, rel, cap, Strategy::Openat2)
}

/// What a directory entry is, as seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (never followed).
    Link,
    /// Anything else (FIFO, socket, device).
    Other(&'static str),
}

/// One entry of a directory listed by [`list_beneath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name.
    pub name: std::ffi::OsString,
    /// Its kind (`lstat`, relative to the opened directory).
    pub kind: EntryKind,
}

/// Lists the directory `root/rel` without following any link on the way (the same resolution
/// as [`open_beneath`]); `Ok(None)` when absent. Entries are sorted by name; `.` and `..` are
/// left out. At most `max_entries` are returned (the rest are not read).
pub fn list_beneath(
    root: &Path,
    rel: &Path,
    max_entries: usize,
) -> Result<Option<Vec<DirEntry>>, BeneathError> {
    let names = components(rel)?;
    let full = root.join(rel);
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root_fd = openat(CWD, root, dir_flags, Mode::empty()).map_err(|e| BeneathError::Root {
        path: root.to_owned(),
        source: e.into(),
    })?;
    let fd = match resolve(root_fd, rel, &names, dir_flags, Strategy::Openat2) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP | Errno::XDEV) => {
            let path = first_link(root, &names).unwrap_or(full);
            return Err(BeneathError::Link { path });
        }
        Err(Errno::NOTDIR) => {
            return Err(BeneathError::NotRegular {
                path: full,
                kind: "not a directory",
            })
        }
        Err(e) => {
            return Err(BeneathError::Io {
                path: full,
                source: e.into(),
            })
        }
    };
    let io_err = |e: Errno| BeneathError::Io {
        path: full.clone(),
        source: e.into(),
    };
    let mut dir = rustix::fs::Dir::read_from(&fd).map_err(io_err)?;
    let mut out = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if out.len() == max_entries {
            break;
        }
        let name = std::ffi::OsStr::from_bytes(name).to_owned();
        let stat = rustix::fs::statat(&fd, &name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_err(io_err)?;
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Directory,
            FileType::Symlink => EntryKind::Link,
            other => EntryKind::Other(kind_name(other)),
        };
        out.push(DirEntry { name, kind });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Some(out))
}

fn read_with(
    root: &Path,
    rel: &Path,
    cap: u64,
    strategy: Strategy,
) -> Result<Option<Vec<u8>>, BeneathError> {
    let Some(file) = open_with(root, rel, strategy)? else {
        return Ok(None);
    };
    let full = root.join(rel);
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| BeneathError::Io {
            path: full.clone(),
            source,
        })?;
    if bytes.len() as u64 > cap {
        return Err(BeneathError::TooLarge { path: full, cap });
    }
    Ok(Some(bytes))
}

fn open_with(root: &Path, rel: &Path, strategy: Strategy) -> Result<Option<File>, BeneathError> {
    let names = components(rel)?;
    let full = root.join(rel);
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root_fd = openat(CWD, root, dir_flags, Mode::empty()).map_err(|e| BeneathError::Root {
        path: root.to_owned(),
        source: e.into(),
    })?;
    let file_flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let opened = resolve(root_fd, rel, &names, file_flags, strategy);
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        // ELOOP: a link with NO_SYMLINKS/O_NOFOLLOW; EXDEV: the kernel saw an escape.
        Err(Errno::LOOP | Errno::XDEV) => {
            let path = first_link(root, &names).unwrap_or(full);
            return Err(BeneathError::Link { path });
        }
        Err(e) => {
            return Err(BeneathError::Io {
                path: full,
                source: e.into(),
            })
        }
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| BeneathError::Io {
        path: full.clone(),
        source: e.into(),
    })?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(Some(File::from(fd))),
        other => Err(BeneathError::NotRegular {
            path: full,
            kind: kind_name(other),
        }),
    }
}

/// Opens the path beneath `root_fd` with `strategy`; `openat2` answering `ENOSYS` (kernels
/// before 5.6) falls back to the per-component walk.
fn resolve(
    root_fd: OwnedFd,
    rel: &Path,
    names: &[&std::ffi::OsStr],
    file_flags: OFlags,
    strategy: Strategy,
) -> Result<OwnedFd, Errno> {
    match strategy {
        Strategy::Openat2 => {
            let how =
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            match openat2(&root_fd, rel, file_flags, Mode::empty(), how) {
                Err(Errno::NOSYS) => {
                    resolve(root_fd, rel, names, file_flags, Strategy::PerComponent)
                }
                other => other,
            }
        }
        Strategy::PerComponent => per_component(root_fd, names, file_flags),
    }
}

/// The plain components of `rel`; anything else is a caller bug.
fn components(rel: &Path) -> Result<Vec<&std::ffi::OsStr>, BeneathError> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::RootDir
            | Component::Prefix(_)
            | Component::CurDir
            | Component::ParentDir => {
                return Err(BeneathError::BadPath {
                    path: rel.to_owned(),
                })
            }
        }
    }
    if out.is_empty() {
        return Err(BeneathError::BadPath {
            path: rel.to_owned(),
        });
    }
    Ok(out)
}

/// The fallback: each directory opened relative to the previous one with `O_NOFOLLOW`, so a
/// link at any component fails with `ELOOP` (for the last one) or `ENOTDIR`/`ELOOP` (before).
fn per_component(
    root: OwnedFd,
    names: &[&std::ffi::OsStr],
    file_flags: OFlags,
) -> Result<OwnedFd, Errno> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = root;
    let (last, dirs) = names.split_last().ok_or(Errno::INVAL)?;
    for name in dirs {
        dir = match openat(&dir, *name, dir_flags, Mode::empty()) {
            // O_NOFOLLOW|O_DIRECTORY on a link to a directory answers ENOTDIR on some kernels:
            // tell a link from a real non-directory.
            Err(Errno::NOTDIR) if is_link(&dir, name) => return Err(Errno::LOOP),
            other => other?,
        };
    }
    openat(&dir, *last, file_flags | OFlags::NOFOLLOW, Mode::empty())
}

/// The first component of `root/names…` that is a symbolic link (for the error message only).
fn first_link(root: &Path, names: &[&std::ffi::OsStr]) -> Option<PathBuf> {
    let mut path = root.to_owned();
    for name in names {
        path.push(name);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if meta.file_type().is_symlink() {
            return Some(path);
        }
    }
    None
}

fn is_link(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink)
}

fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of unknown type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const BOTH: [Strategy; 2] = [Strategy::Openat2, Strategy::PerComponent];

    fn project() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".airlock")).unwrap();
        (t, root)
    }

    fn rel() -> &'static Path {
        Path::new(".airlock/config.toml")
    }

    #[test]
    fn a_regular_file_is_read_and_an_absent_one_is_none() {
        let (_t, root) = project();
        for s in BOTH {
            assert!(read_with(&root, rel(), 16, s).unwrap().is_none());
        }
        std::fs::write(root.join(rel()), b"agent = \"x\"").unwrap();
        for s in BOTH {
            let got = read_with(&root, rel(), 16, s).unwrap().unwrap();
            assert_eq!(got, b"agent = \"x\"");
        }
    }

    #[test]
    fn a_symlink_to_dev_zero_is_refused_not_read() {
        let (_t, root) = project();
        symlink("/dev/zero", root.join(rel())).unwrap();
        for s in BOTH {
            match read_with(&root, rel(), CONFIG_CAP, s) {
                Err(BeneathError::Link { path }) => assert_eq!(path, root.join(rel())),
                other => panic!("{s:?}: expected Link, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_symlinked_airlock_directory_is_refused() {
        let (_t, root) = project();
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("config.toml"), "").unwrap();
        std::fs::remove_dir(root.join(".airlock")).unwrap();
        symlink(&elsewhere, root.join(".airlock")).unwrap();
        for s in BOTH {
            match read_with(&root, rel(), 16, s) {
                Err(BeneathError::Link { path }) => assert_eq!(path, root.join(".airlock")),
                other => panic!("{s:?}: expected Link, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (_t, root) = project();
        rustix::fs::mknodat(
            CWD,
            root.join(rel()),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        for s in BOTH {
            match read_with(&root, rel(), 16, s) {
                Err(BeneathError::NotRegular { kind, .. }) => assert_eq!(kind, "a FIFO"),
                other => panic!("{s:?}: expected NotRegular, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_file_over_the_cap_is_refused_after_reading_at_most_cap_plus_one() {
        let (_t, root) = project();
        std::fs::write(root.join(rel()), vec![b'#'; 17]).unwrap();
        for s in BOTH {
            assert!(matches!(
                read_with(&root, rel(), 16, s),
                Err(BeneathError::TooLarge { cap: 16, .. })
            ));
        }
        std::fs::write(root.join(rel()), vec![b'#'; 16]).unwrap();
        for s in BOTH {
            assert_eq!(read_with(&root, rel(), 16, s).unwrap().unwrap().len(), 16);
        }
    }

    #[test]
    fn paths_that_climb_out_are_refused_before_any_open() {
        let (_t, root) = project();
        for bad in ["../x", "/etc/passwd", ".airlock/../../x", ""] {
            assert!(
                matches!(
                    read_with(&root, Path::new(bad), 16, Strategy::PerComponent),
                    Err(BeneathError::BadPath { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn listing_reports_links_as_links_and_refuses_a_linked_directory() {
        let (_t, root) = project();
        std::fs::write(root.join(".airlock/a.md"), "").unwrap();
        std::fs::create_dir(root.join(".airlock/sub")).unwrap();
        symlink("/etc", root.join(".airlock/out")).unwrap();
        let got = list_beneath(&root, Path::new(".airlock"), 100)
            .unwrap()
            .unwrap();
        let kinds: Vec<_> = got
            .iter()
            .map(|e| (e.name.to_str().unwrap(), e.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("a.md", EntryKind::File),
                ("out", EntryKind::Link),
                ("sub", EntryKind::Directory)
            ]
        );
        assert!(matches!(
            list_beneath(&root, Path::new(".airlock/out"), 100),
            Err(BeneathError::Link { .. })
        ));
        assert!(list_beneath(&root, Path::new("absent"), 100)
            .unwrap()
            .is_none());
        assert_eq!(
            list_beneath(&root, Path::new(".airlock"), 2)
                .unwrap()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_directory_where_a_file_is_expected_is_not_regular() {
        let (_t, root) = project();
        std::fs::create_dir(root.join(rel())).unwrap();
        for s in BOTH {
            assert!(matches!(
                read_with(&root, rel(), 16, s),
                Err(BeneathError::NotRegular {
                    kind: "a directory",
                    ..
                })
            ));
        }
    }
}
