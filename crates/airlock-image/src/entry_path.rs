//! Archive entry names, checked before anything is created (the archive is hostile input).
//!
//! An entry name becomes a [`RelPath`]: a non-empty list of plain components, relative to the
//! image's root. Refused: absolute names, `..` anywhere, NUL bytes, components longer than
//! `NAME_MAX`, names deeper than [`MAX_DEPTH`]. `.` components and empty components (`a//b`,
//! a leading `./`) are dropped, as every tar implementation does.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Deepest path an image may hold (Linux `PATH_MAX` is 4096 bytes; 256 levels is far beyond any
/// real root filesystem and keeps the recursive removal bounded).
pub const MAX_DEPTH: usize = 256;
const NAME_MAX: usize = 255;

/// Why an entry name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadName {
    Absolute,
    ParentComponent,
    Nul,
    TooLong,
    TooDeep,
}

impl std::fmt::Display for BadName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BadName::Absolute => "it is an absolute path",
            BadName::ParentComponent => "it contains a `..` component",
            BadName::Nul => "it contains a NUL byte",
            BadName::TooLong => "a component is longer than 255 bytes",
            BadName::TooDeep => "it is nested deeper than 256 levels",
        })
    }
}

/// A checked name relative to the image root. Empty means the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(Vec<Vec<u8>>);

impl RelPath {
    /// Checks an archive entry name (or a hard link's target name).
    pub fn parse(raw: &[u8]) -> Result<Self, BadName> {
        if raw.contains(&0) {
            return Err(BadName::Nul);
        }
        if raw.first() == Some(&b'/') {
            return Err(BadName::Absolute);
        }
        let mut parts = Vec::new();
        for c in raw.split(|b| *b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => return Err(BadName::ParentComponent),
                c if c.len() > NAME_MAX => return Err(BadName::TooLong),
                c => parts.push(c.to_vec()),
            }
        }
        if parts.len() > MAX_DEPTH {
            return Err(BadName::TooDeep);
        }
        Ok(Self(parts))
    }

    pub fn root() -> Self {
        Self(Vec::new())
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn components(&self) -> &[Vec<u8>] {
        &self.0
    }

    /// The last component (`None` for the root).
    pub fn file_name(&self) -> Option<&[u8]> {
        self.0.last().map(Vec::as_slice)
    }

    /// Everything but the last component (the root for a top-level entry).
    pub fn parent(&self) -> RelPath {
        let n = self.0.len().saturating_sub(1);
        Self(self.0[..n].to_vec())
    }

    pub fn join(&self, name: &[u8]) -> RelPath {
        let mut v = self.0.clone();
        v.push(name.to_vec());
        Self(v)
    }

    /// Whether `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &RelPath) -> bool {
        self.0.len() >= other.0.len() && self.0[..other.0.len()] == other.0[..]
    }

    /// `.` for the root, else `a/b/c`, for `*at` calls relative to the root's descriptor.
    pub fn as_path(&self) -> PathBuf {
        if self.0.is_empty() {
            return PathBuf::from(".");
        }
        let joined = self.0.join(&b'/');
        PathBuf::from(OsStr::from_bytes(&joined))
    }

    /// `/a/b/c`, for messages.
    pub fn display(&self) -> String {
        let p = Path::new("/").join(self.as_path());
        let text = if self.0.is_empty() {
            "/".to_owned()
        } else {
            p.to_string_lossy().into_owned()
        };
        escape_controls(&text)
    }
}

/// Control characters escaped, so an entry name cannot drive the terminal it is reported on (O1).
pub fn escape_controls(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_relative_to_the_root() {
        let p = RelPath::parse(b"./usr//bin/./tool").unwrap();
        assert_eq!(p.as_path(), PathBuf::from("usr/bin/tool"));
        assert_eq!(p.display(), "/usr/bin/tool");
        assert!(RelPath::parse(b"./").unwrap().is_root());
        assert_eq!(p.parent().as_path(), PathBuf::from("usr/bin"));
    }

    #[test]
    fn escaping_names_are_refused() {
        assert_eq!(RelPath::parse(b"/etc/passwd"), Err(BadName::Absolute));
        assert_eq!(RelPath::parse(b"a/../../x"), Err(BadName::ParentComponent));
        assert_eq!(RelPath::parse(b".."), Err(BadName::ParentComponent));
        assert_eq!(RelPath::parse(b"a\0b"), Err(BadName::Nul));
        assert_eq!(RelPath::parse(&[b'a'; 256]), Err(BadName::TooLong));
        let deep = "d/".repeat(MAX_DEPTH + 1);
        assert_eq!(RelPath::parse(deep.as_bytes()), Err(BadName::TooDeep));
    }

    #[test]
    fn control_characters_in_names_are_escaped_for_display() {
        let p = RelPath::parse(b"evil\x1b[2Jname").unwrap();
        assert!(!p.display().contains('\x1b'), "{}", p.display());
    }
}
