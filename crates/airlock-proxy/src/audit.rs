//! The per-sandbox audit log (N7): one JSON line per request.
//!
//! Each line is an [`AuditEntry`]: time, method, host, port, decision, deciding rule, status,
//! bytes each way, the *names* of the secrets substituted, and warnings (a placeholder seen
//! where it is not substituted). Values never reach this module: entries are built from
//! names, and [`AuditLog::append`] writes one line with one `write` on an `O_APPEND` file (mode
//! 0600), so concurrent requests never interleave within a line.
//!
//! Readers ([`read_entries`], [`AuditFollower`]) skip a torn last line (a writer killed
//! mid-write) and pick it up once complete, which is what `airlock policy log [--follow]` needs.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Whether a request was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Forwarded.
    Allow,
    /// Refused with the N9 answer.
    Deny,
}

/// How the proxy carried the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Plain HTTP forward proxying.
    Http,
    /// A CONNECT tunnel copied byte for byte.
    Tunnel,
    /// A request inside an intercepted TLS connection (N6).
    Intercept,
}

/// One audit line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// RFC 3339 UTC time the request arrived.
    pub time: String,
    /// The HTTP method (`CONNECT` for tunnels).
    pub method: String,
    /// The destination host.
    pub host: String,
    /// The destination port.
    pub port: u16,
    /// Allowed or denied.
    pub decision: Verdict,
    /// The deciding rule.
    pub rule: String,
    /// The status sent to the client (0 when the connection ended without one).
    pub status: u16,
    /// Body bytes sent upstream (tunnels: all bytes).
    pub bytes_up: u64,
    /// Body bytes sent back to the client (tunnels: all bytes).
    pub bytes_down: u64,
    /// How the request was carried.
    pub mode: Mode,
    /// Names of the secrets substituted into this request.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Warnings, e.g. a placeholder left unsubstituted.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// What went wrong with the audit file.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Creating the log's directory or opening the log failed.
    #[error("cannot open audit log {path}: {source}")]
    Open {
        /// The log.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading the log failed.
    #[error("cannot read audit log {path}: {source}")]
    Read {
        /// The log.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// The writer side.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AuditLog {
    /// Opens `path` for appending (creating it 0600, and its directory, when absent). The log
    /// is never opened through a symlink planted in its place (`O_NOFOLLOW`).
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        let open_err = |source| AuditError::Open {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(open_err)?;
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(open_err)?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line. A failed write is reported through `tracing` and otherwise ignored:
    /// the request already happened, and losing the proxy over a full disk would be worse.
    pub fn append(&self, entry: &AuditEntry) {
        let mut line = serde_json::to_vec(entry).expect("audit entries serialize");
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(&line) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot write audit log");
        }
    }
}

/// Every complete entry in the log at `path` (an absent log has none).
pub fn read_entries(path: &Path) -> Result<Vec<AuditEntry>, AuditError> {
    let mut follower = AuditFollower::from_start(path);
    follower.poll()
}

/// Reads entries as they are appended (`policy log --follow`): call [`AuditFollower::poll`]
/// periodically.
#[derive(Debug)]
pub struct AuditFollower {
    path: PathBuf,
    offset: u64,
}

impl AuditFollower {
    /// Follows from the beginning of the log.
    pub fn from_start(path: &Path) -> AuditFollower {
        AuditFollower {
            path: path.to_path_buf(),
            offset: 0,
        }
    }

    /// Follows from the current end of the log (only new entries).
    pub fn from_end(path: &Path) -> Result<AuditFollower, AuditError> {
        let offset = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(source) => {
                return Err(AuditError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Ok(AuditFollower {
            path: path.to_path_buf(),
            offset,
        })
    }

    /// The complete entries appended since the last call. Lines that do not parse (written by
    /// a different version) are skipped.
    pub fn poll(&mut self) -> Result<Vec<AuditEntry>, AuditError> {
        let read_err = |source| AuditError::Read {
            path: self.path.clone(),
            source,
        };
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(read_err(e)),
        };
        if file.metadata().map_err(read_err)?.len() < self.offset {
            self.offset = 0; // the log was replaced
        }
        file.seek(SeekFrom::Start(self.offset)).map_err(read_err)?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(read_err)?;
        let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.offset += complete as u64;
        Ok(buf[..complete]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entry(host: &str) -> AuditEntry {
        AuditEntry {
            time: "2026-01-01T00:00:00.000Z".into(),
            method: "GET".into(),
            host: host.into(),
            port: 443,
            decision: Verdict::Allow,
            rule: "allow x (user config)".into(),
            status: 200,
            bytes_up: 0,
            bytes_down: 5,
            mode: Mode::Intercept,
            secrets: vec!["TOKEN".into()],
            warnings: vec![],
        }
    }

    #[test]
    fn follower_sees_appended_lines_once_and_skips_a_torn_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("sub/audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let mut follow = AuditFollower::from_end(&path).unwrap();
        log.append(&entry("a.example"));
        assert_eq!(follow.poll().unwrap(), [entry("a.example")]);
        assert!(follow.poll().unwrap().is_empty());
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(br#"{"time":"#).unwrap();
        assert!(
            follow.poll().unwrap().is_empty(),
            "a torn line is not an entry yet"
        );
        raw.write_all(b"\n").unwrap();
        log.append(&entry("b.example"));
        assert_eq!(follow.poll().unwrap(), [entry("b.example")]);
        assert_eq!(read_entries(&path).unwrap().len(), 2);
    }

    #[test]
    fn absent_log_reads_as_empty() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_entries(&tmp.path().join("none")).unwrap().is_empty());
    }
}
