//! The writer side of the audit log: appending, rotating by size, collapsing repeated denials.
//!
//! Rotation ([`Rotation`], default 8 MiB × 5 files): before a line would take the current file
//! past `max_bytes`, `audit.jsonl.{keep-1}` … `.1` are renamed one up (the oldest, `.{keep}`,
//! is replaced and so dropped), the current file becomes `.1`, and a new current file is
//! created (0600, never through a symlink). A sandbox's log therefore never holds more than
//! `(keep + 1) × max_bytes` (plus one line), however long it runs or however fast it is
//! flooded. A rename that fails is reported through `tracing` and writing continues in the
//! current file: a request is never lost to a rotation problem.
//!
//! Collapsing: the first of a run of identical denials ([`AuditEntry::same_denial`]) is written
//! at once; the identical ones right after it are counted and written as *one* line with
//! `repeated: N`, `time` the first of them and `last` the last. That line is written when a
//! different entry arrives, when the run has lasted [`COLLAPSE_WINDOW`], when no repeat came
//! for [`COLLAPSE_IDLE`] ([`AuditLog::flush_idle`], which the proxy calls every second), and
//! when the log is flushed or dropped (proxy shutdown). The count is exact: the lines of a run
//! add up ([`AuditEntry::count`]) to the number of requests.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::reader::rotated_path;
use super::{AuditEntry, AuditError, Verdict};

/// A run of repeats is written at least this often, so a long flood shows up while it lasts.
pub const COLLAPSE_WINDOW: Duration = Duration::from_secs(60);
/// A run of repeats with no new repeat for this long is written.
pub const COLLAPSE_IDLE: Duration = Duration::from_secs(1);

/// How large the log may grow (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The size at which the current file is rotated.
    pub max_bytes: u64,
    /// How many rotated files are kept (`.1` … `.keep`); at least 1.
    pub keep: usize,
}

impl Default for Rotation {
    /// 8 MiB per file, 4 rotated files kept: at most 40 MiB per sandbox.
    fn default() -> Rotation {
        Rotation {
            max_bytes: 8 * 1024 * 1024,
            keep: 4,
        }
    }
}

/// Identical denials counted but not yet written.
#[derive(Debug)]
struct Pending {
    /// The first of them; `repeated` and `last` are filled in when written.
    entry: AuditEntry,
    count: u64,
    last_time: String,
    started: Instant,
    updated: Instant,
}

#[derive(Debug)]
struct Inner {
    file: File,
    size: u64,
    /// The last line written, when it was a denial (what a repeat is compared with).
    last_denial: Option<AuditEntry>,
    pending: Option<Pending>,
}

/// The writer side.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    rotation: Rotation,
    inner: Mutex<Inner>,
}

fn open_current(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

impl AuditLog {
    /// Opens `path` for appending with the default [`Rotation`] (creating it 0600, and its
    /// directory, when absent). The log is never opened through a symlink planted in its place
    /// (`O_NOFOLLOW`).
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        AuditLog::open_with(path, Rotation::default())
    }

    /// [`open`](Self::open) with `rotation`.
    pub fn open_with(path: &Path, rotation: Rotation) -> Result<AuditLog, AuditError> {
        let open_err = |source| AuditError::Open {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(open_err)?;
        }
        let file = open_current(path).map_err(open_err)?;
        let size = file.metadata().map_err(open_err)?.len();
        Ok(AuditLog {
            path: path.to_path_buf(),
            rotation: Rotation {
                keep: rotation.keep.max(1),
                ..rotation
            },
            inner: Mutex::new(Inner {
                file,
                size,
                last_denial: None,
                pending: None,
            }),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one entry (or counts it, see the module docs). A failed write is reported
    /// through `tracing` and otherwise ignored: the request already happened, and losing the
    /// proxy over a full disk would be worse.
    pub fn append(&self, entry: &AuditEntry) {
        self.append_at(entry, Instant::now());
    }

    /// [`append`](Self::append) as if at `now` (tests drive the collapse windows with it).
    pub fn append_at(&self, entry: &AuditEntry, now: Instant) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = &mut inner.pending {
            if p.entry.same_denial(entry) {
                p.count += 1;
                p.last_time.clone_from(&entry.time);
                p.updated = now;
                if now.duration_since(p.started) >= COLLAPSE_WINDOW {
                    inner.write_pending(&self.path, self.rotation);
                }
                return;
            }
            inner.write_pending(&self.path, self.rotation);
        }
        let repeat = entry.decision == Verdict::Deny
            && inner
                .last_denial
                .as_ref()
                .is_some_and(|d| d.same_denial(entry));
        if repeat {
            inner.pending = Some(Pending {
                entry: entry.clone(),
                count: 1,
                last_time: entry.time.clone(),
                started: now,
                updated: now,
            });
            return;
        }
        inner.write_line(&self.path, self.rotation, entry);
        inner.last_denial = (entry.decision == Verdict::Deny).then(|| entry.clone());
    }

    /// Writes counted repeats that saw no new repeat for [`COLLAPSE_IDLE`] before `now`.
    pub fn flush_idle(&self, now: Instant) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let idle = inner
            .pending
            .as_ref()
            .is_some_and(|p| now.duration_since(p.updated) >= COLLAPSE_IDLE);
        if idle {
            inner.write_pending(&self.path, self.rotation);
        }
    }

    /// Writes counted repeats now (shutdown).
    pub fn flush(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.write_pending(&self.path, self.rotation);
    }
}

impl Inner {
    fn write_pending(&mut self, path: &Path, rotation: Rotation) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let mut entry = p.entry;
        if p.count > 1 {
            entry.repeated = Some(p.count);
            entry.last = Some(p.last_time);
        }
        self.write_line(path, rotation, &entry);
    }

    fn write_line(&mut self, path: &Path, rotation: Rotation, entry: &AuditEntry) {
        let mut line = serde_json::to_vec(entry).expect("audit entries serialize");
        line.push(b'\n');
        let len = line.len() as u64;
        if self.size > 0 && self.size + len > rotation.max_bytes {
            self.rotate(path, rotation);
        }
        match self.file.write_all(&line) {
            Ok(()) => self.size += len,
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot write audit log")
            }
        }
    }

    /// Shifts `.1`… one up, makes the current file `.1` and opens a new current file.
    fn rotate(&mut self, path: &Path, rotation: Rotation) {
        let shifted = (1..rotation.keep).rev().try_for_each(|i| {
            match std::fs::rename(rotated_path(path, i), rotated_path(path, i + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                Ok(()) | Err(_) => Ok(()),
            }
        });
        let result = shifted
            .and_then(|()| std::fs::rename(path, rotated_path(path, 1)))
            .and_then(|()| open_current(path));
        match result {
            Ok(file) => {
                self.file = file;
                self.size = 0;
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot rotate audit log")
            }
        }
    }
}

impl Drop for AuditLog {
    /// Counted repeats are written when the log closes.
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        inner.write_pending(&self.path, self.rotation);
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
