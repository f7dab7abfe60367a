//! The per-sandbox audit log (N7): one JSON line per request, rotated by size, with repeated
//! identical denials counted instead of repeated.
//!
//! Each line is an [`AuditEntry`]: time, method, host, port, decision, deciding rule, status,
//! bytes each way, the *names* of the secrets substituted, and warnings (a placeholder seen
//! where it is not substituted). Values never reach this module: entries are built from
//! names, and [`AuditLog::append`] writes one line with one `write` on an `O_APPEND` file (mode
//! 0600), so concurrent requests never interleave within a line.
//!
//! - [`writer`]: [`AuditLog`], rotation ([`Rotation`]: `audit.jsonl`, then `audit.jsonl.1` …
//!   `.N`, oldest last) and the collapsing of repeated denials (`repeated`, `last`);
//! - [`reader`]: [`read_entries`] and [`AuditFollower`] read the rotated files and the current
//!   one in order, skip a torn last line (a writer killed mid-write) and pick it up once
//!   complete, which is what `airlock policy log [--follow]` needs.

mod reader;
mod writer;

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use reader::{read_entries, rotated_path, AuditFollower};
pub use writer::{AuditLog, Rotation, COLLAPSE_IDLE, COLLAPSE_WINDOW};

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
    /// A collapsed line: how many identical denials it stands for, from `time` to `last`
    /// (absent: one request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated: Option<u64>,
    /// A collapsed line: the time of the last of its denials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

impl AuditEntry {
    /// How many requests this line stands for.
    pub fn count(&self) -> u64 {
        self.repeated.unwrap_or(1)
    }

    /// Whether `other` is the same denial as this one (everything but the times and count).
    pub fn same_denial(&self, other: &AuditEntry) -> bool {
        self.decision == Verdict::Deny
            && other.decision == Verdict::Deny
            && self.method == other.method
            && self.host == other.host
            && self.port == other.port
            && self.rule == other.rule
            && self.status == other.status
            && self.mode == other.mode
            && self.bytes_up == other.bytes_up
            && self.bytes_down == other.bytes_down
            && self.secrets == other.secrets
            && self.warnings == other.warnings
    }
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
