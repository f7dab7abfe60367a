use std::path::PathBuf;

use super::*;
use crate::records::{MappingSummary, PlanSummary};

fn plan() -> PlanSummary {
    PlanSummary {
        image: "host".into(),
        workspaces: vec![MappingSummary {
            host: "/p".into(),
            sandbox: "/p".into(),
            writable: true,
        }],
        mounts: vec![MappingSummary {
            host: "/data".into(),
            sandbox: "/data".into(),
            writable: false,
        }],
        home: PathBuf::from("/home/u"),
        memory_mb: Some(8192),
        pids_max: Some(4096),
        cpus: None,
    }
}

#[test]
fn identical_plans_have_no_differences() {
    assert!(diff_plans(&plan(), &plan()).is_empty());
}

#[test]
fn a_mount_made_writable_is_named_as_that_mount() {
    let mut changed = plan();
    changed.mounts[0].writable = true;
    let diffs = diff_plans(&plan(), &changed);
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].field, "mount /data");
    assert!(diffs[0].recorded.contains("read-only"));
    assert!(diffs[0].planned.contains("read-write"));
}

#[test]
fn added_removed_mounts_and_limits_each_count() {
    let mut changed = plan();
    changed.mounts.clear();
    changed.mounts.push(MappingSummary {
        host: "/other".into(),
        sandbox: "/other".into(),
        writable: false,
    });
    changed.memory_mb = Some(512);
    let fields: Vec<String> = diff_plans(&plan(), &changed)
        .into_iter()
        .map(|d| d.field)
        .collect();
    assert_eq!(fields, ["memory_mb", "mount /data", "mount /other"]);
}

#[test]
fn no_record_is_absent() {
    assert_eq!(assess(None, None, None), Health::Absent);
}

// ---- T1: the orchestration against a fake backend (no processes are started). ----

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use crate::backend::{
    Backend, BackendError, Channel, Freed, Inspection, Ready, Starting, StopReport,
};
use crate::names::SandboxName;
use crate::ownership::{process_identity, Liveness};
use crate::records::{ProcessIdentity, SandboxPaths};

/// What the fake's wait does.
#[derive(Clone, Copy, PartialEq)]
enum WaitOutcome {
    Ready,
    Fail,
    Cancel,
}

struct Fake {
    /// Whether the "sandbox" runs (inspect proves this test process as owner and guest).
    running: Cell<bool>,
    wait: Cell<WaitOutcome>,
    /// Paths `remove` cannot prove are ours.
    left: RefCell<Vec<(PathBuf, String)>>,
    calls: RefCell<Vec<&'static str>>,
    /// The owner speaks another host protocol version.
    incompatible: Cell<bool>,
    /// The backend's name (what `up` records and compares).
    name: Cell<&'static str>,
    /// Its owner runs ahead of `start` (`Backend::owner_ahead`).
    parked: Cell<bool>,
    /// This thread's journal of writes as each `stop` found it.
    journal_at_stop: RefCell<Vec<Vec<(PathBuf, crate::atomic::Durability)>>>,
}

impl Fake {
    fn new() -> Fake {
        Fake {
            running: Cell::new(false),
            wait: Cell::new(WaitOutcome::Ready),
            left: RefCell::new(Vec::new()),
            calls: RefCell::new(Vec::new()),
            incompatible: Cell::new(false),
            name: Cell::new("fake"),
            parked: Cell::new(false),
            journal_at_stop: RefCell::new(Vec::new()),
        }
    }
}

fn me() -> ProcessIdentity {
    process_identity(std::process::id()).unwrap()
}

/// An identity no live process has.
fn dead() -> ProcessIdentity {
    ProcessIdentity {
        pid: u32::MAX - 1,
        start_time: 1,
        cmdline: vec!["gone".into()],
    }
}

struct FakeStarting<'a> {
    fake: &'a Fake,
    owner: ProcessIdentity,
}

impl Starting for FakeStarting<'_> {
    fn owner(&self) -> &ProcessIdentity {
        &self.owner
    }
    fn wait(&mut self, _: Instant, _: &dyn Fn() -> bool) -> Result<Ready, BackendError> {
        match self.fake.wait.get() {
            WaitOutcome::Ready => {
                self.fake.running.set(true);
                Ok(Ready {
                    guest: me(),
                    backend_data: serde_json::json!({"fake": true}),
                    timings: vec![("backend.boot".into(), 1)],
                })
            }
            WaitOutcome::Fail => Err(BackendError::Start(crate::backend::StartFailure {
                class: crate::backend::FailureClass::Refused,
                code: "fake.refused".into(),
                message: "the fake refused".into(),
                hint: None,
            })),
            WaitOutcome::Cancel => Err(BackendError::Cancelled {
                while_doing: "waiting",
            }),
        }
    }
}

