//! What the lifecycle verbs (`up`, `exec`, `status`, `ls`, `down`, `clean`) share: resolving
//! the sandbox name, opening the state ([`Host::open`]), the linux backend, and turning
//! lifecycle errors into [`HostError`]s. The orchestration itself lives in
//! `airlock_core::lifecycle`.

pub mod backend;
pub mod compare;
pub mod exec;
pub mod keeper;
pub mod ports;
pub mod runs;
mod waiting;

use std::time::Duration;

use airlock_core::backend::{Backend, BackendError};
use airlock_core::lifecycle::{Health, LifecycleError, Stores};
use airlock_core::names::SandboxName;
use airlock_core::records::{MappingSummary, PlanSummary, SandboxPaths, SandboxRecord};
use airlock_linux::spec::{Image, SandboxSpec};
use airlock_protocol::Key;

use std::os::unix::net::UnixStream;
use std::path::Path;

use airlock_config::Roots;

use self::backend::LinuxBackend;
use crate::error::{ErrorKind, HostError};
use crate::paths::{check_root, ensure_root};
use crate::project::{discover_project, no_project};

/// How long a mutating command waits for another one holding the sandbox's lock (L8).
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// [`LOCK_WAIT`]; debug builds let tests shorten it with `AIRLOCK_TEST_LOCK_WAIT_MS` (release
/// builds never read it).
pub fn lock_wait() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var(airlock_config::env_vars::AIRLOCK_TEST_LOCK_WAIT_MS)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Duration::from_millis(ms);
    }
    LOCK_WAIT
}

/// Parses `--name`, or derives the active project's name. Usage error (exit 2) for a bad name.
pub fn resolve_name(
    cwd: &Path,
    name: Option<&str>,
) -> Result<(SandboxName, Option<airlock_config::Project>), HostError> {
    let project = discover_project(cwd)?;
    if let Some(text) = name {
        let name = SandboxName::parse(text).map_err(|e| {
            HostError::usage(format!("--name: {e}")).with_hint(
                "use 1-63 characters from a-z, 0-9 and '-', starting with a letter or digit",
            )
        })?;
        return Ok((name, project));
    }
    match project {
        Some(p) => Ok((SandboxName::for_project(&p.root), Some(p))),
        None => Err(no_project(cwd)),
    }
}

/// `up`'s keeper, spawned parked before anything is validated ([`backend::ParkedKeeper`]),
/// on a thread of its own so that neither the spawn nor the exec holds up the validation; see
/// [`Parking`]. No keeper is spawned when `name` has a record: that means a sandbox to reuse
/// or to clean up first, seldom a fresh start.
pub fn park_keeper(roots: &Roots, name: &SandboxName) -> Parking {
    let record = Stores::open(&roots.state).and_then(|s| s.sandboxes.path_of(name.as_str()));
    let state_dir = backend::sandboxes_state(&roots.state).join(name.as_str());
    let spawn = move || {
        let record = record.ok()?;
        if std::fs::symlink_metadata(record).is_ok() {
            return None;
        }
        backend::ParkedKeeper::spawn(&state_dir).ok()
    };
    Parking(
        std::thread::Builder::new()
            .spawn(spawn)
            .ok()
            .map(ParkingState::Spawning),
    )
}

/// A keeper being spawned parked ([`park_keeper`]), for [`LinuxBackend::parked`]: waited for
/// only when the sandbox's record is about to name it. Dropped unused (a failed validation, a
/// reused sandbox), it waits for the spawn and drops the keeper, which kills and reaps it:
/// nothing is left.
pub struct Parking(Option<ParkingState>);

enum ParkingState {
    Spawning(std::thread::JoinHandle<Option<backend::ParkedKeeper>>),
    Spawned(backend::ParkedKeeper),
}

impl Parking {
    /// The parked keeper, once spawned; `None` when none could be (`start` then spawns one
    /// and reports why it cannot).
    pub fn keeper(&mut self) -> Option<&backend::ParkedKeeper> {
        self.0 = match self.0.take() {
            Some(ParkingState::Spawning(spawning)) => {
                spawning.join().ok().flatten().map(ParkingState::Spawned)
            }
            other => other,
        };
        match &self.0 {
            Some(ParkingState::Spawned(keeper)) => Some(keeper),
            Some(ParkingState::Spawning(_)) | None => None,
        }
    }

