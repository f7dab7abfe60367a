//! The backend boundary (PRODUCT §13): how lifecycle orchestration reaches sandboxes without
//! naming a backend. Core decides *what* happens (reuse, refuse, create, stop, clean) and
//! records it; a [`Backend`] does it and proves ownership before it touches anything.
//!
//! Order a backend is driven in by `up`: [`Backend::prepare`] (directories with markers, the
//! start request) → [`Backend::start`] (spawn the owner process; its identity is recorded at
//! once, so a crash right after still leaves a provable trail) → [`Starting::wait`] (until the
//! guest is ready, bounded, cancellable). `down`: [`Backend::stop`] then [`Backend::remove`].

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::ownership::Liveness;
use crate::records::{ProcessIdentity, SandboxPaths, SandboxRecord};

/// A backend failure. Each variant names the step that failed and carries its cause typed;
/// how it is classified (exit 69, 1 or 70) follows from the variant, never from its text.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The owner process could not start the sandbox and said why, already classified.
    #[error("the sandbox did not start: {0}")]
    Start(StartFailure),
    /// The owner process exited before reporting; its log tells why.
    #[error("the owner process exited before the sandbox was ready (see {}: {last_line})", log.display())]
    OwnerExited { log: PathBuf, last_line: String },
    /// A process the backend started cannot be identified, so it could never be proven ours.
    #[error("cannot read the identity of {what} (pid {pid}): {source}")]
    Identity {
        what: &'static str,
        pid: u32,
        #[source]
        source: crate::ownership::OwnershipError,
    },
    /// A file the backend writes could not be encoded.
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// Marking a directory as this sandbox's failed.
    #[error("cannot mark {} as this sandbox's: {source}", dir.display())]
    Marker {
        dir: PathBuf,
        #[source]
        source: crate::ownership::OwnershipError,
    },
    /// A file the backend writes could not be written atomically.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: crate::atomic::AtomicWriteError,
    },
    /// The owner process speaks another version of the host protocol (started by another
    /// airlock): nothing it said is read.
    #[error("the sandbox's owner process cannot be used: {0}")]
    Version(airlock_protocol::host::HostVersionError),
    /// The system's random source failed.
    #[error("cannot read random bytes: {0}")]
    Random(getrandom::Error),
    /// Host I/O on a named path failed.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The sandbox did not become ready before the deadline.
    #[error("the sandbox was not ready after {waited:?}")]
    Timeout { waited: Duration },
    /// The user cancelled while waiting.
    #[error("cancelled while {while_doing}")]
    Cancelled { while_doing: &'static str },
}

/// Why the owner process could not start the sandbox; it crosses between two airlock
/// processes, so it is part of the versioned host protocol.
pub use airlock_protocol::host::{FailureClass, StartFailure};

/// What `wait` learned once the guest is ready.
#[derive(Debug, Clone)]
pub struct Ready {
    /// The sandbox's PID 1 as seen on the host.
    pub guest: ProcessIdentity,
    /// Backend facts to keep in the record (opaque above the boundary).
    pub backend_data: serde_json::Value,
    /// Milliseconds per backend phase.
    pub timings: Vec<(String, u64)>,
}

/// A sandbox whose owner process was spawned and is coming up.
pub trait Starting {
    /// The owner process, proven at spawn time.
    fn owner(&self) -> &ProcessIdentity;
    /// Waits until the guest is ready, `deadline` passes, or `cancelled()` turns true.
    fn wait(
        &mut self,
        deadline: Instant,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Ready, BackendError>;
}

/// The observable state of a recorded sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub owner: Liveness,
    pub guest: Liveness,
    /// Bytes used by the sandbox's writable state on the host, when measurable.
    pub disk_bytes: Option<u64>,
    /// Why the owner stopped, when it left a note.
    pub exit_note: Option<String>,
    /// Set when the owner was started by another airlock version (another host protocol): it
    /// is not used, only stopped, and the sandbox is `stale`. Says which version.
    pub incompatible: Option<String>,
    /// What the running sandbox does without (e.g. limits skipped at start).
    pub warnings: Vec<String>,
}

/// What `stop` did.
#[derive(Debug, Clone, Default)]
pub struct StopReport {
    /// Needed SIGKILL after the grace period.
    pub killed: bool,
    /// Proven processes of the sandbox that survived SIGKILL (the stop is incomplete).
    pub unmanaged: Vec<String>,
}

/// What `remove` freed and left.
#[derive(Debug, Clone, Default)]
pub struct Freed {
    pub removed: Vec<PathBuf>,
    pub bytes: u64,
    /// Paths left alone, with the reason ownership could not be proven.
    pub left: Vec<(PathBuf, String)>,
}

/// An authenticated-channel endpoint: a connected stream and the key that proves the epoch.
pub struct Channel {
    pub stream: UnixStream,
    pub key: Vec<u8>,
}

/// One kind of sandbox runtime.
pub trait Backend {
    /// The backend's start description, built by the caller from the validated plan.
    type Spec;

    /// The backend's name, kept in each record it creates.
    fn name(&self) -> &'static str;
    /// Creates the sandbox's directories (with ownership markers) and its start request.
    fn prepare(&self, record: &SandboxRecord, spec: &Self::Spec) -> Result<(), BackendError>;
    /// The owner process [`Backend::start`] will start the sandbox with, when it already runs
    /// (spawned ahead of need, doing nothing until `start`): the `starting` record names it
    /// from its first write, and no revision is written for it later. `None` (the default):
    /// `start` spawns it.
    fn owner_ahead(&self, paths: &SandboxPaths) -> Option<ProcessIdentity> {
        let _ = paths;
        None
    }
    /// Spawns the sandbox's owner process (or lets the one of [`Backend::owner_ahead`] go on).
    fn start(&self, record: &SandboxRecord) -> Result<Box<dyn Starting + '_>, BackendError>;
    /// Observes the sandbox without changing it.
    fn inspect(&self, record: &SandboxRecord) -> Inspection;
    /// [`Backend::inspect`] without the measurements only `status` and `ls` show (disk use may
    /// be `None`): the same proofs of liveness, the same version check and exit note, for a
    /// command that only needs to know whether the sandbox is ready (`exec`, `attach`).
    fn probe(&self, record: &SandboxRecord) -> Inspection {
        self.inspect(record)
    }
    /// Stops the sandbox, bounded: orderly first, then forced; ownership-checked.
    fn stop(&self, record: &SandboxRecord, grace: Duration) -> Result<StopReport, BackendError>;
    /// Removes what the sandbox left on the host, after proving each piece is ours.
    fn remove(&self, record: &SandboxRecord) -> Result<Freed, BackendError>;
    /// Opens a control channel to the ready guest.
    fn connect(&self, record: &SandboxRecord) -> Result<Channel, BackendError>;
    /// Directories under the backend's roots that no record names (for `clean`), with the
    /// marker content each one carries, if any.
    fn orphans(&self, known: &[&SandboxRecord]) -> Vec<(PathBuf, Option<String>)>;
}