impl Backend for Fake {
    type Spec = ();
    fn name(&self) -> &'static str {
        self.name.get()
    }
    fn prepare(&self, _: &SandboxRecord, _: &()) -> Result<(), BackendError> {
        self.calls.borrow_mut().push("prepare");
        Ok(())
    }
    fn owner_ahead(&self, _: &SandboxPaths) -> Option<ProcessIdentity> {
        self.parked.get().then(me)
    }
    fn start(&self, _: &SandboxRecord) -> Result<Box<dyn Starting + '_>, BackendError> {
        self.calls.borrow_mut().push("start");
        Ok(Box::new(FakeStarting {
            fake: self,
            owner: me(),
        }))
    }
    fn inspect(&self, _: &SandboxRecord) -> Inspection {
        let l = if self.running.get() {
            Liveness::Ours
        } else {
            Liveness::Gone
        };
        Inspection {
            owner: l.clone(),
            guest: l,
            disk_bytes: Some(4096),
            exit_note: None,
            incompatible: self
                .incompatible
                .get()
                .then(|| "host protocol 99, this airlock speaks 1".to_owned()),
            warnings: Vec::new(),
        }
    }
    fn stop(&self, _: &SandboxRecord, _: Duration) -> Result<StopReport, BackendError> {
        self.calls.borrow_mut().push("stop");
        self.journal_at_stop
            .borrow_mut()
            .push(crate::atomic::journal::peek());
        self.running.set(false);
        Ok(StopReport::default())
    }
    fn remove(&self, _: &SandboxRecord) -> Result<Freed, BackendError> {
        self.calls.borrow_mut().push("remove");
        Ok(Freed {
            removed: vec![],
            bytes: 10,
            left: self.left.borrow().clone(),
        })
    }
    fn connect(&self, _: &SandboxRecord) -> Result<Channel, BackendError> {
        unreachable!("not used by the orchestration")
    }
    fn orphans(&self, _: &[&SandboxRecord]) -> Vec<(PathBuf, Option<String>)> {
        vec![(PathBuf::from("/x/stray"), None)]
    }
}

struct NoObserver;
impl Observer for NoObserver {
    fn phase(&mut self, _: &str) {}
}

struct World {
    _tmp: tempfile::TempDir,
    stores: Stores,
    name: SandboxName,
}

fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let stores = Stores::open(tmp.path()).unwrap();
    World {
        _tmp: tmp,
        stores,
        name: SandboxName::parse("proj-1").unwrap(),
    }
}

fn request(w: &World, plan: PlanSummary) -> UpRequest<()> {
    UpRequest {
        name: w.name.clone(),
        project_root: "/p".into(),
        plan,
        spec: (),
        paths: SandboxPaths {
            state_dir: "/s".into(),
            runtime_dir: "/r".into(),
        },
        lock_wait: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    }
}

fn up_with(w: &World, fake: &Fake, plan: PlanSummary) -> Result<UpOutcome, LifecycleError> {
    up(
        &w.stores,
        fake,
        request(w, plan),
        &mut NoObserver,
        &mut NoProvision,
        &|| false,
    )
}

#[test]
fn up_records_ready_with_owner_and_guest_then_reuses_with_the_same_epoch() {
    let w = world();
    let fake = Fake::new();
    let first = up_with(&w, &fake, plan()).unwrap();
    assert!(!first.reused);
    let rec = w.stores.record(&w.name).unwrap().unwrap().data;
    assert_eq!(rec.phase, crate::records::Phase::Ready);
    assert_eq!(rec.keeper, Some(me()));
    assert_eq!(rec.backend, "fake");
    assert!(first.operation.timings.contains_key("backend.boot"));
    let second = up_with(&w, &fake, plan()).unwrap();
    assert!(second.reused);
    assert_eq!(second.record.epoch, first.record.epoch);
    assert_eq!(*fake.calls.borrow(), ["prepare", "start"]);
    let st = status(&w.stores, &fake, &w.name).unwrap();
    assert_eq!(st.health, Health::Ready);
}

