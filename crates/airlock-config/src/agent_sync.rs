//! Configuration sync (A2): what of the host agent's configuration goes into the sandbox.
//!
//! [`collect`] reads the catalogue's allowlist (`AgentSpec::config_sync`) beneath the agent's
//! configuration directory on the host and returns the files to write into the sandbox home,
//! plus every file it skipped and why. It writes nothing; the base-setup step of `up` writes the
//! files and prints the skips.
//!
//! Rules, in order, for every candidate:
//! 1. only allowlisted entries (instructions, skills, commands, agents, settings) — never
//!    credentials, history, transcripts, logs or caches, which the catalogue never names;
//! 2. read beneath the agent's configuration directory without following any link
//!    ([`crate::beneath`]): a link is skipped (it may point anywhere on the host), as is
//!    anything that is not a regular file or directory;
//! 3. at most [`FILE_CAP`] bytes per file, [`MAX_FILES`] files, [`TOTAL_CAP`] bytes and
//!    [`MAX_DEPTH`] directory levels per agent: a runaway directory cannot stall `up`;
//! 4. every file is scanned for credential shapes ([`crate::credential_shapes`]); a match is
//!    skipped with its line and kind, never its text.
//!
//! The configuration directory itself may be a link (dotfile managers link `~/.claude`); it is
//! the user's own choice of directory. Nothing beneath it is followed.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::agents::AgentSpec;
use crate::beneath::{self, BeneathError, EntryKind};
use crate::credential_shapes::{self, Shape};

/// Largest file copied.
pub const FILE_CAP: u64 = 1024 * 1024;
/// Most files copied per agent.
pub const MAX_FILES: usize = 1000;
/// Most bytes copied per agent.
pub const TOTAL_CAP: u64 = 16 * 1024 * 1024;
/// Deepest directory level below an allowlisted directory.
pub const MAX_DEPTH: usize = 8;

/// A file to write into the sandbox home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedFile {
    /// Path relative to the home directory (the same inside the sandbox, I3).
    pub home_rel: PathBuf,
    /// Contents.
    pub contents: Vec<u8>,
    /// Whether the host file is executable by its owner (skills may ship scripts).
    pub executable: bool,
}

/// Why a file was not copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SkipReason {
    /// It looks like it holds a credential.
    Credential {
        /// 1-based line of the first match.
        line: usize,
        /// What it looks like.
        shape: Shape,
    },
    /// It is a symbolic link (or lies behind one).
    Link,
    /// It is neither a regular file nor a directory.
    NotRegular {
        /// What it is.
        what: String,
    },
    /// It exceeds [`FILE_CAP`].
    TooLarge {
        /// The cap.
        cap: u64,
    },
    /// The per-agent file, byte or depth limit was reached.
    Limit {
        /// Which limit.
        what: &'static str,
    },
    /// It could not be read.
    Unreadable {
        /// The cause.
        detail: String,
    },
}

/// A file that was not copied, with the host path it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The host path.
    pub path: PathBuf,
    /// Why.
    pub reason: SkipReason,
}

impl Skipped {
    /// One line for `up`'s output: the file, the line, the reason (never the content).
    pub fn message(&self) -> String {
        let path = self.path.display();
        match &self.reason {
            SkipReason::Credential { line, shape } => format!(
                "{path}:{line}: looks like {}; not copied into the sandbox \
                 (move the value into `airlock secret set` and reference it by name)",
                shape.describe()
            ),
            SkipReason::Link => {
                format!("{path}: a symbolic link; not copied (config sync never follows links)")
            }
            SkipReason::NotRegular { what } => format!("{path}: {what}; not copied"),
            SkipReason::TooLarge { cap } => {
                format!("{path}: larger than {cap} bytes; not copied")
            }
            SkipReason::Limit { what } => format!("{path}: {what} reached; not copied"),
            SkipReason::Unreadable { detail } => format!("{path}: {detail}; not copied"),
        }
    }
}

/// What config sync copies for one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncSet {
    /// Files to write, in a stable order.
    pub files: Vec<SyncedFile>,
    /// Files left out.
    pub skipped: Vec<Skipped>,
}

