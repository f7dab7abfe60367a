//! The revisioned state store (PRODUCT R1).
//!
//! A store is one directory; each record is one JSON file `<name>` holding
//! `{ "revision": N, "data": … }`. Beside it live two hidden sidecars (record names cannot start
//! with `.`, so they never collide with records):
//! - `.<name>.lock`: an empty file that writers `flock` for the duration of one compare-and-swap;
//!   it is never deleted (unlinking a lock file lets two writers lock different inodes);
//! - `.<name>.removed`: the last revision of a removed record, so a re-created record continues
//!   counting and a writer holding a revision from before the removal still fails (no ABA).
//!
//! Write order, all under the record lock: read the current revision → compare with the
//! caller's expectation ([`StateError::StaleRevision`] on mismatch, nothing written) → delete
//! temporaries left by killed writers → [`write_atomic`] the new record at revision + 1.
//! Readers take no lock: the rename in `write_atomic` means they see a complete old or new
//! record, never a torn one.
//!
//! Opening a store and reading from it create nothing (the `plan` command must change nothing);
//! the first write creates the store directory with mode 0700, files are 0600. Callers verify
//! the root with [`crate::private_dir`] before trusting it.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::atomic::{
    remove_stray_temps_of, write_atomic, write_atomic_with, AtomicWriteError, Durability,
};
use crate::flock_wait::lock_exclusive_within;

/// Longest accepted record name.
pub const MAX_NAME_LEN: usize = 128;
/// How long a writer waits for another writer of the same record (writes take milliseconds;
/// only a stopped or wedged process holds it this long).
pub const RECORD_LOCK_WAIT: Duration = Duration::from_secs(10);
/// How many compare-and-swap rounds [`StateStore::update`] tries before giving up.
pub const UPDATE_ATTEMPTS: u32 = 200;

/// One record as stored: the data and the revision it was written at (1 for the first write).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record<T> {
    pub revision: u64,
    pub data: T,
}

#[derive(Serialize, Deserialize)]
struct Tombstone {
    revision: u64,
}