/// The writes of one fresh `up` (path and durability, in order), and the paths of its
/// operation and sandbox records.
fn fresh_up_writes() -> (Vec<(PathBuf, crate::atomic::Durability)>, PathBuf, PathBuf) {
    use crate::atomic::journal;
    let w = world();
    let fake = Fake::new();
    journal::take();
    up_with(&w, &fake, plan()).unwrap();
    let writes = journal::take();
    let op = w.stores.operations.path_of(w.name.as_str()).unwrap();
    let rec = w.stores.sandboxes.path_of(w.name.as_str()).unwrap();
    (writes, op, rec)
}

#[test]
fn up_flushes_only_the_running_mark_and_the_starting_record_to_disk() {
    use crate::atomic::Durability;
    let (writes, op, rec) = fresh_up_writes();
    let durable: Vec<&PathBuf> = writes
        .iter()
        .filter(|(_, d)| *d == Durability::Durable)
        .map(|(p, _)| p)
        .collect();
    // What a machine crash must keep: the operation marked running (L8) and the record naming
    // the sandbox before anything of it exists; both flushes are waited for at once.
    assert_eq!(durable, [&rec, &op], "{writes:?}");
    // Both are on disk before the sandbox is started (its `start` phase is the next write).
    let flushed_at = writes
        .iter()
        .position(|(p, d)| p == &op && *d == Durability::Durable)
        .unwrap();
    let next = &writes[flushed_at + 1..];
    assert!(
        next.first().is_some_and(|(p, _)| p == &op)
            && next.iter().all(|(_, d)| *d == Durability::Atomic),
        "{writes:?}"
    );
    // Every other revision is still written (a killed `up` is read back exactly), atomically.
    let rewrites = |path: &PathBuf| {
        writes
            .iter()
            .filter(|(p, d)| p == path && *d == Durability::Atomic)
            .count()
    };
    assert_eq!(rewrites(&rec), 2, "keeper, ready: {writes:?}");
    assert!(rewrites(&op) >= 6, "every phase is recorded: {writes:?}");
}

#[test]
fn a_keeper_running_ahead_is_named_by_the_durable_starting_record_and_not_written_again() {
    use crate::atomic::{journal, Durability};
    let w = world();
    let fake = Fake::new();
    fake.parked.set(true);
    journal::take();
    let out = up_with(&w, &fake, plan()).unwrap();
    let writes = journal::take();
    let rec = w.stores.sandboxes.path_of(w.name.as_str()).unwrap();
    let revisions: Vec<_> = writes.iter().filter(|(p, _)| p == &rec).collect();
    // `starting` (flushed, naming the keeper), then `ready`: no revision for the keeper alone.
    assert_eq!(
        revisions,
        [
            &(rec.clone(), Durability::Durable),
            &(rec, Durability::Atomic)
        ],
        "{writes:?}"
    );
    assert_eq!(out.record.keeper, Some(me()));
    assert_eq!(*fake.calls.borrow(), ["prepare", "start"]);
}

#[test]
fn a_fresh_up_writes_its_running_mark_in_the_cleanup_phase_not_twice() {
    let (writes, op, rec) = fresh_up_writes();
    let starting = writes.iter().position(|(p, _)| p == &rec).unwrap();
    // The `running` mark (already in `cleanup`), then `prepare`: each write of the operation
    // is a rename over its file, which costs a forced writeback on ext4.
    let before: Vec<_> = writes[..starting]
        .iter()
        .filter(|(p, _)| p == &op)
        .collect();
    assert_eq!(before.len(), 2, "{writes:?}");
}

#[test]
fn an_up_reusing_its_sandbox_flushes_its_running_mark_before_the_cleanup() {
    use crate::atomic::{journal, Durability};
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    journal::take();
    let again = up_with(&w, &fake, plan()).unwrap();
    assert!(again.reused);
    let writes = journal::take();
    let op = w.stores.operations.path_of(w.name.as_str()).unwrap();
    // A record exists, so the cleanup may act (and provisioning follows): the `running` mark
    // is on disk first, and it is this `up`'s only flushed write.
    let durable: Vec<usize> = writes
        .iter()
        .enumerate()
        .filter(|(_, (_, d))| *d == Durability::Durable)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(durable.len(), 1, "{writes:?}");
    assert_eq!(writes[durable[0]].0, op, "{writes:?}");
    let phases_before = writes[..durable[0]]
        .iter()
        .filter(|(p, _)| p == &op)
        .count();
    assert_eq!(
        phases_before, 1,
        "running (in the cleanup phase already), then the flush: {writes:?}"
    );
}

