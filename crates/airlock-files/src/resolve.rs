//! Opening the directory a transfer reads from or writes into.
//!
//! The user's path is resolved one component at a time, expanding symbolic links the way the
//! kernel would, *except* that a link whose containing directory lies inside a
//! sandbox-writable directory (a workspace or read-write mount: the sandbox can plant links
//! there) is never followed: the resolution fails and names it. On the sandbox side every
//! directory is sandbox-writable, so no link is followed at all ([`Resolver::strict`]).
//! The resulting link-free canonical path is then opened with
//! `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so a link swapped in after the check
//! makes the open fail instead of redirecting it. The last component of a source is never
//! followed (F2); the last component of a destination is followed only when it is a link to
//! a directory outside every writable directory (as `cp -r` would), else it is the target
//! itself (an existing entry, refused unless replacing).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{openat2, statat, AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

use crate::path::{CheckedPath, FORBIDDEN};
use crate::receive::{Target, BENEATH};
use crate::send::Source;

/// Links followed in one resolution before it is refused (the kernel's limit).
const MAX_LINKS: u32 = 40;

/// Why a path could not be opened for a transfer.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// A component does not exist.
    #[error("{path} does not exist")]
    NotFound {
        /// The missing path.
        path: String,
    },
    /// A component is not a directory.
    #[error("{path} is not a directory")]
    NotDirectory {
        /// The path.
        path: String,
    },
    /// A link inside a sandbox-writable directory (or, in the sandbox, anywhere).
    #[error("{path} is a symbolic link inside a directory the sandbox can write; airlock does not follow it")]
    LinkInWritable {
        /// The link.
        path: String,
    },
    /// Too many links.
    #[error("{path}: too many levels of symbolic links")]
    TooManyLinks {
        /// Where the resolution was.
        path: String,
    },
    /// The resolved path is inside `/proc`, `/sys` or `/dev`.
    #[error("{path} resolves into {area}, which airlock never reads from or writes into")]
    Forbidden {
        /// The resolved path.
        path: String,
        /// Which area.
        area: &'static str,
    },
    /// The target exists and replacing was not asked for.
    #[error("{path} already exists")]
    Exists {
        /// The target.
        path: String,
    },
    /// A system call failed.
    #[error("cannot open {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(Errno) -> ResolveError + '_ {
    move |errno| match errno {
        Errno::NOENT => ResolveError::NotFound {
            path: path.display().to_string(),
        },
        Errno::NOTDIR => ResolveError::NotDirectory {
            path: path.display().to_string(),
        },
        Errno::LOOP => ResolveError::LinkInWritable {
            path: path.display().to_string(),
        },
        errno => ResolveError::Io {
            path: path.display().to_string(),
            source: errno.into(),
        },
    }
}

/// Resolves user paths given the directories the sandbox can write.
#[derive(Debug, Clone)]
pub struct Resolver {
    writable: Vec<PathBuf>,
}

impl Resolver {
    /// A host-side resolver: links are followed except inside `writable` (canonicalized here;
    /// a directory that does not exist cannot hold links and is dropped).
    pub fn host(writable: &[PathBuf]) -> Self {
        let writable = writable
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        Self { writable }
    }

    /// A resolver that follows no link anywhere (the sandbox side).
    pub fn strict() -> Self {
        Self {
            writable: vec![PathBuf::from("/")],
        }
    }

    fn is_writable(&self, path: &Path) -> bool {
        self.writable.iter().any(|w| path.starts_with(w))
    }