    /// The parked keeper, taken out.
    pub fn take(&mut self) -> Option<backend::ParkedKeeper> {
        self.keeper()?;
        match self.0.take() {
            Some(ParkingState::Spawned(keeper)) => Some(keeper),
            Some(ParkingState::Spawning(_)) | None => None,
        }
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        if let Some(ParkingState::Spawning(spawning)) = self.0.take() {
            let _ = spawning.join();
        }
    }
}

/// Everything a lifecycle verb works with: the state stores and the linux backend.
pub struct Host {
    pub stores: Stores,
    pub backend: LinuxBackend,
    /// What the L9 sweep of `airlock run`'s state removed and left (mutating verbs only).
    pub runs: runs::RunSweep,
}

impl Host {
    pub fn paths(&self, name: &SandboxName) -> SandboxPaths {
        SandboxPaths {
            state_dir: self.backend.sandboxes_state().join(name.as_str()),
            runtime_dir: self.backend.sandboxes_runtime().join(name.as_str()),
        }
    }

    /// Opens the lifecycle state. Mutating verbs create the state and runtime roots as private
    /// directories and sweep the state of finished `run`s ([`runs::sweep`], L9); read-only ones
    /// only verify what exists (issue 4 item 9) and create nothing.
    pub fn open(roots: &Roots, mutating: bool) -> Result<Host, HostError> {
        for dir in [&roots.state, &roots.runtime] {
            if mutating {
                ensure_root(roots, dir)?;
            } else {
                check_root(roots, dir)?;
            }
        }
        let stores = Stores::open(&roots.state)?;
        let backend = LinuxBackend {
            state_root: roots.state.clone(),
            runtime_root: roots.runtime.clone(),
            vm: None,
            parked: Default::default(),
        };
        let runs = if mutating {
            runs::sweep(&roots.state)
        } else {
            runs::RunSweep::default()
        };
        Ok(Host {
            stores,
            backend,
            runs,
        })
    }
}

/// Maps a lifecycle failure to a [`HostError`] (its kind decides the exit code, PRODUCT O5).
pub fn lifecycle_error(e: LifecycleError) -> HostError {
    let message = e.to_string();
    match e {
        LifecycleError::Lock(l) => l.into(),
        LifecycleError::State(s) => s.into(),
        LifecycleError::Backend(b) => backend_error(b),
        LifecycleError::Ownership(_) | LifecycleError::CreateDir { .. } => {
            HostError::internal("lifecycle.io", message)
                .with_hint("check the permissions of airlock's state and runtime directories")
        }
        LifecycleError::PlanChanged { differences, .. } => {
            let mut text = format!("{message}:");
            for d in &differences {
                text.push_str(&format!(
                    "\n  {}: running {}, planned {}",
                    d.field, d.recorded, d.planned
                ));
            }
            HostError::new(ErrorKind::Failed, "up.plan_changed", text).with_hint(
                "run `airlock down` to discard the running sandbox, then `airlock up` again",
            )
        }
        LifecycleError::Blocked { .. } => {
            HostError::new(ErrorKind::Failed, "lifecycle.unmanaged", message).with_hint(
                "check the paths named above; remove them yourself if they are yours, then run `airlock clean`",
            )
        }
        LifecycleError::Cancelled { .. } => {
            HostError::new(ErrorKind::Interrupted, "lifecycle.cancelled", message)
                .with_hint("run the command again when you are ready")
        }
        LifecycleError::Provision { .. } => {
            HostError::new(ErrorKind::Failed, "up.provision_failed", message).with_hint(
                "the sandbox is ready: fix the step and run `airlock up` again (it provisions \
                 again), or look inside with `airlock exec`",
            )
        }
    }
}