#[test]
fn status_of_a_ready_sandbox_points_to_attach_its_session() {
    // `up` ends attached to a session; after detaching, `status` must say how to get back.
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    let st = status(&w.stores, &fake, &w.name).unwrap();
    assert_eq!(st.health, Health::Ready);
    assert!(st.next.contains("airlock attach"), "{}", st.next);
    assert!(st.next.contains("airlock exec"), "{}", st.next);
}

#[test]
fn a_failed_start_is_rolled_back_and_leaves_no_record() {
    let w = world();
    let fake = Fake::new();
    fake.wait.set(WaitOutcome::Fail);
    let err = up_with(&w, &fake, plan()).unwrap_err();
    assert!(matches!(err, LifecycleError::Backend(_)), "{err}");
    assert!(w.stores.record(&w.name).unwrap().is_none());
    assert_eq!(*fake.calls.borrow(), ["prepare", "start", "stop", "remove"]);
    let op = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert!(matches!(op.result, OperationResult::Failed { .. }));
    assert_eq!(op.phase, "rollback");
}

#[test]
fn a_cancelled_start_is_rolled_back_and_recorded_as_cancelled() {
    let w = world();
    let fake = Fake::new();
    fake.wait.set(WaitOutcome::Cancel);
    let err = up_with(&w, &fake, plan()).unwrap_err();
    assert!(matches!(err, LifecycleError::Cancelled { .. }), "{err}");
    assert!(w.stores.record(&w.name).unwrap().is_none());
    let op = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert_eq!(op.result, OperationResult::Cancelled);
}

#[test]
fn a_different_plan_is_refused_and_the_running_sandbox_is_kept() {
    let w = world();
    let fake = Fake::new();
    let first = up_with(&w, &fake, plan()).unwrap();
    let mut other = plan();
    other.memory_mb = Some(512);
    match up_with(&w, &fake, other).unwrap_err() {
        LifecycleError::PlanChanged { differences, .. } => {
            assert_eq!(differences.len(), 1);
            assert_eq!(differences[0].field, "memory_mb");
        }
        e => panic!("unexpected {e}"),
    }
    let rec = w.stores.record(&w.name).unwrap().unwrap().data;
    assert_eq!(rec.epoch, first.record.epoch);
    assert!(fake.running.get());
}

#[test]
fn up_with_another_backend_is_refused_naming_the_backend_and_keeps_the_sandbox() {
    let w = world();
    let fake = Fake::new();
    let first = up_with(&w, &fake, plan()).unwrap();
    // The same plan, asked of another backend (`up --backend vm` on a linux sandbox).
    fake.name.set("vm");
    match up_with(&w, &fake, plan()).unwrap_err() {
        LifecycleError::PlanChanged { differences, .. } => {
            assert_eq!(differences.len(), 1, "{differences:?}");
            assert_eq!(differences[0].field, "backend");
            assert_eq!(differences[0].recorded, "fake");
            assert_eq!(differences[0].planned, "vm");
        }
        e => panic!("unexpected {e}"),
    }
    let rec = w.stores.record(&w.name).unwrap().unwrap().data;
    assert_eq!(rec.epoch, first.record.epoch);
    assert!(fake.running.get());
}

#[test]
fn a_dead_running_operation_is_marked_interrupted_and_its_sandbox_cleaned() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    // A crash: the sandbox died and an `up` died mid-flight.
    fake.running.set(false);
    let mut op = w.stores.operation(&w.name).unwrap().unwrap();
    op.data.result = OperationResult::Running;
    op.data.process = dead();
    op.data.phase = "wait".into();
    w.stores
        .operations
        .write(w.name.as_str(), Some(op.revision), &op.data)
        .unwrap();
    let st = status(&w.stores, &fake, &w.name).unwrap();
    assert_eq!(st.health, Health::Stale);
    assert_eq!(
        st.operation.as_ref().unwrap().result,
        OperationResult::Interrupted
    );
    let again = up_with(&w, &fake, plan()).unwrap();
    assert!(!again.reused);
    assert_eq!(again.interrupted.unwrap().phase, "wait");
    assert_eq!(again.cleaned.cleaned.len(), 1);
    assert_eq!(again.cleaned.cleaned[0].1, Health::Stale);
}

