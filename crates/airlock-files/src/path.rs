//! Paths as the user typed them, checked while the command line is read (F5).
//!
//! Both kinds are made absolute and normalized lexically (`.` and empty components dropped;
//! `..` removes the previous component, as a shell's logical `cd` does), so what is resolved
//! later never contains `..`. Refused before anything touches the sandbox: empty paths,
//! anything inside `/proc`, `/sys` or `/dev`, NUL bytes; for sandbox paths also relative paths
//! and `..` (there is no sandbox working directory to be relative to, and a `..` in a sandbox
//! path is an escape attempt or a typo).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Directories no transfer reads from or writes into, on either side.
pub const FORBIDDEN: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Why a path on the command line is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("the {side} path is empty")]
    Empty {
        /// `"host"` or `"sandbox"`.
        side: &'static str,
    },
    /// A sandbox path that is not absolute.
    #[error("the sandbox path {path:?} is not absolute")]
    Relative {
        /// The path.
        path: String,
    },
    /// A sandbox path with a `..` component.
    #[error("the sandbox path {path:?} contains '..'")]
    DotDot {
        /// The path.
        path: String,
    },
    /// A path inside `/proc`, `/sys` or `/dev`.
    #[error("{path:?} is inside {area}, which airlock never reads from or writes into")]
    Forbidden {
        /// The normalized path.
        path: String,
        /// Which area.
        area: &'static str,
    },
    /// A path with a NUL byte, or (for names that travel on the wire) not UTF-8.
    #[error("the {side} path {path:?} is not valid UTF-8 without NUL bytes")]
    Encoding {
        /// `"host"` or `"sandbox"`.
        side: &'static str,
        /// The path, lossily decoded.
        path: String,
    },
    /// The root directory itself as a source.
    #[error("the root directory cannot be copied as a whole; name a directory inside it")]
    Root,
}

/// A normalized absolute path (no `.`, `..` or empty components).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedPath {
    path: PathBuf,
}

impl CheckedPath {
    /// The path.
    pub fn as_path(&self) -> &Path {
        &self.path
    }

    /// Its components below `/`, in order.
    pub fn components(&self) -> Vec<&OsStr> {
        self.path
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name),
                Component::RootDir
                | Component::CurDir
                | Component::ParentDir
                | Component::Prefix(_) => None,
            })
            .collect()
    }

    /// The last component as UTF-8 (the name a tree travels under); `/` has none.
    pub fn file_name(&self) -> Result<&str, PathError> {
        let name = self.path.file_name().ok_or(PathError::Root)?;
        name.to_str().ok_or_else(|| PathError::Encoding {
            side: "host",
            path: self.path.to_string_lossy().into_owned(),
        })
    }

    /// Whether this is `/`.
    pub fn is_root(&self) -> bool {
        self.path.parent().is_none()
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn check_area(path: &Path) -> Result<(), PathError> {
    for area in FORBIDDEN {
        if path.starts_with(area) {
            return Err(PathError::Forbidden {
                path: path.to_string_lossy().into_owned(),
                area,
            });
        }
    }
    Ok(())
}

/// Checks a host path; a relative one is taken from `cwd`.
pub fn host_path(raw: &OsStr, cwd: &Path) -> Result<CheckedPath, PathError> {
    if raw.is_empty() {
        return Err(PathError::Empty { side: "host" });
    }
    if raw.as_bytes().contains(&0) {
        return Err(PathError::Encoding {
            side: "host",
            path: raw.to_string_lossy().into_owned(),
        });
    }
    let path = normalize(&cwd.join(raw));
    check_area(&path)?;
    Ok(CheckedPath { path })
}

/// Checks a sandbox path: absolute, UTF-8, no `..`.
pub fn sandbox_path(raw: &str) -> Result<CheckedPath, PathError> {
    if raw.is_empty() {
        return Err(PathError::Empty { side: "sandbox" });
    }
    if raw.contains('\0') {
        return Err(PathError::Encoding {
            side: "sandbox",
            path: raw.to_owned(),
        });
    }
    if !raw.starts_with('/') {
        return Err(PathError::Relative {
            path: raw.to_owned(),
        });
    }
    if Path::new(raw)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return Err(PathError::DotDot {
            path: raw.to_owned(),
        });
    }
    let path = normalize(Path::new(raw));
    check_area(&path)?;
    Ok(CheckedPath { path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_paths_must_be_absolute_and_free_of_dotdot() {
        assert!(matches!(sandbox_path(""), Err(PathError::Empty { .. })));
        assert!(matches!(
            sandbox_path("tmp/x"),
            Err(PathError::Relative { .. })
        ));
        assert!(matches!(
            sandbox_path("/tmp/../etc"),
            Err(PathError::DotDot { .. })
        ));
        assert!(matches!(
            sandbox_path("/a\0b"),
            Err(PathError::Encoding { .. })
        ));
        let ok = sandbox_path("/home//u/./x/").unwrap();
        assert_eq!(ok.as_path(), Path::new("/home/u/x"));
        assert_eq!(ok.components(), ["home", "u", "x"]);
    }

    #[test]
    fn proc_sys_and_dev_are_refused_on_both_sides() {
        for raw in [
            "/proc",
            "/proc/self/root",
            "/sys/kernel",
            "/dev/sda",
            "/dev/../dev/x",
        ] {
            let host = host_path(OsStr::new(raw), Path::new("/"));
            assert!(matches!(host, Err(PathError::Forbidden { .. })), "{raw}");
        }
        for raw in ["/proc/1/environ", "/sys", "/dev/shm/x"] {
            assert!(
                matches!(sandbox_path(raw), Err(PathError::Forbidden { .. })),
                "{raw}"
            );
        }
        // A name that only starts like one of them is fine.
        assert!(host_path(OsStr::new("/devices"), Path::new("/")).is_ok());
        // A relative path that climbs into /proc is caught after normalization.
        let climbed = host_path(OsStr::new("../../proc/self"), Path::new("/home/u"));
        assert!(matches!(climbed, Err(PathError::Forbidden { .. })));
    }

    #[test]
    fn host_paths_are_taken_from_the_working_directory() {
        let p = host_path(OsStr::new("../out/./x"), Path::new("/home/u/proj")).unwrap();
        assert_eq!(p.as_path(), Path::new("/home/u/out/x"));
        assert_eq!(p.file_name().unwrap(), "x");
        assert!(matches!(
            host_path(OsStr::new(""), Path::new("/")),
            Err(PathError::Empty { .. })
        ));
        let root = host_path(OsStr::new("/.."), Path::new("/")).unwrap();
        assert!(root.is_root());
        assert!(matches!(root.file_name(), Err(PathError::Root)));
    }
}
