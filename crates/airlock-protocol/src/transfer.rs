//! File transfer and port forwarding messages (protocol version 3, [`TRANSFER_SINCE`]; PRODUCT
//! F1–F6, `ports`).
//!
//! A transfer stream, after the handshake, starts with one request from the host:
//! - `push { dest, source_name, replace }`: the host sends a tree, the guest writes it;
//! - `pull { source }`: the guest sends a tree, the host writes it.
//!
//! The guest answers `transfer_ready { target }` (the path the tree will land at, for a push)
//! or an `error`. Then the *sender* streams one tree in pre-order:
//!
//! ```text
//! tree   := entry_file | entry_link | entry_dir
//! entry_file := entry(kind=file) file_data* file_end
//! entry_link := entry(kind=symlink)
//! entry_dir  := entry(kind=dir) tree* dir_end
//! stream := tree transfer_end
//! ```
//!
//! Every name is one path component ([`check_name`]: never empty, `.`, `..`, nor containing
//! `/` or NUL), so no sequence of messages can describe a path outside the tree's root; depth is
//! bounded by [`MAX_DEPTH`]. Sizes are never announced before the bytes: `file_end` carries the
//! byte count and the SHA-256 of what was sent, and the receiver compares both with what it
//! received (F6). A push ends with the guest's `transfer_done` once it published the tree.
//!
//! A forward stream carries `forward { port }`; the guest connects to `127.0.0.1:port` inside
//! the sandbox and answers `forward_connected`, after which the stream carries the raw bytes of
//! that TCP connection in both directions (no frames).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The protocol version that introduced file transfer and port forwarding.
pub const TRANSFER_SINCE: u32 = 3;

/// Deepest directory nesting a tree may have (the root is depth 0).
pub const MAX_DEPTH: usize = 1024;
/// Longest name component, in bytes (Linux `NAME_MAX`).
pub const MAX_NAME_LEN: usize = 255;
/// Longest symbolic link target, in bytes (Linux `PATH_MAX` - 1).
pub const MAX_TARGET_LEN: usize = 4095;
/// Largest `file_data` payload a sender emits (the frame limit still applies to receivers).
pub const DATA_CHUNK: usize = 256 * 1024;
/// The permission bits a receiver may apply; setuid and setgid are never among them.
pub const MODE_MASK: u32 = 0o1777;

/// Host → guest: write the tree that follows at `dest` (v3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PushRequest {
    /// Absolute destination inside the sandbox. When it is an existing directory the tree lands
    /// at `dest/source_name`, else at `dest` (as `cp -r` does).
    pub dest: String,
    /// The name of the source's root.
    pub source_name: String,
    /// Swap an existing target atomically instead of refusing.
    pub replace: bool,
}

/// Host → guest: send the tree rooted at `source` (v3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// Absolute path inside the sandbox; its last component is never followed.
    pub source: String,
}

/// What kind of file an [`Entry`] describes. Nothing else is ever transferred: device nodes,
/// FIFOs and sockets are skipped by the sender and cannot be described by a hostile one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file; its bytes follow in `file_data` frames, then `file_end`.
    File,
    /// A directory; its entries follow, then `dir_end`.
    Dir,
    /// A symbolic link, copied as a link (its target is never followed).
    Symlink,
}

/// A modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mtime {
    /// Seconds since the epoch.
    pub secs: i64,
    /// Nanoseconds, below 1e9.
    pub nanos: u32,
}

/// One file of the tree (v3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// One path component (see [`check_name`]).
    pub name: String,
    /// File type.
    pub kind: EntryKind,
    /// Permission bits as the sender saw them; the receiver applies `mode & MODE_MASK`.
    pub mode: u32,
    /// Modification time.
    pub mtime: Mtime,
    /// The link's target, for `symlink` only.
    pub target: Option<String>,
}

