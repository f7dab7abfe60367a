//! Lifecycle orchestration (PRODUCT §4): `up`, `down`, `clean`, `status` over a [`Backend`].
//!
//! Layout under airlock's state root:
//! - `lifecycle/sandboxes/<name>`: the [`SandboxRecord`] (revisioned, CAS);
//! - `lifecycle/operations/<name>`: the latest [`OperationRecord`];
//! - `lifecycle/locks/<name>.lock`: the per-sandbox lock every mutating command takes.
//!
//! Invariants:
//! - Every mutation of a sandbox happens under its lock; readers (`status`, `ls`) take none and
//!   derive the truth from proofs (pid + start time + command line), not from what a record
//!   claims.
//! - The record is written *before* anything exists on the host and updated with each owner
//!   identity as soon as it is known, so whatever a crash leaves behind is named by a record
//!   and can be cleaned up as far as ownership can be proven (PRODUCT L8).
//! - A lock holder that finds an operation still marked `running` knows its process died (the
//!   kernel released the lock) and marks it `interrupted` before anything else.
//! - Durability (what a *machine* crash keeps; a killed process loses nothing, every write
//!   is an atomic rename): two writes per `up` are flushed to disk, the operation's first
//!   `running` revision (so the crash is reported, L8) and the sandbox's `starting` revision
//!   (it names every directory before one exists, and the keeper when it was spawned ahead,
//!   [`Backend::owner_ahead`](crate::backend::Backend::owner_ahead)). The rest — phases, the result, the
//!   keeper's and the guest's identities, `ready` — are
//!   [`Durability::Atomic`](crate::atomic::Durability) (not flushed): they describe processes
//!   the crash ended, and the `starting` revision leads the next command to the same cleanup.
//!   Removing a record stays durable. `up` writes its `running` mark without waiting and
//!   flushes it before its first effect: at once when a record exists (the cleanup may act,
//!   a retained sandbox is provisioned), else on a thread while the `starting` record is
//!   written and flushed, so the two flushes wait for one journal commit instead of two.
//!   `down` likewise flushes its `running` mark (its only flushed write besides the record's
//!   removal) on a thread while it reads and measures the sandbox, before it stops it; with
//!   other sandboxes recorded, at once, before its cleanup may act on them.

mod ops;
mod plan_diff;
mod provision;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use ops::{
    clean, down, list, readiness, status, up, CleanOutcome, DownOutcome, Listed, Observer,
    StatusReport, UpOutcome, UpRequest,
};
pub use plan_diff::{diff_plans, PlanDifference};
pub use provision::{NoProvision, Provision, ProvisionError};

use crate::atomic::Durability;
use crate::backend::{BackendError, Inspection};
use crate::lock::{Holder, LockError, LockGuard, SandboxLock};
use crate::names::SandboxName;
use crate::ownership::{self, Liveness, OwnershipError};
use crate::records::{
    now_ms, OperationKind, OperationRecord, OperationResult, Phase, SandboxRecord,
};
use crate::state::{StateError, StateStore};

/// Why a lifecycle operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Ownership(#[from] OwnershipError),
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// L1: the running sandbox was built from a different plan.
    #[error("the running sandbox {name} was built from a different plan")]
    PlanChanged {
        name: SandboxName,
        differences: Vec<PlanDifference>,
    },
    /// Something of the sandbox is still present but could not be proven ours.
    #[error("sandbox {name} is {health} and what is left of it cannot be proven to be airlock's: {detail}")]
    Blocked {
        name: SandboxName,
        health: Health,
        detail: String,
    },
    /// The user cancelled; `left` says in which state.
    #[error("cancelled; {left}")]
    Cancelled { left: String },
    /// A provisioning step failed; the sandbox stays `ready` (P3).
    #[error("sandbox {name} is ready, but {source}")]
    Provision {
        name: SandboxName,
        #[source]
        source: ProvisionError,
    },
}

/// A sandbox's health (PRODUCT L5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Ready,
    Starting,
    Stopped,
    Failed,
    Stale,
    Absent,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Ready => "ready",
            Health::Starting => "starting",
            Health::Stopped => "stopped",
            Health::Failed => "failed",
            Health::Stale => "stale",
            Health::Absent => "absent",
        }
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Derives health from the record, the latest operation and what the backend observes.
///
/// - no record: `absent`;
/// - recorded `starting`: `starting` while the creating command provably runs, else `stale`;
/// - recorded `ready`: `ready` when owner and guest are provably alive; `failed` when the owner
///   lives but the guest does not; `stopped` when the owner exited and left a note why;
///   `stale` when it vanished without one (killed, machine crashed).
pub fn assess(
    record: Option<&SandboxRecord>,
    operation: Option<&OperationRecord>,
    seen: Option<&Inspection>,
) -> Health {
    let Some(record) = record else {
        return Health::Absent;
    };
    let seen_owner = seen.map(|s| &s.owner);
    match record.phase {
        Phase::Starting => {
            let creator_alive = operation.is_some_and(|op| {
                op.kind == OperationKind::Up
                    && op.result == OperationResult::Running
                    && ownership::check_process(&op.process) == Liveness::Ours
            });
            let owner_dead = record.keeper.is_some() && seen_owner != Some(&Liveness::Ours);
            if creator_alive && !owner_dead {
                Health::Starting
            } else {
                Health::Stale
            }
        }
        Phase::Ready => match seen {
            // Started by another airlock: alive or not, it is never talked to.
            Some(s) if s.incompatible.is_some() => Health::Stale,
            Some(s) if s.owner == Liveness::Ours && s.guest == Liveness::Ours => Health::Ready,
            Some(s) if s.owner == Liveness::Ours => Health::Failed,
            Some(s) if s.exit_note.is_some() => Health::Stopped,
            _ => Health::Stale,
        },
    }
}

