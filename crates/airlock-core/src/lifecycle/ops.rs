//! The lifecycle operations. Each mutating one runs, in order: lock (bounded wait) → mark a
//! dead predecessor `interrupted` → stale cleanup of this sandbox and, where their locks are
//! free, of every other one (PRODUCT L9: the same code `clean` runs) → its own work, recording
//! each phase in the operation record before the phase's first side effect.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{
    assess, diff_plans, Health, LifecycleError, OperationLog, Provision, ProvisionError, Stores,
};
use crate::atomic::Durability;
use crate::backend::{Backend, BackendError, Freed, Inspection, StopReport};
use crate::lock::LockError;
use crate::names::SandboxName;
use crate::ownership::{self, Liveness};
use crate::records::{
    now_ms, Epoch, OperationKind, OperationRecord, OperationResult, Phase, PlanSummary,
    SandboxPaths, SandboxRecord,
};
use crate::state::StateError;

/// Told when each phase starts (progress output; test crash points).
pub trait Observer {
    fn phase(&mut self, phase: &str);
}

/// Everything `up` needs, validated by the caller.
pub struct UpRequest<S> {
    pub name: SandboxName,
    pub project_root: PathBuf,
    pub plan: PlanSummary,
    pub spec: S,
    pub paths: SandboxPaths,
    pub lock_wait: Duration,
    /// Bound on waiting for the sandbox to become ready.
    pub timeout: Duration,
}

/// What `up` did.
#[derive(Debug)]
pub struct UpOutcome {
    pub record: SandboxRecord,
    /// An exact ready sandbox was reused (its epoch is unchanged).
    pub reused: bool,
    /// A previous operation found dead and marked `interrupted`.
    pub interrupted: Option<OperationRecord>,
    pub cleaned: CleanOutcome,
    /// The operation record as finished (phase timings).
    pub operation: OperationRecord,
    /// How long provisioning took, measured around every step (L3).
    pub provisioning: Duration,
}

/// What `down` did.
#[derive(Debug)]
pub struct DownOutcome {
    /// Health before `down`.
    pub was: Health,
    pub killed: bool,
    pub freed: Freed,
    pub interrupted: Option<OperationRecord>,
    pub cleaned: CleanOutcome,
}

/// What a cleanup pass did.
#[derive(Debug, Default)]
pub struct CleanOutcome {
    pub cleaned: Vec<(SandboxName, Health, Freed)>,
    /// Sandboxes left alone, with the reason (running, busy).
    pub skipped: Vec<(SandboxName, String)>,
    /// Paths nobody can prove are ours.
    pub unmanaged: Vec<(PathBuf, String)>,
}

/// `status` (PRODUCT L5).
#[derive(Debug)]
pub struct StatusReport {
    pub name: SandboxName,
    pub health: Health,
    pub record: Option<SandboxRecord>,
    /// The latest operation; a `running` one whose process is gone shows as `interrupted`.
    pub operation: Option<OperationRecord>,
    pub inspection: Option<Inspection>,
    pub warnings: Vec<String>,
    pub next: String,
}

fn random_hex(bytes: usize) -> Result<String, LifecycleError> {
    let mut buf = vec![0u8; bytes];
    getrandom::getrandom(&mut buf).map_err(|e| LifecycleError::Backend(BackendError::Random(e)))?;
    Ok(hex::encode(buf))
}

/// Health of a record seen by the holder of its lock: a `starting` record cannot have a live
/// creator (it would hold the lock), so it is stale.
fn assess_locked(record: &SandboxRecord, seen: &Inspection) -> Health {
    match record.phase {
        Phase::Starting => Health::Stale,
        Phase::Ready => assess(Some(record), None, Some(seen)),
    }
}

/// The record of a sandbox whose lock we hold, with its health; `None` without a record.
fn locked_state<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
) -> Result<Option<(crate::Record<SandboxRecord>, Health)>, LifecycleError> {
    let Some(rec) = stores.record(name)? else {
        return Ok(None);
    };
    // Health needs the proofs, not the disk use (`stop_measured` measures what it frees).
    let health = assess_locked(&rec.data, &backend.probe(&rec.data));
    Ok(Some((rec, health)))
}