/// End of one regular file (v3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEnd {
    /// Bytes sent.
    pub size: u64,
    /// SHA-256 of the bytes sent, lowercase hex.
    pub sha256: String,
}

/// Counts of one transfer (v3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferSummary {
    /// Regular files.
    pub files: u64,
    /// Directories, the root included.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Bytes of regular files.
    pub bytes: u64,
    /// Entries the sender did not transfer (device nodes, FIFOs, sockets).
    pub skipped: u64,
}

/// Host → guest: connect to a port on the sandbox's loopback (v3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForwardRequest {
    /// The TCP port on `127.0.0.1` inside the sandbox.
    pub port: u16,
}

/// Why a name or an entry is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The name is empty, `.`, `..`, too long, or contains `/` or NUL.
    #[error("invalid name {name:?}: {reason}")]
    BadName {
        /// The name as received.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A symbolic link without a target, a target on another kind, or an unusable target.
    #[error("invalid link target for {name:?}: {reason}")]
    BadTarget {
        /// The entry's name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A modification time with nanoseconds of a second or more.
    #[error("invalid modification time for {name:?}")]
    BadMtime {
        /// The entry's name.
        name: String,
    },
}

/// Checks that `name` is exactly one path component.
pub fn check_name(name: &str) -> Result<(), EntryError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name == "." || name == ".." {
        Some("a relative directory reference")
    } else if name.contains('/') {
        Some("contains '/'")
    } else if name.contains('\0') {
        Some("contains NUL")
    } else if name.len() > MAX_NAME_LEN {
        Some("longer than 255 bytes")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(EntryError::BadName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

impl Entry {
    /// Checks the name, the link target's presence and form, and the time.
    pub fn validate(&self) -> Result<(), EntryError> {
        check_name(&self.name)?;
        let bad_target = |reason| EntryError::BadTarget {
            name: self.name.clone(),
            reason,
        };
        match (self.kind, &self.target) {
            (EntryKind::Symlink, Some(target)) => {
                if target.is_empty() {
                    return Err(bad_target("empty"));
                }
                if target.contains('\0') {
                    return Err(bad_target("contains NUL"));
                }
                if target.len() > MAX_TARGET_LEN {
                    return Err(bad_target("longer than 4095 bytes"));
                }
            }
            (EntryKind::Symlink, None) => return Err(bad_target("missing")),
            (EntryKind::File | EntryKind::Dir, Some(_)) => {
                return Err(bad_target("only a symbolic link has a target"))
            }
            (EntryKind::File | EntryKind::Dir, None) => {}
        }
        if self.mtime.nanos >= 1_000_000_000 {
            return Err(EntryError::BadMtime {
                name: self.name.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, kind: EntryKind, target: Option<&str>) -> Entry {
        Entry {
            name: name.into(),
            kind,
            mode: 0o644,
            mtime: Mtime { secs: 0, nanos: 0 },
            target: target.map(str::to_owned),
        }
    }

    #[test]
    fn names_that_could_leave_the_tree_are_refused() {
        for bad in ["", ".", "..", "a/b", "/", "../x", "a\0b", &"x".repeat(256)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in [
            "a",
            "...",
            "a b",
            "new\nline",
            "\u{1b}[31mred",
            &"x".repeat(255),
        ] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
    }

    #[test]
    fn link_targets_belong_to_links_only() {
        assert!(entry("l", EntryKind::Symlink, None).validate().is_err());
        assert!(entry("l", EntryKind::Symlink, Some("")).validate().is_err());
        assert!(entry("f", EntryKind::File, Some("x")).validate().is_err());
        assert!(entry("d", EntryKind::Dir, Some("x")).validate().is_err());
        assert!(entry("l", EntryKind::Symlink, Some("../../etc/passwd"))
            .validate()
            .is_ok());
        let mut e = entry("f", EntryKind::File, None);
        e.mtime.nanos = 1_000_000_000;
        assert!(e.validate().is_err());
    }
}