/// Failures of the state store; each names the record or path involved.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state root {path} is not an absolute path")]
    RootNotAbsolute { path: PathBuf },
    #[error("invalid state record name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("cannot read state file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state file {path} is not a valid record: {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot encode state record {name}: {source}")]
    Encode {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot create state directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot lock state record {path}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state record lock {path} still held after {waited:?}; another airlock process is stuck writing it")]
    LockTimeout { path: PathBuf, waited: Duration },
    #[error(transparent)]
    Write(#[from] AtomicWriteError),
    #[error("cannot remove state file {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state record {name} changed underneath this command (expected revision {expected}, found {found}); re-run the command", expected = rev(*.expected), found = rev(*.found))]
    StaleRevision {
        name: String,
        expected: Option<u64>,
        found: Option<u64>,
    },
    #[error("state record {name} kept changing during {attempts} update attempts")]
    Contended { name: String, attempts: u32 },
}

impl StateError {
    /// Whether a write failed only because the state disk (or quota) is full.
    pub fn is_out_of_space(&self) -> bool {
        match self {
            StateError::Write(e) => e.is_out_of_space(),
            StateError::Read { source, .. }
            | StateError::CreateDir { source, .. }
            | StateError::Lock { source, .. }
            | StateError::Remove { source, .. } => crate::atomic::is_out_of_space(source),
            StateError::RootNotAbsolute { .. }
            | StateError::InvalidName { .. }
            | StateError::Corrupt { .. }
            | StateError::Encode { .. }
            | StateError::LockTimeout { .. }
            | StateError::StaleRevision { .. }
            | StateError::Contended { .. } => false,
        }
    }
}

fn rev(r: Option<u64>) -> String {
    match r {
        Some(n) => n.to_string(),
        None => "none (absent)".to_string(),
    }
}

/// Checks a record (or sub-store) name: 1–128 characters from `[a-z0-9._-]`, starting with a
/// letter or digit, without `..`. So a name is always one plain file name inside the store.
pub fn validate_name(name: &str) -> Result<(), StateError> {
    let invalid = |reason| {
        Err(StateError::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return invalid("longer than 128 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
    {
        return invalid("only a-z, 0-9, '.', '_' and '-' are allowed");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return invalid("must start with a letter or digit");
    }
    if name.contains("..") {
        return invalid("must not contain '..'");
    }
    Ok(())
}

/// A directory of revisioned records. Cheap to clone; holds no open files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStore {
    root: PathBuf,
}

impl StateStore {
    /// A store rooted at `root` (absolute). Touches nothing on disk.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StateError> {
        let root = root.into();
        if !root.is_absolute() {
            return Err(StateError::RootNotAbsolute { path: root });
        }
        Ok(StateStore { root })
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A nested store in the sub-directory `name` (e.g. one per sandbox). Touches nothing.
    pub fn substore(&self, name: &str) -> Result<StateStore, StateError> {
        validate_name(name)?;
        Ok(StateStore {
            root: self.root.join(name),
        })
    }

    /// The file that holds record `name`.
    pub fn path_of(&self, name: &str) -> Result<PathBuf, StateError> {
        validate_name(name)?;
        Ok(self.root.join(name))
    }

    /// Reads record `name`; `None` when it does not exist (also when the store does not).
    /// Takes no lock and creates nothing.
    pub fn read<T: DeserializeOwned>(&self, name: &str) -> Result<Option<Record<T>>, StateError> {
        let path = self.path_of(name)?;
        read_json(&path)
    }

    /// Names of all records in the store, sorted (sidecars and temporaries excluded).
    pub fn names(&self) -> Result<Vec<String>, StateError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StateError::Read {
                    path: self.root.clone(),
                    source,
                })
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| StateError::Read {
                path: self.root.clone(),
                source,
            })?;
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            if let Some(name) = entry.file_name().to_str() {
                if is_file && validate_name(name).is_ok() {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// Writes `value` as record `name` if the record is currently at revision `expected`
    /// (`None`: the record must not exist). Returns the new revision. Durable (R1).
    pub fn write<T: Serialize>(
        &self,
        name: &str,
        expected: Option<u64>,
        value: &T,
    ) -> Result<u64, StateError> {
        self.write_with(name, expected, value, Durability::Durable)
    }

    /// [`StateStore::write`] with the flushes `durability` asks for: [`Durability::Atomic`]
    /// only for a rewrite whose newest revision a machine crash makes worthless (see
    /// `atomic`'s module docs). Atomic for every reader and compare-and-swap checked either
    /// way.
    pub fn write_with<T: Serialize>(
        &self,
        name: &str,
        expected: Option<u64>,
        value: &T,
        durability: Durability,
    ) -> Result<u64, StateError> {
        let path = self.path_of(name)?;
        let data = encode(name, value)?;
        self.create_root()?;
        let _lock = self.lock_record(name)?;
        let found = read_revision(&path)?;
        if found != expected {
            return Err(StateError::StaleRevision {
                name: name.to_string(),
                expected,
                found,
            });
        }
        let base = match found {
            Some(revision) => revision,
            None => self.removed_revision(name)?,
        };
        let revision = base + 1;
        self.remove_stray_temps(name)?;
        write_atomic_with(&path, &frame(revision, &data), 0o600, durability)?;
        Ok(revision)
    }

    /// Read-modify-write with compare-and-swap: `f` gets the current data (or `None`) and
    /// returns the new data; on a concurrent change the read and `f` are repeated, at most
    /// [`UPDATE_ATTEMPTS`] times with a short randomised back-off. `f` may therefore run
    /// more than once and must not have side effects.
    pub fn update<T, F>(&self, name: &str, mut f: F) -> Result<Record<T>, StateError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> T,
    {
        let written = self.update_if(name, |current| Some(f(current)))?;
        Ok(written.expect("f always returns new data"))
    }

    /// [`StateStore::update`] where `f` may return `None` to leave the record as it is: then
    /// nothing is written (not even the store directory) and the result is `None`.
    pub fn update_if<T, F>(&self, name: &str, mut f: F) -> Result<Option<Record<T>>, StateError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> Option<T>,
    {
        for attempt in 0..UPDATE_ATTEMPTS {
            let current = self.read::<T>(name)?;
            let expected = current.as_ref().map(|r| r.revision);
            let Some(data) = f(current.map(|r| r.data)) else {
                return Ok(None);
            };
            match self.write(name, expected, &data) {
                Ok(revision) => return Ok(Some(Record { revision, data })),
                Err(StateError::StaleRevision { .. }) => std::thread::sleep(backoff(attempt)),
                Err(e) => return Err(e),
            }
        }
        Err(StateError::Contended {
            name: name.to_string(),
            attempts: UPDATE_ATTEMPTS,
        })
    }

    /// Removes record `name` if it is at revision `expected`; a later write of the same name
    /// continues from this revision (see module docs).
    pub fn remove(&self, name: &str, expected: u64) -> Result<(), StateError> {
        let path = self.path_of(name)?;
        // An absent record (or store) is stale for any expectation; checking before locking
        // keeps a failed removal from creating the store or a lock file.
        let stale = |found| StateError::StaleRevision {
            name: name.to_string(),
            expected: Some(expected),
            found,
        };
        if read_revision(&path)?.is_none() {
            return Err(stale(None));
        }
        let _lock = self.lock_record(name)?;
        let found = read_revision(&path)?;
        if found != Some(expected) {
            return Err(stale(found));
        }
        let tomb = serde_json::to_vec(&Tombstone { revision: expected }).map_err(|source| {
            StateError::Encode {
                name: name.to_string(),
                source,
            }
        })?;
        self.remove_stray_temps(name)?;
        write_atomic(&self.sidecar(name, "removed"), &tomb, 0o600)?;
        std::fs::remove_file(&path).map_err(|source| StateError::Remove { path, source })
    }

    /// Deletes temporaries of the record and of its tombstone left by killed writers. Only
    /// called under the record lock, when no writer of either file can be mid-write.
    fn remove_stray_temps(&self, name: &str) -> Result<(), StateError> {
        let tombstone = format!(".{name}.removed");
        let targets = [OsStr::new(name), OsStr::new(&tombstone)];
        remove_stray_temps_of(&self.root, &targets).map_err(|source| StateError::Remove {
            path: self.root.clone(),
            source,
        })?;
        Ok(())
    }

    fn sidecar(&self, name: &str, kind: &str) -> PathBuf {
        self.root.join(format!(".{name}.{kind}"))
    }

    fn removed_revision(&self, name: &str) -> Result<u64, StateError> {
        let path = self.sidecar(name, "removed");
        let bytes = match read_nofollow(&path)? {
            Some(bytes) => bytes,
            None => return Ok(0),
        };
        let tomb: Tombstone = serde_json::from_slice(&bytes)
            .map_err(|source| StateError::Corrupt { path, source })?;
        Ok(tomb.revision)
    }

    fn create_root(&self) -> Result<(), StateError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(|source| StateError::CreateDir {
                path: self.root.clone(),
                source,
            })
    }

    /// Exclusive lock on the record's sidecar, released when the returned file is dropped.
    fn lock_record(&self, name: &str) -> Result<File, StateError> {
        let path = self.sidecar(name, "lock");
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(&path, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => fd,
            Err(e) => {
                return Err(StateError::Lock {
                    path,
                    source: e.into(),
                })
            }
        };
        match lock_exclusive_within(&fd, RECORD_LOCK_WAIT) {
            Ok(true) => Ok(File::from(fd)),
            Ok(false) => Err(StateError::LockTimeout {
                path,
                waited: RECORD_LOCK_WAIT,
            }),
            Err(e) => Err(StateError::Lock {
                path,
                source: e.into(),
            }),
        }
    }
}

/// Serialises the data before any lock is taken or directory created, so an unencodable value
/// fails early and the (possibly large) encoding does not lengthen the locked section.
fn encode<T: Serialize>(name: &str, value: &T) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(value).map_err(|source| StateError::Encode {
        name: name.to_string(),
        source,
    })
}

/// The on-disk record around already-encoded data: `{"revision": N, "data": …}`.
fn frame(revision: u64, data: &[u8]) -> Vec<u8> {
    let head = format!("{{\n  \"revision\": {revision},\n  \"data\": ");
    let mut bytes = Vec::with_capacity(head.len() + data.len() + 3);
    bytes.extend_from_slice(head.as_bytes());
    bytes.extend_from_slice(data);
    bytes.extend_from_slice(b"\n}\n");
    bytes
}

/// The revision of the record at `path` (`None` when absent), checking that the file is a
/// whole record without building its data.
fn read_revision(path: &Path) -> Result<Option<u64>, StateError> {
    Ok(read_json::<serde::de::IgnoredAny>(path)?.map(|r| r.revision))
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<Record<T>>, StateError> {
    let Some(bytes) = read_nofollow(path)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| StateError::Corrupt {
            path: path.to_path_buf(),
            source,
        })
}

/// The most [`read_nofollow`] allocates up front from a file's reported size.
const PREALLOCATE_AT_MOST: usize = 1 << 20;

/// Reads a whole file, refusing a symlink or a non-regular file (a FIFO would block the
/// reader forever; `O_NONBLOCK` keeps the open itself from blocking); `None` when absent.
fn read_nofollow(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => {
            return Err(StateError::Read {
                path: path.to_path_buf(),
                source: e.into(),
            })
        }
    };
    let regular = rustix::fs::fstat(&fd).map(|st| {
        let size = usize::try_from(st.st_size).unwrap_or(0);
        let file_type = rustix::fs::FileType::from_raw_mode(st.st_mode);
        (file_type == rustix::fs::FileType::RegularFile).then_some(size)
    });
    let size = match regular {
        Ok(Some(size)) => size,
        Ok(None) => {
            return Err(StateError::Read {
                path: path.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidData, "not a regular file"),
            })
        }
        Err(e) => {
            return Err(StateError::Read {
                path: path.to_path_buf(),
                source: e.into(),
            })
        }
    };
    // Sized from the fstat above, with a byte to spare to see the end: `File::read_to_end`
    // would ask for the size again (statx) and the position (lseek) before reading. The size
    // only sizes the first buffer, never more than `PREALLOCATE_AT_MOST` (a record is a few
    // KiB; a larger file still reads whole, growing as it goes).
    let mut bytes = Vec::with_capacity(size.min(PREALLOCATE_AT_MOST).saturating_add(1));
    File::from(fd)
        .take(u64::MAX)
        .read_to_end(&mut bytes)
        .map_err(|source| StateError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(bytes))
}

/// 0.2–4.2 ms growing with the attempt, jittered by pid and clock so that contending
/// processes stop retrying in lock-step.
fn backoff(attempt: u32) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let jitter = (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) % 1000;
    let base = 200 * u64::from(attempt.min(15) + 1);
    Duration::from_micros(base + u64::from(jitter))
}