/// Stops and removes one sandbox whose lock we hold, if it is not healthy. `Ok(None)`: absent
/// or healthy, nothing done.
fn cleanup_locked<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
    grace: Duration,
) -> Result<Option<(Health, Freed)>, LifecycleError> {
    let Some((rec, health)) = locked_state(stores, backend, name)? else {
        return Ok(None);
    };
    match health {
        Health::Ready | Health::Absent | Health::Starting => return Ok(None),
        Health::Stale | Health::Stopped | Health::Failed => {}
    }
    let freed = discard(stores, backend, name, rec, grace, health)?;
    Ok(Some((health, freed)))
}

/// Stop, remove, delete the record; a leftover that cannot be proven ours keeps the record
/// (so nothing is forgotten) and fails with [`LifecycleError::Blocked`].
fn discard<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
    rec: crate::Record<SandboxRecord>,
    grace: Duration,
    health: Health,
) -> Result<Freed, LifecycleError> {
    let stopped = stop_measured(backend, &rec.data, grace)?;
    remove_stopped(stores, backend, name, rec, health, stopped)
}

/// A stopped sandbox and the disk it used while it ran.
struct Stopped {
    report: StopReport,
    used: u64,
}

/// The first half of [`discard`]: measure, then stop.
fn stop_measured<B: Backend>(
    backend: &B,
    record: &SandboxRecord,
    grace: Duration,
) -> Result<Stopped, LifecycleError> {
    // Measured before stopping: the writable layer may vanish with the sandbox's processes.
    let used = backend.inspect(record).disk_bytes.unwrap_or(0);
    let report = backend.stop(record, grace)?;
    Ok(Stopped { report, used })
}

/// The second half of [`discard`]: remove what is proven ours, then forget the record.
fn remove_stopped<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
    rec: crate::Record<SandboxRecord>,
    health: Health,
    Stopped { report: stop, used }: Stopped,
) -> Result<Freed, LifecycleError> {
    let mut freed = backend.remove(&rec.data)?;
    freed.bytes = freed.bytes.max(used);
    let mut left: Vec<String> = stop.unmanaged.clone();
    left.extend(
        freed
            .left
            .iter()
            .map(|(p, why)| format!("{}: {why}", p.display())),
    );
    if !left.is_empty() {
        return Err(LifecycleError::Blocked {
            name: name.clone(),
            health,
            detail: left.join("; "),
        });
    }
    stores.sandboxes.remove(name.as_str(), rec.revision)?;
    Ok(freed)
}