/// The lifecycle's stores and lock directory under one state root.
pub struct Stores {
    pub sandboxes: StateStore,
    pub operations: StateStore,
    locks: PathBuf,
}

impl Stores {
    /// Opens the stores under `state_root` (creates nothing).
    pub fn open(state_root: &Path) -> Result<Stores, StateError> {
        let base = StateStore::open(state_root.join("lifecycle"))?;
        Ok(Stores {
            sandboxes: base.substore("sandboxes")?,
            operations: base.substore("operations")?,
            locks: state_root.join("lifecycle").join("locks"),
        })
    }

    /// Takes the lock of `name`, waiting at most `wait` (PRODUCT L8: then `Busy`).
    pub fn lock(
        &self,
        name: &SandboxName,
        wait: std::time::Duration,
    ) -> Result<LockGuard, LifecycleError> {
        create_private(&self.locks)?;
        let path = self.locks.join(format!("{name}.lock"));
        Ok(SandboxLock::acquire(&path, wait, &Holder::current())?)
    }

    pub fn record(
        &self,
        name: &SandboxName,
    ) -> Result<Option<crate::Record<SandboxRecord>>, StateError> {
        self.sandboxes.read(name.as_str())
    }

    pub fn operation(
        &self,
        name: &SandboxName,
    ) -> Result<Option<crate::Record<OperationRecord>>, StateError> {
        self.operations.read(name.as_str())
    }

    /// Every recorded sandbox name, sorted; records with invalid names are skipped.
    pub fn names(&self) -> Result<Vec<SandboxName>, StateError> {
        Ok(self
            .sandboxes
            .names()?
            .iter()
            .filter_map(|n| SandboxName::parse(n).ok())
            .collect())
    }
}

fn create_private(dir: &Path) -> Result<(), LifecycleError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| LifecycleError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })
}

/// The running operation's record, updated phase by phase (under the sandbox lock).
pub struct OperationLog<'a> {
    store: &'a StateStore,
    name: String,
    record: OperationRecord,
    revision: Option<u64>,
    phase_started: Instant,
    /// `down`'s log: a full state disk skips the record instead of failing (9.11; stopping
    /// and discarding a sandbox must work with zero free bytes).
    best_effort: bool,
    /// Set once a best-effort save was skipped for lack of space.
    unrecorded: bool,
    /// The `running` mark is written but not yet flushed (`begin_unflushed`).
    unflushed: bool,
}

impl<'a> OperationLog<'a> {
    /// Marks a previous operation that is still `running` as `interrupted` (its process died:
    /// we hold the lock it held), then records this one as running.
    pub fn begin(
        stores: &'a Stores,
        name: &SandboxName,
        kind: OperationKind,
    ) -> Result<(OperationLog<'a>, Option<OperationRecord>), LifecycleError> {
        Self::open(stores, name, kind, false, Durability::Durable, "lock")
    }

    /// [`OperationLog::begin`] whose `running` mark is written (atomically) but not yet
    /// flushed to disk: the caller flushes it ([`OperationLog::flush`], or
    /// [`OperationLog::unflushed`] on another thread) before the operation's first effect, so
    /// the flush can overlap work that has none (`up` overlaps it with the sandbox record's
    /// own flushed write). The mark already names `phase`, the operation's first under the
    /// lock: one write fewer than the mark followed by the phase.
    pub(crate) fn begin_unflushed(
        stores: &'a Stores,
        name: &SandboxName,
        kind: OperationKind,
        phase: &str,
    ) -> Result<(OperationLog<'a>, Option<OperationRecord>), LifecycleError> {
        Self::open(stores, name, kind, false, Durability::Atomic, phase)
    }

    /// [`OperationLog::begin_unflushed`] for an operation that must work on a full state disk
    /// (`down`): a save (or the flush) that fails for lack of space is skipped, and later saves
    /// try again.
    pub(crate) fn begin_best_effort_unflushed(
        stores: &'a Stores,
        name: &SandboxName,
        kind: OperationKind,
        phase: &str,
    ) -> Result<(OperationLog<'a>, Option<OperationRecord>), LifecycleError> {
        Self::open(stores, name, kind, true, Durability::Atomic, phase)
    }