/// Collects the allowlisted configuration of `spec` from the host home `home`.
pub fn collect(home: &Path, spec: &AgentSpec) -> SyncSet {
    let base = if spec.config_dir.is_empty() {
        home.to_owned()
    } else {
        home.join(spec.config_dir)
    };
    let mut walk = Walk {
        base: &base,
        home_prefix: PathBuf::from(spec.config_dir),
        out: SyncSet::default(),
        bytes: 0,
    };
    if !base.is_dir() {
        return walk.out;
    }
    for entry in spec.config_sync {
        match entry.strip_suffix('/') {
            Some(dir) => walk.dir(Path::new(dir), 0),
            None => walk.file(Path::new(entry)),
        }
    }
    walk.out
}

struct Walk<'a> {
    base: &'a Path,
    home_prefix: PathBuf,
    out: SyncSet,
    bytes: u64,
}

impl Walk<'_> {
    fn skip(&mut self, rel: &Path, reason: SkipReason) {
        self.out.skipped.push(Skipped {
            path: self.base.join(rel),
            reason,
        });
    }

    fn dir(&mut self, rel: &Path, depth: usize) {
        if depth > MAX_DEPTH {
            return self.skip(
                rel,
                SkipReason::Limit {
                    what: "the depth limit",
                },
            );
        }
        let entries = match beneath::list_beneath(self.base, rel, MAX_FILES + 1) {
            Ok(Some(entries)) => entries,
            Ok(None) => return,
            Err(e) => return self.skip(rel, beneath_reason(e)),
        };
        for entry in entries {
            let child = rel.join(&entry.name);
            match entry.kind {
                EntryKind::File => self.file(&child),
                EntryKind::Directory => self.dir(&child, depth + 1),
                EntryKind::Link => self.skip(&child, SkipReason::Link),
                EntryKind::Other(what) => self.skip(
                    &child,
                    SkipReason::NotRegular {
                        what: what.to_owned(),
                    },
                ),
            }
        }
    }

    fn file(&mut self, rel: &Path) {
        if self.out.files.len() >= MAX_FILES {
            return self.skip(
                rel,
                SkipReason::Limit {
                    what: "the file limit",
                },
            );
        }
        let (contents, executable) = match read(self.base, rel) {
            Ok(Some(read)) => read,
            Ok(None) => return,
            Err(reason) => return self.skip(rel, reason),
        };
        if self.bytes + contents.len() as u64 > TOTAL_CAP {
            return self.skip(
                rel,
                SkipReason::Limit {
                    what: "the size limit",
                },
            );
        }
        if let Some(found) = credential_shapes::first(&contents) {
            return self.skip(
                rel,
                SkipReason::Credential {
                    line: found.line,
                    shape: found.shape,
                },
            );
        }
        self.bytes += contents.len() as u64;
        self.out.files.push(SyncedFile {
            home_rel: self.home_prefix.join(rel),
            contents,
            executable,
        });
    }
}

fn read(base: &Path, rel: &Path) -> Result<Option<(Vec<u8>, bool)>, SkipReason> {
    let Some(file) = beneath::open_beneath(base, rel).map_err(beneath_reason)? else {
        return Ok(None);
    };
    let unreadable = |e: std::io::Error| SkipReason::Unreadable {
        detail: e.to_string(),
    };
    let mode = file.metadata().map_err(unreadable)?.permissions().mode();
    let mut contents = Vec::new();
    file.take(FILE_CAP + 1)
        .read_to_end(&mut contents)
        .map_err(unreadable)?;
    if contents.len() as u64 > FILE_CAP {
        return Err(SkipReason::TooLarge { cap: FILE_CAP });
    }
    Ok(Some((contents, mode & 0o100 != 0)))
}

fn beneath_reason(e: BeneathError) -> SkipReason {
    match e {
        BeneathError::Link { .. } => SkipReason::Link,
        BeneathError::NotRegular { kind, .. } => SkipReason::NotRegular {
            what: kind.to_owned(),
        },
        BeneathError::TooLarge { cap, .. } => SkipReason::TooLarge { cap },
        e
        @ (BeneathError::BadPath { .. } | BeneathError::Root { .. } | BeneathError::Io { .. }) => {
            SkipReason::Unreadable {
                detail: e.to_string(),
            }
        }
    }
}