/// Stale cleanup of every other sandbox whose lock is free right now.
fn cleanup_others<B: Backend>(
    stores: &Stores,
    backend: &B,
    except: Option<&SandboxName>,
    grace: Duration,
) -> Result<CleanOutcome, LifecycleError> {
    let mut out = CleanOutcome::default();
    for name in stores.names()? {
        if Some(&name) == except {
            continue;
        }
        let _guard = match stores.lock(&name, Duration::ZERO) {
            Ok(g) => g,
            Err(LifecycleError::Lock(LockError::Busy { pid, .. })) => {
                let holder = pid.map_or_else(|| "another command".into(), |p| format!("pid {p}"));
                out.skipped.push((name, format!("in use by {holder}")));
                continue;
            }
            Err(e) => return Err(e),
        };
        match clean_one(stores, backend, &name, grace) {
            Ok(Some((health, freed))) => out.cleaned.push((name, health, freed)),
            Ok(None) => {}
            Err(LifecycleError::Blocked { detail, .. }) => out.skipped.push((name, detail)),
            // One corrupt record must not stop the cleanup (or the `down`) of the others.
            Err(LifecycleError::State(StateError::Corrupt { path, .. })) => out.skipped.push((
                name,
                format!(
                    "its record {} is corrupt; inspect or remove it",
                    path.display()
                ),
            )),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Cleans one locked sandbox, recording a `clean` operation only when there is work.
fn clean_one<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
    grace: Duration,
) -> Result<Option<(Health, Freed)>, LifecycleError> {
    // Read and inspected once: we hold the lock, so the record cannot change before `discard`.
    let Some((rec, health)) = locked_state(stores, backend, name)? else {
        return Ok(None);
    };
    match health {
        Health::Ready | Health::Absent | Health::Starting => return Ok(None),
        Health::Stale | Health::Stopped | Health::Failed => {}
    }
    let (mut log, _) = OperationLog::begin(stores, name, OperationKind::Clean)?;
    log.phase("cleanup")?;
    match discard(stores, backend, name, rec, grace, health) {
        Ok(freed) => {
            log.finish(OperationResult::Succeeded)?;
            Ok(Some((health, freed)))
        }
        Err(e) => {
            log.finish(OperationResult::Failed {
                message: e.to_string(),
            })?;
            Err(e)
        }
    }
}

/// Grace period between the orderly stop request and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// `up`: reuse the exact ready sandbox, refuse a different one, or create it (PRODUCT L1).
pub fn up<B: Backend>(
    stores: &Stores,
    backend: &B,
    req: UpRequest<B::Spec>,
    obs: &mut dyn Observer,
    provision: &mut dyn Provision,
    cancelled: &dyn Fn() -> bool,
) -> Result<UpOutcome, LifecycleError> {
    obs.phase("lock");
    let _guard = stores.lock(&req.name, req.lock_wait)?;
    // The `running` mark is flushed before `up`'s first effect: with the cleanup when there is
    // anything to clean, else together with the sandbox's `starting` record (`write_starting`).
    let (mut log, interrupted) =
        OperationLog::begin_unflushed(stores, &req.name, OperationKind::Up, "cleanup")?;
    let result = up_locked(stores, backend, &req, &mut log, obs, cancelled).and_then(
        |(record, reused, cleaned)| {
            let started = Instant::now();
            provision_ready(&req.name, &record, !reused, &mut log, obs, provision)?;
            Ok((record, reused, cleaned, started.elapsed()))
        },
    );
    match result {
        Ok((record, reused, cleaned, provisioning)) => {
            let operation = log.finish(OperationResult::Succeeded)?;
            Ok(UpOutcome {
                record,
                reused,
                interrupted,
                cleaned,
                operation,
                provisioning,
            })
        }
        Err(e) => {
            let result = match &e {
                LifecycleError::Cancelled { .. } => OperationResult::Cancelled,
                LifecycleError::Lock(_)
                | LifecycleError::State(_)
                | LifecycleError::Backend(_)
                | LifecycleError::Ownership(_)
                | LifecycleError::CreateDir { .. }
                | LifecycleError::PlanChanged { .. }
                | LifecycleError::Blocked { .. }
                | LifecycleError::Provision { .. } => OperationResult::Failed {
                    message: e.to_string(),
                },
            };
            log.finish(result)?;
            Err(e)
        }
    }
}

type UpResult = (SandboxRecord, bool, CleanOutcome);

/// Provisioning of the ready sandbox, each step's phase recorded first (see `provision.rs`).
/// A failure or a cancellation leaves the sandbox record as it is: `ready`.
fn provision_ready(
    name: &SandboxName,
    record: &SandboxRecord,
    fresh: bool,
    log: &mut OperationLog<'_>,
    obs: &mut dyn Observer,
    provision: &mut dyn Provision,
) -> Result<(), LifecycleError> {
    let mut phase = |p: &str| {
        let phase = format!("provision:{p}");
        log.phase(&phase)?;
        obs.phase(&phase);
        Ok(())
    };
    match provision.provision(record, fresh, &mut phase) {
        Ok(()) => Ok(()),
        Err(ProvisionError::State(e)) => Err(e.into()),
        Err(ProvisionError::Cancelled { phase }) => Err(LifecycleError::Cancelled {
            left: format!(
                "sandbox {name} was already ready and is kept; provisioning stopped during \
                 {phase} and runs again on the next `airlock up`"
            ),
        }),
        Err(source @ ProvisionError::Failed { .. }) => Err(LifecycleError::Provision {
            name: name.clone(),
            source,
        }),
    }
}

fn up_locked<B: Backend>(
    stores: &Stores,
    backend: &B,
    req: &UpRequest<B::Spec>,
    log: &mut OperationLog<'_>,
    obs: &mut dyn Observer,
    cancelled: &dyn Fn() -> bool,
) -> Result<UpResult, LifecycleError> {
    let step = |log: &mut OperationLog<'_>, obs: &mut dyn Observer, phase: &str| {
        log.phase(phase)?;
        obs.phase(phase);
        if cancelled() {
            return Err(LifecycleError::Cancelled {
                left: "nothing was created".into(),
            });
        }
        Ok::<(), LifecycleError>(())
    };
    step(log, obs, "cleanup")?;
    // Without any record there is nothing to clean and nothing to reuse: the next effect is
    // the `starting` record, whose write the flush of the `running` mark overlaps.
    if !stores.names()?.is_empty() {
        log.flush()?;
    }
    let mut cleaned = cleanup_others(stores, backend, Some(&req.name), STOP_GRACE)?;
    if let Some((health, freed)) = cleanup_locked(stores, backend, &req.name, STOP_GRACE)? {
        cleaned.cleaned.push((req.name.clone(), health, freed));
    }
    if let Some(rec) = stores.record(&req.name)? {
        let mut differences = diff_plans(&rec.data.plan, &req.plan);
        // Another backend is another sandbox, however alike the plans.
        if rec.data.backend != backend.name() {
            differences.insert(
                0,
                crate::lifecycle::PlanDifference {
                    field: "backend".into(),
                    recorded: rec.data.backend.clone(),
                    planned: backend.name().into(),
                },
            );
        }
        if differences.is_empty() {
            return Ok((rec.data, true, cleaned));
        }
        return Err(LifecycleError::PlanChanged {
            name: req.name.clone(),
            differences,
        });
    }
    step(log, obs, "prepare")?;
    let mut record = new_record(backend, req)?;
    let mut revision = write_starting(stores, log, &req.name, &record)?;
    let created = create(
        stores,
        backend,
        req,
        log,
        obs,
        cancelled,
        &mut record,
        &mut revision,
    );
    match created {
        Ok(()) => Ok((record, false, cleaned)),
        Err(e) => {
            // Roll back whatever exists; the record names all of it.
            let _ = log.phase("rollback");
            obs.phase("rollback");
            let rec = crate::Record {
                revision,
                data: record,
            };
            match discard(stores, backend, &req.name, rec, STOP_GRACE, Health::Failed) {
                Ok(_) => Err(e),
                Err(rollback) => Err(LifecycleError::Blocked {
                    name: req.name.clone(),
                    health: Health::Failed,
                    detail: format!("{e}; rolling back failed: {rollback}"),
                }),
            }
        }
    }
}

/// Writes the `starting` record of a sandbox about to be created. Durable (R1): written before
/// anything exists on the host, it is what names every directory of this sandbox after any
/// crash, the machine's included. An unflushed `running` mark of `log` is flushed on another
/// thread meanwhile (two flushes waited for at once: on a busy disk each waits for a journal
/// commit), and both are on disk when this returns.
fn write_starting(
    stores: &Stores,
    log: &mut OperationLog<'_>,
    name: &SandboxName,
    record: &SandboxRecord,
) -> Result<u64, LifecycleError> {
    let Some(path) = log.unflushed()? else {
        return Ok(stores.sandboxes.write(name.as_str(), None, record)?);
    };
    let (written, flushed) = std::thread::scope(|scope| {
        let flusher = scope.spawn(move || {
            let flushed = crate::atomic::flush(&path);
            // The unit tests' journal of flushes is per thread: it goes back with the result.
            #[cfg(test)]
            let flushed = (flushed, crate::atomic::journal::take());
            flushed
        });
        let written = stores.sandboxes.write(name.as_str(), None, record);
        let flushed = flusher
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (written, flushed)
    });
    #[cfg(test)]
    let flushed = {
        let (flushed, journal) = flushed;
        crate::atomic::journal::extend(journal);
        flushed
    };
    flushed.map_err(StateError::from)?;
    log.flushed();
    Ok(written?)
}

/// The record of a sandbox about to be created: `starting`, a fresh epoch, no owner yet.
fn new_record<B: Backend>(
    backend: &B,
    req: &UpRequest<B::Spec>,
) -> Result<SandboxRecord, LifecycleError> {
    Ok(SandboxRecord {
        name: req.name.clone(),
        project_root: req.project_root.clone(),
        backend: backend.name().into(),
        plan: req.plan.clone(),
        epoch: Epoch {
            instance: random_hex(8)?,
            boot_nonce: random_hex(8)?,
        },
        phase: Phase::Starting,
        // A keeper already running (parked until `start`) is named from the first revision.
        keeper: backend.owner_ahead(&req.paths),
        guest: None,
        created_ms: now_ms(),
        ready_ms: None,
        paths: req.paths.clone(),
        backend_data: serde_json::Value::Null,
    })
}

#[allow(clippy::too_many_arguments)]
fn create<B: Backend>(
    stores: &Stores,
    backend: &B,
    req: &UpRequest<B::Spec>,
    log: &mut OperationLog<'_>,
    obs: &mut dyn Observer,
    cancelled: &dyn Fn() -> bool,
    record: &mut SandboxRecord,
    revision: &mut u64,
) -> Result<(), LifecycleError> {
    let gone = |what: &str| LifecycleError::Cancelled {
        left: format!("cancelled while {what}; nothing is left running"),
    };
    backend.prepare(record, &req.spec)?;
    log.phase("start")?;
    obs.phase("start");
    if cancelled() {
        return Err(gone("preparing"));
    }
    let mut starting = backend.start(record)?;
    // What a killed `up` leaves must name the keeper. One the `starting` revision named
    // already (`Backend::owner_ahead`) needs no revision of its own; else this one is atomic,
    // not durable: every process sees the rename at once, while a machine crash ends the
    // keeper anyway, and the durable `starting` revision already names every directory (see
    // the lifecycle module docs).
    if record.keeper.as_ref() != Some(starting.owner()) {
        record.keeper = Some(starting.owner().clone());
        *revision = stores.sandboxes.write_with(
            req.name.as_str(),
            Some(*revision),
            record,
            Durability::Atomic,
        )?;
    }
    log.phase("wait")?;
    obs.phase("wait");
    let ready = match starting.wait(Instant::now() + req.timeout, cancelled) {
        Ok(r) => r,
        Err(BackendError::Cancelled { while_doing }) => return Err(gone(while_doing)),
        Err(e) => return Err(e.into()),
    };
    drop(starting);
    log.add_timings(&ready.timings);
    log.phase("record")?;
    obs.phase("record");
    record.phase = Phase::Ready;
    record.guest = Some(ready.guest);
    record.backend_data = ready.backend_data;
    record.ready_ms = Some(now_ms());
    // Atomic, not durable: after a machine crash the sandbox is gone whatever this says, and
    // the `starting` revision (durable) leads the next command to the same cleanup.
    *revision = stores.sandboxes.write_with(
        req.name.as_str(),
        Some(*revision),
        record,
        Durability::Atomic,
    )?;
    Ok(())
}

/// `down` (PRODUCT L6): idempotent, bounded, ownership-checked.
///
/// Its `running` mark must be on disk before its first effect (L8: a machine crash mid-`down`
/// is reported). It is written without waiting and names the operation's first phase under
/// the lock: `cleanup` when other sandboxes are recorded (flushed at once, as the cleanup may
/// act on them), else `stop`, flushed on another thread while the sandbox is read and
/// measured, which has no effect. Each write of the operation is a rename over its file,
/// which costs a forced writeback on ext4: no revision is written for a phase with no work.
pub fn down<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
    lock_wait: Duration,
) -> Result<DownOutcome, LifecycleError> {
    let _guard = stores.lock(name, lock_wait)?;
    let others = stores.names()?.iter().any(|n| n != name);
    let first = if others { "cleanup" } else { "stop" };
    // Best effort: `down` must work on a full state disk (9.11).
    let (mut log, interrupted) =
        OperationLog::begin_best_effort_unflushed(stores, name, OperationKind::Down, first)?;
    let result = (|| -> Result<(Health, bool, Freed, CleanOutcome), LifecycleError> {
        let mut cleaned = CleanOutcome::default();
        if others {
            log.flush()?;
            cleaned = cleanup_others(stores, backend, Some(name), STOP_GRACE)?;
            log.phase("stop")?;
        }
        let (state, flushed) = read_while_flushing(&log, || -> Result<_, LifecycleError> {
            let Some((rec, was)) = locked_state(stores, backend, name)? else {
                return Ok(None);
            };
            // Measured before stopping: the writable layer may vanish with the sandbox.
            let used = backend.inspect(&rec.data).disk_bytes.unwrap_or(0);
            Ok(Some((rec, was, used)))
        })?;
        log.flushed_with(flushed)?;
        let Some((rec, was, used)) = state? else {
            return Ok((Health::Absent, false, Freed::default(), cleaned));
        };
        let report = backend.stop(&rec.data, STOP_GRACE)?;
        let stopped = Stopped { report, used };
        log.phase("remove")?;
        let killed = stopped.report.killed;
        let freed = remove_stopped(stores, backend, name, rec, was, stopped)?;
        Ok((was, killed, freed, cleaned))
    })();
    match result {
        Ok((was, killed, freed, cleaned)) => {
            log.finish(OperationResult::Succeeded)?;
            Ok(DownOutcome {
                was,
                killed,
                freed,
                interrupted,
                cleaned,
            })
        }
        Err(e) => {
            log.finish(OperationResult::Failed {
                message: e.to_string(),
            })?;
            Err(e)
        }
    }
}