#[test]
fn a_live_sandbox_of_another_airlock_version_is_stale_names_down_and_down_stops_it() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    fake.incompatible.set(true);
    let st = status(&w.stores, &fake, &w.name).unwrap();
    assert_eq!(st.health, Health::Stale);
    assert!(st.next.starts_with("airlock down"), "{}", st.next);
    assert!(
        st.warnings
            .iter()
            .any(|w| w.contains("another airlock version")),
        "{:?}",
        st.warnings
    );
    let out = down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap();
    assert_eq!(out.was, Health::Stale);
    assert!(fake.calls.borrow().contains(&"stop"), "{:?}", fake.calls);
    assert!(!fake.running.get());
    assert!(w.stores.record(&w.name).unwrap().is_none());
}

#[test]
fn down_keeps_the_record_when_a_leftover_cannot_be_proven_ours() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    fake.left
        .borrow_mut()
        .push(("/r".into(), "it carries no ownership marker".into()));
    let err = down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, LifecycleError::Blocked { .. }), "{err}");
    assert!(w.stores.record(&w.name).unwrap().is_some());
    fake.left.borrow_mut().clear();
    let out = down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap();
    assert_eq!(out.was, Health::Stale);
    assert!(w.stores.record(&w.name).unwrap().is_none());
    let again = down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap();
    assert_eq!(again.was, Health::Absent);
}

#[test]
fn clean_skips_ready_sandboxes_and_reports_orphans() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    let out = clean(&w.stores, &fake).unwrap();
    assert!(out.cleaned.is_empty());
    assert_eq!(out.unmanaged.len(), 1);
    assert!(fake.running.get(), "clean touched a ready sandbox");
}

#[test]
fn down_stops_a_ready_sandbox_once_and_removes_it() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    let out = down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap();
    assert_eq!(out.was, Health::Ready);
    assert_eq!(out.freed.bytes, 4096, "the size measured before stopping");
    assert!(w.stores.record(&w.name).unwrap().is_none());
    assert_eq!(*fake.calls.borrow(), ["prepare", "start", "stop", "remove"]);
    let op = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert_eq!(op.result, OperationResult::Succeeded);
    assert_eq!(op.phase, "remove");
}

#[test]
fn down_flushes_its_running_mark_before_it_stops_the_sandbox_and_records_no_empty_phase() {
    use crate::atomic::{journal, Durability};
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    journal::take();
    down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap();
    let op = w.stores.operations.path_of(w.name.as_str()).unwrap();
    let at_stop = fake.journal_at_stop.borrow()[0].clone();
    let before: Vec<_> = at_stop.iter().filter(|(p, _)| p == &op).collect();
    // L8: the `running` mark is on disk before the sandbox is touched. With no other sandbox
    // to clean it names `stop` at once: each revision is a rename over the file, which costs
    // a forced writeback on ext4, and a `cleanup` phase would have nothing to do.
    assert_eq!(
        before,
        [
            &(op.clone(), Durability::Atomic),
            &(op.clone(), Durability::Durable)
        ],
        "{at_stop:?}"
    );
    let done = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert_eq!(done.result, OperationResult::Succeeded);
    assert_eq!(done.phase, "remove");
    assert!(done.timings.contains_key("stop"), "{:?}", done.timings);
}

#[test]
fn down_flushes_its_running_mark_before_it_cleans_other_sandboxes() {
    use crate::atomic::{journal, Durability};
    let w = world();
    let fake = Fake::new();
    let mut other = up_with(&w, &fake, plan()).unwrap().record;
    other.name = SandboxName::parse("other-1").unwrap();
    w.stores.sandboxes.write("other-1", None, &other).unwrap();
    // Both stale: the cleanup stops and removes the other one first.
    fake.running.set(false);
    journal::take();
    let out = down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap();
    assert_eq!(out.cleaned.cleaned.len(), 1, "{:?}", out.cleaned);
    let op = w.stores.operations.path_of(w.name.as_str()).unwrap();
    let first_stop = fake.journal_at_stop.borrow()[0].clone();
    assert!(
        first_stop.contains(&(op, Durability::Durable)),
        "{first_stop:?}"
    );
    let done = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert!(done.timings.contains_key("cleanup"), "{:?}", done.timings);
}