fn backend_error(e: BackendError) -> HostError {
    let message = e.to_string();
    match e {
        BackendError::Start(failure) => crate::error::from_start_failure(failure),
        BackendError::OwnerExited { .. } => HostError::internal("backend.keeper_exited", message)
            .with_hint(
                "read the keeper's log named above; if it shows nothing, this is a bug in airlock",
            ),
        BackendError::Identity { .. } | BackendError::Random(_) => {
            HostError::internal("backend.identity", message)
                .with_hint("run `airlock doctor`; if it reports nothing, this is a bug in airlock")
        }
        BackendError::Version(_) => HostError::new(ErrorKind::Failed, "keeper.version", message)
            .with_hint("run `airlock down`, then `airlock up` with this airlock"),
        BackendError::Encode { .. } | BackendError::Marker { .. } | BackendError::Write { .. } => {
            HostError::internal("backend.io", message)
                .with_hint("check the permissions of airlock's state and runtime directories")
        }
        BackendError::Timeout { .. } => HostError::new(ErrorKind::Failed, "up.timeout", message)
            .with_hint("try again with a longer --timeout, e.g. --timeout 2m"),
        BackendError::Cancelled { .. } => {
            HostError::new(ErrorKind::Interrupted, "lifecycle.cancelled", message)
        }
        BackendError::Io { .. } => HostError::internal("backend.io", message)
            .with_hint("check the permissions of airlock's state and runtime directories"),
    }
}

/// `1.5s`, `500ms`, `2m`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 500ms, 2m)"))?;
    if !(value.is_finite() && value > 0.0 && value * scale <= 3600.0) {
        return Err(format!("{text:?} must be between 1ms and 60m"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

/// Human size.
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// The parts of the spec L1 compares.
pub fn plan_summary(spec: &SandboxSpec) -> PlanSummary {
    let map = |m: &airlock_linux::spec::Mapping| MappingSummary {
        host: m.host.clone(),
        sandbox: m.sandbox.clone(),
        writable: m.writable,
    };
    PlanSummary {
        image: match &spec.image {
            Image::Host => "host".to_owned(),
            Image::Directory(p) => format!("directory {}", p.display()),
            Image::Imported(i) => format!("image {} {}", i.name, i.digest),
        },
        workspaces: spec.workspaces.iter().map(map).collect(),
        mounts: spec.mounts.iter().map(map).collect(),
        home: spec.user.home.clone(),
        memory_mb: spec.limits.memory_mb.map(|l| l.value),
        pids_max: spec.limits.pids_max.map(|l| l.value),
        cpus: spec.limits.cpus.map(|l| l.value),
    }
}

/// The record of `name` when it is ready; otherwise `Failed` (exit 1) with `code` (the verb's
/// own, e.g. `exec.not_ready`) and the next action. Proven like `status` (keeper and PID 1
/// by pid, start time and command line; version; exit note) without the disk measurement
/// only `status` shows (`airlock_core::lifecycle::readiness`).
pub fn ready(
    host: &Host,
    name: &SandboxName,
    code: &'static str,
) -> Result<SandboxRecord, HostError> {
    let status = airlock_core::lifecycle::readiness(&host.stores, &host.backend, name)
        .map_err(lifecycle_error)?;
    match (status.health, status.record) {
        (Health::Ready, Some(record)) => Ok(record),
        (health, _) => Err(HostError::new(
            ErrorKind::Failed,
            code,
            format!("sandbox {name} is {health}, not ready"),
        )
        .with_hint(format!("next: {}", status.next))),
    }
}

/// A new stream to the sandbox's PID 1 and the epoch key that authenticates it.
pub fn open_stream(host: &Host, record: &SandboxRecord) -> Result<(UnixStream, Key), HostError> {
    let channel = host
        .backend
        .connect(record)
        .map_err(|e| lifecycle_error(e.into()))?;
    Ok((channel.stream, key_of(&channel.key)?))
}

/// The epoch key as the protocol wants it.
pub fn key_of(bytes: &[u8]) -> Result<Key, HostError> {
    let arr: [u8; 32] = bytes.try_into().map_err(|_| {
        HostError::internal(
            "exec.key",
            format!("the sandbox's key file holds {} bytes, not 32", bytes.len()),
        )
        .with_hint("run `airlock down` and `airlock up` to start a fresh epoch")
    })?;
    Ok(Key::from_bytes(arr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_outside_a_project_is_the_project_none_error() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        let err = resolve_name(&cwd, None).unwrap_err();
        assert_eq!(err.code, "project.none");
        assert_eq!(err.kind, ErrorKind::Config);
    }

    #[test]
    fn durations_accept_units_and_refuse_nonsense() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        for bad in ["", "abc", "-1s", "0", "2h", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