    /// Resolves `components` (below `/`) to a link-free canonical directory path and opens it.
    pub fn open_dir(&self, components: &[&OsStr]) -> Result<(OwnedFd, PathBuf), ResolveError> {
        let mut queue: VecDeque<OsString> = components.iter().map(|c| c.to_os_string()).collect();
        let mut current = PathBuf::from("/");
        let mut links = 0;
        while let Some(name) = queue.pop_front() {
            if name == ".." {
                current.pop();
                continue;
            }
            if name == "." || name.is_empty() {
                continue;
            }
            let next = current.join(&name);
            let stat = statat(CWD, &next, AtFlags::SYMLINK_NOFOLLOW).map_err(io_error(&next))?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::Symlink {
                current = next;
                continue;
            }
            if self.is_writable(&current) {
                return Err(ResolveError::LinkInWritable {
                    path: next.display().to_string(),
                });
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(ResolveError::TooManyLinks {
                    path: next.display().to_string(),
                });
            }
            let target = std::fs::read_link(&next).map_err(|source| ResolveError::Io {
                path: next.display().to_string(),
                source,
            })?;
            if target.is_absolute() {
                current = PathBuf::from("/");
            }
            for component in target.components().rev() {
                match component {
                    Component::Normal(part) => queue.push_front(part.to_os_string()),
                    Component::ParentDir => queue.push_front(OsString::from("..")),
                    Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                }
            }
        }
        check_area(&current)?;
        let fd = openat2(
            CWD,
            &current,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(io_error(&current))?;
        Ok((fd, current))
    }

    /// Opens the parent of `path` and checks that its last component exists; the last
    /// component is never followed.
    pub fn source(&self, path: &CheckedPath) -> Result<Source, ResolveError> {
        let components = path.components();
        let Some((last, parents)) = components.split_last() else {
            return Err(ResolveError::NotDirectory { path: "/".into() });
        };
        let (parent, canonical) = self.open_dir(parents)?;
        let shown = canonical.join(last);
        statat(&parent, *last, AtFlags::SYMLINK_NOFOLLOW).map_err(io_error(&shown))?;
        let name = last.to_str().ok_or_else(|| ResolveError::Io {
            path: shown.display().to_string(),
            source: std::io::Error::other("the name is not valid UTF-8"),
        })?;
        Ok(Source {
            parent,
            name: name.to_owned(),
        })
    }

    /// Where a tree named `source_name` lands for the destination `path` (`cp -r` rules: an
    /// existing directory receives it as `path/source_name`, anything else is the target).
    /// Without `replace`, an existing target is refused here already (and again, atomically,
    /// when the tree is published).
    pub fn target(
        &self,
        path: &CheckedPath,
        source_name: &str,
        replace: bool,
    ) -> Result<Target, ResolveError> {
        let components = path.components();
        let (parent, canonical, name) = match components.split_last() {
            None => {
                let (fd, canonical) = self.open_dir(&[])?;
                (fd, canonical, None)
            }
            Some((last, parents)) => {
                let (fd, canonical) = self.open_dir(parents)?;
                (fd, canonical, Some(*last))
            }
        };
        let (parent, canonical, name) = match name {
            None => (parent, canonical, OsStr::new(source_name)),
            Some(last) => self.landing_in(parent, canonical, last, &components, source_name)?,
        };
        let shown = canonical.join(name);
        let name = name.to_str().ok_or_else(|| ResolveError::Io {
            path: shown.display().to_string(),
            source: std::io::Error::other("the name is not valid UTF-8"),
        })?;
        if !replace && statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
            return Err(ResolveError::Exists {
                path: shown.display().to_string(),
            });
        }
        Ok(Target {
            parent,
            name: name.to_owned(),
            replace,
            display: shown.display().to_string(),
        })
    }

    /// When `last` in `parent` is a directory (or, outside writable directories, a link to
    /// one), the tree goes inside it under `source_name`.
    fn landing_in<'a>(
        &self,
        parent: OwnedFd,
        canonical: PathBuf,
        last: &'a OsStr,
        components: &[&OsStr],
        source_name: &'a str,
    ) -> Result<(OwnedFd, PathBuf, &'a OsStr), ResolveError> {
        let shown = canonical.join(last);
        let stat = match statat(&parent, last, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok((parent, canonical, last)),
            Err(errno) => return Err(io_error(&shown)(errno)),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                let fd = openat2(
                    parent.as_fd(),
                    last,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                    BENEATH,
                )
                .map_err(io_error(&shown))?;
                check_area(&shown)?;
                Ok((fd, shown, OsStr::new(source_name)))
            }
            FileType::Symlink if !self.is_writable(&canonical) => match self.open_dir(components) {
                Ok((fd, resolved)) => Ok((fd, resolved, OsStr::new(source_name))),
                // A link to something else (or to nothing) is itself the target.
                Err(ResolveError::NotFound { .. } | ResolveError::NotDirectory { .. }) => {
                    Ok((parent, canonical, last))
                }
                Err(err) => Err(err),
            },
            FileType::Symlink
            | FileType::RegularFile
            | FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice
            | FileType::Unknown => Ok((parent, canonical, last)),
        }
    }
}

fn check_area(path: &Path) -> Result<(), ResolveError> {
    for area in FORBIDDEN {
        if path.starts_with(area) {
            return Err(ResolveError::Forbidden {
                path: path.display().to_string(),
                area,
            });
        }
    }
    Ok(())
}