#[test]
fn clean_removes_a_stale_sandbox_and_records_a_clean_operation() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    fake.running.set(false);
    let out = clean(&w.stores, &fake).unwrap();
    assert_eq!(out.cleaned.len(), 1);
    let (name, health, freed) = &out.cleaned[0];
    assert_eq!(name, &w.name);
    assert_eq!(*health, Health::Stale);
    assert_eq!(freed.bytes, 4096, "the size measured before stopping");
    assert!(w.stores.record(&w.name).unwrap().is_none());
    let op = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert_eq!(op.kind, OperationKind::Clean);
    assert_eq!(op.result, OperationResult::Succeeded);
    assert_eq!(*fake.calls.borrow(), ["prepare", "start", "stop", "remove"]);
}

#[test]
fn health_follows_the_proofs_not_the_record() {
    let w = world();
    let fake = Fake::new();
    let out = up_with(&w, &fake, plan()).unwrap();
    let rec = out.record;
    let seen = |owner: Liveness, guest: Liveness, note: Option<&str>| Inspection {
        owner,
        guest,
        disk_bytes: None,
        exit_note: note.map(str::to_owned),
        incompatible: None,
        warnings: Vec::new(),
    };
    let h = |i: Inspection| assess(Some(&rec), None, Some(&i));
    assert_eq!(h(seen(Liveness::Ours, Liveness::Ours, None)), Health::Ready);
    assert_eq!(
        h(seen(Liveness::Ours, Liveness::Gone, None)),
        Health::Failed
    );
    assert_eq!(
        h(seen(Liveness::Gone, Liveness::Gone, Some("pid 1 exited"))),
        Health::Stopped
    );
    assert_eq!(h(seen(Liveness::Gone, Liveness::Gone, None)), Health::Stale);
    assert_eq!(
        h(seen(Liveness::Reused, Liveness::Ours, None)),
        Health::Stale
    );
    let mut starting = rec.clone();
    starting.phase = crate::records::Phase::Starting;
    let running_op = crate::records::OperationRecord {
        kind: crate::records::OperationKind::Up,
        started_ms: 0,
        finished_ms: None,
        phase: "wait".into(),
        result: OperationResult::Running,
        timings: Default::default(),
        process: me(),
    };
    let ours = seen(Liveness::Ours, Liveness::Gone, None);
    assert_eq!(
        assess(Some(&starting), Some(&running_op), Some(&ours)),
        Health::Starting
    );
    let mut dead_op = running_op;
    dead_op.process = dead();
    assert_eq!(
        assess(Some(&starting), Some(&dead_op), Some(&ours)),
        Health::Stale
    );
}

#[test]
fn one_corrupt_record_is_listed_as_corrupt_and_the_rest_still_listed() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    let broken = SandboxName::parse("broken-1").unwrap();
    let path = w.stores.sandboxes.path_of(broken.as_str()).unwrap();
    std::fs::write(&path, b"{ not json").unwrap();
    let listed = list(&w.stores, &fake).unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    match &listed[0] {
        Listed::Corrupt { name, path: p, .. } => {
            assert_eq!(name, &broken);
            assert_eq!(p, &path);
        }
        other => panic!("expected the corrupt entry first, got {other:?}"),
    }
    match &listed[1] {
        Listed::Sandbox(r) => assert_eq!(r.health, Health::Ready),
        other => panic!("expected the healthy sandbox, got {other:?}"),
    }
}

#[test]
fn a_corrupt_record_never_blocks_down_or_clean_of_the_others() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    let broken = SandboxName::parse("broken-1").unwrap();
    let path = w.stores.sandboxes.path_of(broken.as_str()).unwrap();
    std::fs::write(&path, b"{ not json").unwrap();
    let out = clean(&w.stores, &fake).unwrap();
    let skipped: Vec<&SandboxName> = out.skipped.iter().map(|(n, _)| n).collect();
    assert_eq!(skipped, [&broken]);
    assert!(out.skipped[0].1.contains("corrupt"), "{:?}", out.skipped);
    down(&w.stores, &fake, &w.name, Duration::from_secs(1)).unwrap();
    assert!(w.stores.record(&w.name).unwrap().is_none());
    assert!(
        path.exists(),
        "the corrupt record is left for the user to inspect"
    );
}