    fn open(
        stores: &'a Stores,
        name: &SandboxName,
        kind: OperationKind,
        best_effort: bool,
        durability: Durability,
        phase: &str,
    ) -> Result<(OperationLog<'a>, Option<OperationRecord>), LifecycleError> {
        let store = &stores.operations;
        let previous = store.read::<OperationRecord>(name.as_str())?;
        let mut interrupted = None;
        let revision = match previous {
            Some(mut prev) if prev.data.result == OperationResult::Running => {
                prev.data.result = OperationResult::Interrupted;
                // Replaced by this operation's durable `running` mark right below.
                let rev = match store.write_with(
                    name.as_str(),
                    Some(prev.revision),
                    &prev.data,
                    Durability::Atomic,
                ) {
                    Ok(rev) => rev,
                    Err(e) if best_effort && e.is_out_of_space() => prev.revision,
                    Err(e) => return Err(e.into()),
                };
                interrupted = Some(prev.data);
                Some(rev)
            }
            Some(prev) => Some(prev.revision),
            None => None,
        };
        let record = OperationRecord {
            kind,
            started_ms: now_ms(),
            finished_ms: None,
            phase: phase.to_owned(),
            result: OperationResult::Running,
            timings: Default::default(),
            process: ownership::process_identity(std::process::id())?,
        };
        let mut log = OperationLog {
            store,
            name: name.as_str().to_owned(),
            record,
            revision,
            phase_started: Instant::now(),
            best_effort,
            unrecorded: false,
            unflushed: false,
        };
        // Durable (`begin_unflushed`: once flushed): after a machine crash the next lock holder
        // must still find this operation `running` to report it interrupted (L8).
        log.save(durability)?;
        log.unflushed = durability == Durability::Atomic && !log.unrecorded;
        Ok((log, interrupted))
    }

    /// Flushes the `running` mark to disk if it is not yet (see [`begin_unflushed`]).
    ///
    /// [`begin_unflushed`]: OperationLog::begin_unflushed
    pub(crate) fn flush(&mut self) -> Result<(), StateError> {
        if let Some(path) = self.unflushed()? {
            self.flushed_with(crate::atomic::flush(&path).map_err(StateError::from))?;
        }
        Ok(())
    }

    /// Takes the result of a flush of [`OperationLog::unflushed`] (run on another thread): a
    /// best-effort log skips one that failed for lack of space, as it skips such a save.
    pub(crate) fn flushed_with(
        &mut self,
        flushed: Result<(), StateError>,
    ) -> Result<(), StateError> {
        match flushed {
            Ok(()) => {}
            Err(e) if self.best_effort && e.is_out_of_space() => self.unrecorded = true,
            Err(e) => return Err(e),
        }
        self.flushed();
        Ok(())
    }

    /// The record's file while its `running` mark is not flushed yet: a flush of that path
    /// ([`crate::atomic::flush`]) followed by [`OperationLog::flushed`] is [`OperationLog::flush`].
    pub(crate) fn unflushed(&self) -> Result<Option<PathBuf>, StateError> {
        if !self.unflushed {
            return Ok(None);
        }
        self.store.path_of(&self.name).map(Some)
    }

    /// Notes that the `running` mark was flushed (by a flush of [`OperationLog::unflushed`]).
    pub(crate) fn flushed(&mut self) {
        self.unflushed = false;
    }

    /// Writes the record. Only its first write (`running`) must survive a machine crash;
    /// later ones (phases, the result) are [`Durability::Atomic`] (see the module docs).
    fn save(&mut self, durability: Durability) -> Result<(), StateError> {
        match self
            .store
            .write_with(&self.name, self.revision, &self.record, durability)
        {
            Ok(rev) => {
                self.revision = Some(rev);
                Ok(())
            }
            Err(e) if self.best_effort && e.is_out_of_space() => {
                self.unrecorded = true;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a best-effort save was skipped because the state disk was full.
    pub fn unrecorded(&self) -> bool {
        self.unrecorded
    }

    /// Closes the current phase (its time is recorded) and starts `phase`. The phase the
    /// record names already is not written again.
    pub fn phase(&mut self, phase: &str) -> Result<(), StateError> {
        if self.record.phase == phase {
            return Ok(());
        }
        self.close_phase();
        self.record.phase = phase.to_owned();
        self.save(Durability::Atomic)
    }

    fn close_phase(&mut self) {
        let ms = u64::try_from(self.phase_started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.record.timings.insert(self.record.phase.clone(), ms);
        self.phase_started = Instant::now();
    }

    /// Records extra timings (e.g. the backend's phases).
    pub fn add_timings(&mut self, timings: &[(String, u64)]) {
        for (k, v) in timings {
            self.record.timings.insert(k.clone(), *v);
        }
    }

    /// Records how the operation ended.
    pub fn finish(mut self, result: OperationResult) -> Result<OperationRecord, StateError> {
        self.close_phase();
        self.record.result = result;
        self.record.finished_ms = Some(now_ms());
        self.save(Durability::Atomic)?;
        Ok(self.record)
    }

    pub fn record(&self) -> &OperationRecord {
        &self.record
    }
}

#[cfg(test)]
mod tests;