/// Runs `read` (which must have no effect) while the unflushed `running` mark of `log`, if
/// any, is flushed on another thread; `read`'s result and the flush's, for
/// [`OperationLog::flushed_with`].
fn read_while_flushing<T>(
    log: &OperationLog<'_>,
    read: impl FnOnce() -> T,
) -> Result<(T, Result<(), StateError>), LifecycleError> {
    let Some(path) = log.unflushed()? else {
        return Ok((read(), Ok(())));
    };
    Ok(std::thread::scope(|scope| {
        let flusher = scope.spawn(move || {
            let flushed = crate::atomic::flush(&path).map_err(StateError::from);
            // The unit tests' journal of flushes is per thread: it goes back with the result.
            #[cfg(test)]
            let flushed = (flushed, crate::atomic::journal::take());
            flushed
        });
        let value = read();
        let flushed = flusher
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        #[cfg(test)]
        let flushed = {
            let (flushed, journal) = flushed;
            crate::atomic::journal::extend(journal);
            flushed
        };
        (value, flushed)
    }))
}

/// `clean` (PRODUCT L9, R2): every inactive sandbox whose lock is free, plus a report of what
/// lies under the backend's roots that no record names.
pub fn clean<B: Backend>(stores: &Stores, backend: &B) -> Result<CleanOutcome, LifecycleError> {
    let mut out = cleanup_others(stores, backend, None, STOP_GRACE)?;
    let mut records = Vec::new();
    for name in stores.names()? {
        match stores.record(&name) {
            Ok(Some(rec)) => records.push(rec.data),
            Ok(None) | Err(StateError::Corrupt { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let known: Vec<&SandboxRecord> = records.iter().collect();
    for (path, marker) in backend.orphans(&known) {
        let why = match marker {
            Some(m) => format!("its marker names {m:?}, which no record knows"),
            None => "it carries no ownership marker".to_owned(),
        };
        out.unmanaged.push((path, why));
    }
    Ok(out)
}

/// `status` (PRODUCT L5): read-only; takes no lock and changes nothing.
pub fn status<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
) -> Result<StatusReport, LifecycleError> {
    report(stores, backend, name, B::inspect)
}

/// [`status`] through [`Backend::probe`]: the same health, proven the same way, without the
/// measurements (disk use) only `status` shows; for commands that use a ready sandbox.
pub fn readiness<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
) -> Result<StatusReport, LifecycleError> {
    report(stores, backend, name, B::probe)
}

fn report<B: Backend>(
    stores: &Stores,
    backend: &B,
    name: &SandboxName,
    inspect: fn(&B, &SandboxRecord) -> crate::backend::Inspection,
) -> Result<StatusReport, LifecycleError> {
    let record = stores.record(name)?.map(|r| r.data);
    let mut operation = stores.operation(name)?.map(|r| r.data);
    let inspection = record.as_ref().map(|r| inspect(backend, r));
    let health = assess(record.as_ref(), operation.as_ref(), inspection.as_ref());
    let mut warnings = Vec::new();
    if let Some(op) = operation.as_mut() {
        if op.result == OperationResult::Running
            && ownership::check_process(&op.process) != Liveness::Ours
        {
            op.result = OperationResult::Interrupted;
            warnings.push(format!(
                "the last `{}` (pid {}) died during phase {}; the next lifecycle command cleans up after it",
                op.kind.as_str(),
                op.process.pid,
                op.phase
            ));
        }
    }
    if let Some(note) = inspection.as_ref().and_then(|i| i.exit_note.clone()) {
        warnings.push(note);
    }
    if health == Health::Ready {
        warnings.extend(inspection.iter().flat_map(|i| i.warnings.iter().cloned()));
    }
    if health == Health::Failed {
        warnings.push("the sandbox's PID 1 is gone while its keeper still runs".into());
    }
    let incompatible = inspection.as_ref().and_then(|i| i.incompatible.clone());
    if let Some(why) = &incompatible {
        warnings.push(format!(
            "this sandbox was started by another airlock version: {why}"
        ));
    }
    let next = match health {
        Health::Stale if incompatible.is_some() => {
            "airlock down (stops the sandbox started by the other airlock version), then airlock up"
        }
        Health::Ready => "airlock attach, airlock exec -- CMD, or airlock down",
        Health::Starting => "wait for the running `airlock up` to finish",
        Health::Absent => "airlock up",
        Health::Stopped | Health::Failed | Health::Stale => {
            "airlock up (cleans up what is left and starts a new sandbox), or airlock clean"
        }
    };
    Ok(StatusReport {
        name: name.clone(),
        health,
        record,
        operation,
        inspection,
        warnings,
        next: next.to_owned(),
    })
}

/// One sandbox of [`list`]: its status, or a record that cannot be read as one.
#[derive(Debug)]
pub enum Listed {
    /// A sandbox whose records parse.
    Sandbox(Box<StatusReport>),
    /// A sandbox whose record or operation file is not a valid record (R4: `ls` names it
    /// `corrupt` and goes on with the rest).
    Corrupt {
        /// The sandbox.
        name: SandboxName,
        /// The file that does not parse.
        path: PathBuf,
        /// Why.
        detail: String,
    },
}

/// The status of every sandbox, in name order. A corrupt record is one [`Listed::Corrupt`]
/// entry, never the failure of the whole list; any other error fails it.
pub fn list<B: Backend>(stores: &Stores, backend: &B) -> Result<Vec<Listed>, LifecycleError> {
    let mut out = Vec::new();
    for name in stores.names()? {
        match status(stores, backend, &name) {
            Ok(report) => out.push(Listed::Sandbox(Box::new(report))),
            Err(LifecycleError::State(StateError::Corrupt { path, source })) => {
                out.push(Listed::Corrupt {
                    name,
                    path,
                    detail: source.to_string(),
                })
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