/// A provisioner that records the phases it was given and ends as told.
struct Steps {
    phases: &'static [&'static str],
    end: Option<fn(String) -> ProvisionError>,
    ran: Vec<String>,
    /// What each call was told about the sandbox: created by this `up` or retained.
    fresh: Vec<bool>,
}

impl Provision for Steps {
    fn provision(
        &mut self,
        _: &SandboxRecord,
        fresh: bool,
        phase: &mut dyn FnMut(&str) -> Result<(), crate::state::StateError>,
    ) -> Result<(), ProvisionError> {
        self.fresh.push(fresh);
        for p in self.phases {
            phase(p)?;
            self.ran.push((*p).to_owned());
        }
        match self.end {
            Some(end) => Err(end((*self.phases.last().unwrap()).to_owned())),
            None => Ok(()),
        }
    }
}

fn up_provisioning(w: &World, fake: &Fake, steps: &mut Steps) -> Result<UpOutcome, LifecycleError> {
    up(
        &w.stores,
        fake,
        request(w, plan()),
        &mut NoObserver,
        steps,
        &|| false,
    )
}

#[test]
fn provisioning_runs_in_order_on_fresh_and_on_retained_up() {
    let w = world();
    let fake = Fake::new();
    let mut steps = Steps {
        phases: &["base", "packages", "user-script", "project-script"],
        end: None,
        ran: vec![],
        fresh: vec![],
    };
    let first = up_provisioning(&w, &fake, &mut steps).unwrap();
    assert!(!first.reused);
    let second = up_provisioning(&w, &fake, &mut steps).unwrap();
    assert!(second.reused, "a retained up provisions again");
    assert_eq!(steps.ran.len(), 8);
    assert_eq!(steps.ran[..4], steps.ran[4..]);
    // The base step of a created sandbox may skip what only a retained one needs.
    assert_eq!(steps.fresh, [true, false]);
    let timed: Vec<&String> = second
        .operation
        .timings
        .keys()
        .filter(|k| k.starts_with("provision:"))
        .collect();
    assert_eq!(timed.len(), 4, "{:?}", second.operation.timings);
}

#[test]
fn failed_reprovision_leaves_the_sandbox_ready_and_records_the_failed_operation() {
    let w = world();
    let fake = Fake::new();
    up_with(&w, &fake, plan()).unwrap();
    let mut steps = Steps {
        phases: &["base", "packages"],
        end: Some(|phase| ProvisionError::Failed {
            phase,
            detail: "exit status 3".into(),
        }),
        ran: vec![],
        fresh: vec![],
    };
    let err = up_provisioning(&w, &fake, &mut steps).unwrap_err();
    assert!(matches!(err, LifecycleError::Provision { .. }), "{err}");
    assert!(err.to_string().contains("exit status 3"), "{err}");
    let rec = w.stores.record(&w.name).unwrap().unwrap().data;
    assert_eq!(rec.phase, crate::records::Phase::Ready);
    assert_eq!(
        status(&w.stores, &fake, &w.name).unwrap().health,
        Health::Ready
    );
    let op = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert!(
        matches!(op.result, OperationResult::Failed { .. }),
        "{op:?}"
    );
    assert_eq!(op.phase, "provision:packages");
    assert_eq!(
        *fake.calls.borrow(),
        ["prepare", "start"],
        "nothing was stopped"
    );
}

#[test]
fn cancelled_provisioning_keeps_the_ready_sandbox_and_says_so() {
    let w = world();
    let fake = Fake::new();
    let mut steps = Steps {
        phases: &["base", "user-script"],
        end: Some(|phase| ProvisionError::Cancelled { phase }),
        ran: vec![],
        fresh: vec![],
    };
    let err = up_provisioning(&w, &fake, &mut steps).unwrap_err();
    assert!(matches!(err, LifecycleError::Cancelled { .. }), "{err}");
    assert!(
        err.to_string().contains("already ready and is kept"),
        "{err}"
    );
    assert!(err.to_string().contains("user-script"), "{err}");
    let rec = w.stores.record(&w.name).unwrap().unwrap().data;
    assert_eq!(rec.phase, crate::records::Phase::Ready);
    let op = w.stores.operation(&w.name).unwrap().unwrap().data;
    assert_eq!(op.result, OperationResult::Cancelled);
}
