//! The per-sandbox lock that serialises mutating commands (PRODUCT L8).
//!
//! Order of operations in [`SandboxLock::acquire`]:
//! 1. open (or create, mode 0600, never through a symlink) the lock file, close-on-exec so
//!    no sandbox process started later inherits it;
//! 2. poll `flock(LOCK_EX|LOCK_NB)` with short sleeps until the deadline;
//! 3. once held, replace the file's content with the holder's pid and command as JSON.
//!
//! On timeout the waiter reads that JSON and reports [`LockError::Busy`] with the holder's
//! pid and command (the CLI maps it to exit 75). The kernel releases a `flock` when the
//! holder's descriptor closes, so a holder killed by any signal frees the lock at once; the
//! holder text it leaves behind is overwritten by the next holder and cleared on a clean
//! release. The lock file itself is never deleted (deleting would let two processes lock
//! different inodes of the same path).
//!
//! A process that `fork`s without `exec` while holding the guard shares the lock with its
//! child; airlock only starts children through `exec`.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::flock_wait::lock_exclusive_within;

/// How long a waiter keeps re-reading an empty holder record (the holder locked but has not
/// yet written its identity) before reporting the holder as unknown.
const HOLDER_READ_GRACE: Duration = Duration::from_millis(100);

/// Who holds the lock, as written into the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub command: String,
}

impl Holder {
    /// This process: its pid and its command line (argv joined by spaces). airlock never puts
    /// secrets on its command line (they are read from stdin), so this is safe to record.
    pub fn current() -> Holder {
        let command = std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        Holder {
            pid: std::process::id(),
            command,
        }
    }
}

/// Failures to take the sandbox lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open lock file {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot record the lock holder in {path}: {source}")]
    WriteHolder {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} after waiting {waited:?} ({path})", busy_holder(*.pid, .command.as_deref()))]
    Busy {
        path: PathBuf,
        /// The holder's pid, `None` when it had not yet recorded itself.
        pid: Option<u32>,
        /// The holder's command line, `None` when unknown. Untrusted text for display: escape
        /// control characters before printing (PRODUCT O1).
        command: Option<String>,
        waited: Duration,
    },
}

fn busy_holder(pid: Option<u32>, command: Option<&str>) -> String {
    match (pid, command) {
        (Some(pid), Some(cmd)) => {
            format!("another airlock command holds the sandbox lock: pid {pid} ({cmd:?})")
        }
        (Some(pid), None) => format!("another airlock command holds the sandbox lock: pid {pid}"),
        (None, _) => {
            "another airlock command holds the sandbox lock (holder not yet recorded)".to_string()
        }
    }
}

/// The sandbox lock; see the module docs.
#[derive(Debug)]
pub struct SandboxLock;

/// Proof that this process holds the lock; dropping it clears the holder record and releases.
#[derive(Debug)]
pub struct LockGuard {
    file: File,
    path: PathBuf,
}

impl LockGuard {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Best effort: a stale holder text is harmless (the next holder overwrites it, and a
        // waiter only reads it while the lock is held). Closing `file` releases the flock.
        let _ = self.file.set_len(0);
    }
}

impl SandboxLock {
    /// Takes the lock at `path`, waiting at most `wait`, and records `holder` in it.
    pub fn acquire(path: &Path, wait: Duration, holder: &Holder) -> Result<LockGuard, LockError> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::from_raw_mode(0o600)).map_err(|e| {
            LockError::Open {
                path: path.to_path_buf(),
                source: e.into(),
            }
        })?;
        let held = lock_exclusive_within(&fd, wait).map_err(|e| LockError::Lock {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        let mut file = File::from(fd);
        if !held {
            let found = read_holder(&mut file);
            return Err(LockError::Busy {
                path: path.to_path_buf(),
                pid: found.as_ref().map(|h| h.pid),
                command: found.map(|h| h.command),
                waited: wait,
            });
        }
        match write_holder(&mut file, holder) {
            Ok(()) => {}
            // The flock is the lock; the holder's identity only names it for a waiter. On a
            // full disk the lock is kept without it (a waiter then sees no pid), so `down`
            // works with zero free bytes (9.11).
            Err(source) if crate::atomic::is_out_of_space(&source) => {}
            Err(source) => {
                return Err(LockError::WriteHolder {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        Ok(LockGuard {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Takes the lock only if it is free right now.
    pub fn try_acquire(path: &Path, holder: &Holder) -> Result<LockGuard, LockError> {
        Self::acquire(path, Duration::ZERO, holder)
    }
}

fn write_holder(file: &mut File, holder: &Holder) -> io::Result<()> {
    let json = serde_json::to_vec(holder).map_err(io::Error::other)?;
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&json)
}

/// Reads the holder record; re-reads briefly while it is empty or half-written.
fn read_holder(file: &mut File) -> Option<Holder> {
    let deadline = std::time::Instant::now() + HOLDER_READ_GRACE;
    loop {
        let mut text = Vec::new();
        let parsed = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_end(&mut text))
            .ok()
            .and_then(|_| serde_json::from_slice::<Holder>(&text).ok());
        if parsed.is_some() || std::time::Instant::now() >= deadline {
            return parsed;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_holder_is_this_process_and_its_command_line() {
        let holder = Holder::current();
        assert_eq!(holder.pid, std::process::id());
        let exe = std::env::args().next().unwrap();
        assert!(holder.command.starts_with(&exe), "{holder:?}");
    }

    #[test]
    fn busy_message_names_pid_and_command() {
        let err = LockError::Busy {
            path: PathBuf::from("/s/lock"),
            pid: Some(42),
            command: Some("airlock up".into()),
            waited: Duration::from_secs(5),
        };
        let text = err.to_string();
        assert!(
            text.contains("pid 42") && text.contains("airlock up"),
            "{text}"
        );
    }
}
