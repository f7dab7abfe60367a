//! The lifecycle's state records (PRODUCT R1, L5, L8), stored revisioned in a [`crate::StateStore`].
//!
//! - [`SandboxRecord`] (store `sandboxes`, one record per sandbox name): what was built, for
//!   whom, in which epoch, and the identity of the processes that own it, so `status` can prove
//!   each of them alive or dead (PRODUCT R2) instead of assuming.
//! - [`OperationRecord`] (store `operations`, one record per sandbox name: the latest mutating
//!   operation): kind, start, phase, result and timings, and the identity of the airlock process
//!   running it, so a later command can tell a running operation from one that died.
//!
//! Nothing here names a backend: backend-specific data travels as the opaque
//! [`SandboxRecord::backend_data`], interpreted only by the backend that wrote it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::names::SandboxName;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `YYYY-MM-DDTHH:MM:SSZ` for milliseconds since the Unix epoch (UTC, proleptic Gregorian).
pub fn utc_text(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `(year, month, day)` of the day `days` after 1970-01-01, proleptic Gregorian (H. Hinnant,
/// "chrono-Compatible Low-Level Date Algorithms", `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

/// A process as proven by three facts (PRODUCT R2): pid, kernel start time (clock ticks since
/// boot, `/proc/PID/stat` field 22) and command line. A recycled pid has another start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub start_time: u64,
    pub cmdline: Vec<String>,
}

/// One boot of one sandbox: PIDs, sessions and keys are only meaningful within it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epoch {
    /// Random per creation; also names the backend's per-epoch directory.
    pub instance: String,
    /// Random per boot.
    pub boot_nonce: String,
}

impl Epoch {
    /// `instance.boot_nonce`, as shown to users.
    pub fn display(&self) -> String {
        format!("{}.{}", self.instance, self.boot_nonce)
    }
}

/// One host directory mapped into the sandbox, as compared by L1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingSummary {
    pub host: PathBuf,
    pub sandbox: PathBuf,
    pub writable: bool,
}

/// The parts of a plan that decide whether a running sandbox may be reused (PRODUCT L1):
/// mappings, image and limits. Host paths are canonical, so spelling differences vanish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    pub image: String,
    pub workspaces: Vec<MappingSummary>,
    pub mounts: Vec<MappingSummary>,
    pub home: PathBuf,
    pub memory_mb: Option<u64>,
    pub pids_max: Option<u64>,
    pub cpus: Option<f64>,
}

/// Where a sandbox is in its life, as recorded by the command that created it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Created by an `up` that has not yet seen it ready.
    Starting,
    /// Seen ready by the `up` that created it.
    Ready,
}

/// Directories a sandbox owns on the host; each carries an ownership marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPaths {
    /// Under airlock's state root: the keeper's log, the start request.
    pub state_dir: PathBuf,
    /// Under airlock's runtime root: the control socket and the per-epoch directory.
    pub runtime_dir: PathBuf,
}

/// Everything recorded about one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub name: SandboxName,
    pub project_root: PathBuf,
    pub backend: String,
    pub plan: PlanSummary,
    pub epoch: Epoch,
    pub phase: Phase,
    /// The host process that owns the sandbox (set as soon as it is spawned).
    pub keeper: Option<ProcessIdentity>,
    /// The sandbox's PID 1 as seen on the host (set once ready).
    pub guest: Option<ProcessIdentity>,
    pub created_ms: u64,
    pub ready_ms: Option<u64>,
    pub paths: SandboxPaths,
    /// Backend-specific facts (opaque above the backend boundary).
    pub backend_data: serde_json::Value,
}

/// What a mutating operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    Up,
    Down,
    Clean,
}

impl OperationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Up => "up",
            OperationKind::Down => "down",
            OperationKind::Clean => "clean",
        }
    }
}

/// How an operation ended (or that it has not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum OperationResult {
    Running,
    Succeeded,
    Failed {
        message: String,
    },
    /// The user cancelled it (Ctrl+C, PRODUCT L7).
    Cancelled,
    /// The process running it died; found by a later command (PRODUCT L8).
    Interrupted,
}

impl OperationResult {
    pub fn as_str(&self) -> &'static str {
        match self {
            OperationResult::Running => "running",
            OperationResult::Succeeded => "succeeded",
            OperationResult::Failed { .. } => "failed",
            OperationResult::Cancelled => "cancelled",
            OperationResult::Interrupted => "interrupted",
        }
    }
}

/// The latest mutating operation on one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationRecord {
    pub kind: OperationKind,
    pub started_ms: u64,
    pub finished_ms: Option<u64>,
    /// The phase reached (`validate`, `lock`, `cleanup`, `create`, `wait`, `record`, …).
    pub phase: String,
    pub result: OperationResult,
    /// Milliseconds per completed phase, in completion order by name.
    pub timings: BTreeMap<String, u64>,
    /// The airlock process running it.
    pub process: ProcessIdentity,
}

#[cfg(test)]
mod tests {
    use super::{civil_from_days, utc_text};

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn utc_text_formats_known_instants() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_795_979_176_989), "2026-11-29T19:06:16Z");
    }
}
