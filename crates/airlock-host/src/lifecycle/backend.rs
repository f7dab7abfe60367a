//! The `linux` implementation of the core's [`Backend`] boundary, for persistent sandboxes.
//!
//! Host layout of one sandbox `<name>` in epoch `<instance>`:
//! - `<state>/sandboxes/<name>/` (0700, marker `<name> <instance>`): `start.json` (the start
//!   request), `keeper.log` (the keeper's stderr), `exit-note` (why the keeper stopped);
//! - `<runtime>/sandboxes/<name>/` (0700, same marker): `control.sock` (the keeper's listening
//!   socket), `<instance>/` (the runtime's per-epoch directory: the 0600 key, scratch).
//!
//! The owner process is the keeper (`airlock __keeper <state dir>`, see [`super::keeper`]). Its
//! identity is proven before every signal; the guest's PID 1 and the init stage die with it
//! (PDEATHSIG chain). It removes the cgroup when it stops in order; a killed keeper's cgroup
//! is removed by [`Backend::stop`] (no janitor process per idle sandbox).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_core::backend::{
    Backend, BackendError, Channel, Freed, Inspection, Ready, Starting, StopReport,
};
use airlock_core::ownership::{self, check_dir, check_process, DirOwnership, Liveness};
use airlock_core::records::{ProcessIdentity, SandboxPaths, SandboxRecord};
use airlock_linux::spec::SandboxSpec;
use serde::{Deserialize, Serialize};

use crate::paths::START_FILE;
pub use crate::paths::{EGRESS_DIR, EXIT_NOTE, LOG_FILE, SOCKET, START_WARNINGS};
use crate::wire::{
    egress_start, KeeperOutcome, KeeperReport, StartRequest, HOST_VERSION, KEEPER_VERB, MODE_STREAM,
};

/// Longest socket path `sockaddr_un` holds safely (108 bytes with the terminating NUL).
const SUN_PATH_MAX: usize = 100;

/// Runs `f` with a path naming `socket` that fits `sockaddr_un`: the path itself when short
/// enough, else `/proc/self/fd/<dir fd>/<file>` through a descriptor of its directory (the
/// kernel resolves the magic link, so the socket is still bound or reached in that directory).
pub fn with_socket_path<T>(
    socket: &Path,
    f: impl FnOnce(&Path) -> std::io::Result<T>,
) -> std::io::Result<T> {
    use std::os::unix::ffi::OsStrExt;
    if socket.as_os_str().as_bytes().len() <= SUN_PATH_MAX {
        return f(socket);
    }
    let (Some(dir), Some(file)) = (socket.parent(), socket.file_name()) else {
        return f(socket);
    };
    let flags =
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, rustix::fs::Mode::empty())?;
    let short = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))
    .join(file);
    f(&short)
}

/// What the linux backend keeps in a record's `backend_data`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LinuxData {
    pub init: Option<ProcessIdentity>,
    pub cgroup_name: String,
    /// The host protocol version the keeper reported (absent in records of an airlock from
    /// before versioning: 0, never this version).
    #[serde(default)]
    pub host_version: u32,
}

pub struct LinuxBackend {
    pub state_root: PathBuf,
    pub runtime_root: PathBuf,
    /// `Some`: sandboxes this backend creates are `vm` sandboxes (`crate::vm`): the same
    /// keeper contract, records and proofs, a VM behind it. Every other step is the same.
    pub vm: Option<crate::vm::VmSettings>,
    /// A keeper `up` spawned before its validation ([`ParkedKeeper`]): [`Backend::start`]
    /// gives it the go-ahead instead of spawning one, when it is for that sandbox.
    pub parked: std::sync::Mutex<Option<super::Parking>>,
}

/// A keeper spawned ahead of need (`airlock __keeper <state dir>`, see [`super::keeper`]):
/// it waits on a pipe for its go-ahead and does nothing until then. Dropped without the
/// go-ahead (a failed validation, a reused sandbox, a cancelled `up`), it is killed and
/// reaped, having created nothing; should `up` die instead, the pipe's end of file makes it
/// exit by itself.
pub struct ParkedKeeper {
    child: Option<Child>,
    state_dir: PathBuf,
    /// Read once: the `starting` record and `start` name the same process.
    identity: std::sync::OnceLock<ProcessIdentity>,
}

impl ParkedKeeper {
    /// Spawns the keeper of the sandbox whose state directory is `state_dir` (which need not
    /// exist yet), parked.
    pub fn spawn(state_dir: &Path) -> Result<ParkedKeeper, BackendError> {
        let exe = PathBuf::from("/proc/self/exe");
        let child = Command::new(&exe)
            .arg(KEEPER_VERB)
            .arg(state_dir)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Until the go-ahead, when it turns to the sandbox's log.
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_err("cannot start the keeper", &exe))?;
        Ok(ParkedKeeper {
            child: Some(child),
            state_dir: state_dir.to_path_buf(),
            identity: std::sync::OnceLock::new(),
        })
    }

    /// The keeper's identity (pid, start time, command line), as recorded once it owns the
    /// sandbox.
    pub fn identity(&self) -> Result<ProcessIdentity, BackendError> {
        if let Some(id) = self.identity.get() {
            return Ok(id.clone());
        }
        let pid = self.child.as_ref().map_or(0, Child::id);
        let id = settled_identity(pid).map_err(|source| BackendError::Identity {
            what: "the keeper",
            pid,
            source,
        })?;
        Ok(self.identity.get_or_init(|| id).clone())
    }

    /// Lets the keeper go on: it starts the sandbox of its state directory, whose start
    /// request must be written. Its report comes on the returned stdout.
    fn go(mut self) -> Result<(Child, ChildStdout), BackendError> {
        let mut child = self.child.take().expect("a parked keeper has its child");
        let sent = child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(&[super::keeper::GO_AHEAD]);
        let stdout = child.stdout.take().expect("piped stdout");
        match sent {
            // Its stdin closes here: the keeper reads nothing more from it.
            Ok(()) => Ok((child, stdout)),
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(BackendError::Io {
                    what: "cannot start the keeper of",
                    path: self.state_dir.clone(),
                    source,
                })
            }
        }
    }
}

impl Drop for ParkedKeeper {
    fn drop(&mut self) {
        // Never given the go-ahead: it has done nothing yet, and never will.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> BackendError + 'a {
    move |source| BackendError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The marker content of a sandbox's directories.
pub fn marker(record: &SandboxRecord) -> String {
    format!("{} {}", record.name, record.epoch.instance)
}

/// Where the state directories of the sandboxes under `state_root` live.
pub fn sandboxes_state(state_root: &Path) -> PathBuf {
    state_root.join("sandboxes")
}

impl LinuxBackend {
    pub fn sandboxes_state(&self) -> PathBuf {
        sandboxes_state(&self.state_root)
    }
    pub fn sandboxes_runtime(&self) -> PathBuf {
        self.runtime_root.join("sandboxes")
    }

    fn make_dir(&self, dir: &Path, record: &SandboxRecord) -> Result<(), BackendError> {
        let parent = dir.parent().unwrap_or(Path::new("/"));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io_err("cannot create", parent))?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(io_err("cannot create", dir))?;
        ownership::write_marker(dir, &marker(record)).map_err(|source| BackendError::Marker {
            dir: dir.to_path_buf(),
            source,
        })
    }

    fn roots(&self) -> [PathBuf; 2] {
        [self.sandboxes_state(), self.sandboxes_runtime()]
    }
}

/// Why the record's keeper must not be talked to: it reported another host protocol version
/// (or none). Only a `ready` record has a reported version.
pub(crate) fn incompatible(record: &SandboxRecord) -> Option<String> {
    if record.phase != airlock_core::records::Phase::Ready {
        return None;
    }
    let version = data_of(record).host_version;
    (version != HOST_VERSION).then(|| {
        if version == 0 {
            format!("its keeper speaks no versioned host protocol (an older airlock); this airlock speaks {HOST_VERSION}")
        } else {
            format!("its keeper speaks host protocol {version}; this airlock speaks {HOST_VERSION}")
        }
    })
}

fn data_of(record: &SandboxRecord) -> LinuxData {
    serde_json::from_value(record.backend_data.clone()).unwrap_or_default()
}

/// A pidfd of `id`, opened first and only then proven to be the recorded process (pid, start
/// time, command line), so neither a signal nor a wait through it can reach a recycled pid.
fn proven_pidfd(id: &ProcessIdentity) -> Option<std::os::fd::OwnedFd> {
    let fd = airlock_linux::pidfd::open(id.pid as i32)?;
    (check_process(id) == Liveness::Ours).then_some(fd)
}

/// Sends `signal` through a proven pidfd and waits at most `limit` for the process to exit.
/// The wait is on the pidfd, which turns readable only once the process has exited: its
/// identity cannot be used for that, because an exiting process's command line reads empty
/// while it is still releasing its resources, so "no longer provably ours" came too early.
fn signal_and_wait(
    fd: &std::os::fd::OwnedFd,
    signal: rustix::process::Signal,
    limit: Duration,
) -> bool {
    let _ = rustix::process::pidfd_send_signal(fd, signal);
    airlock_linux::pidfd::wait_exit(fd, limit)
}

/// The identity of a just-spawned process. Right after `execve` the kernel has installed the
/// new memory map (which wakes a vfork parent) but may not yet have set up the argument area,
/// so `/proc/PID/cmdline` can read empty for a moment: re-read until it is there (bounded).
fn settled_identity(pid: u32) -> Result<ProcessIdentity, ownership::OwnershipError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let id = ownership::process_identity(pid)?;
        if !id.cmdline.is_empty() || Instant::now() >= deadline {
            return Ok(id);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn cgroup_name(record: &SandboxRecord) -> String {
    let data = data_of(record);
    if data.cgroup_name.is_empty() {
        record.epoch.instance.clone()
    } else {
        data.cgroup_name
    }
}

/// Kills what is left in the sandbox's cgroup and removes it, when its owner (the keeper that
/// created it) is provably gone; a cgroup that cannot be removed is reported.
fn remove_orphaned_cgroup(name: &str, report: &mut StopReport) {
    use airlock_linux::cgroup::Cgroup;
    // Without an orphaned cgroup (none, its owner still runs, or no hierarchy to look in)
    // nothing is forced; `remove` reports any directory of it that is still there.
    if let Ok(Some(cgroup)) = Cgroup::orphaned(name) {
        if let Err(e) = cgroup.destroy(Duration::from_secs(5)) {
            report.unmanaged.push(e.to_string());
        }
    }
}

/// Size of the sandbox's writable layer (R4). The overlay upper layer lives on a tmpfs inside
/// the sandbox's mount namespace, which the host cannot walk; its pages are charged to the
/// sandbox's memory cgroup as `shmem`, so that counter measures it (with any other tmpfs the
/// sandbox wrote to, e.g. `/tmp`, `/dev/shm`).
fn writable_layer_bytes(cgroup: &str) -> Option<u64> {
    cgroup_dirs(cgroup).into_iter().find_map(|dir| {
        let text = fs::read_to_string(dir.join("memory.stat")).ok()?;
        // v1 reports the hierarchy total as `total_shmem`; v2 (and v1's local figure) `shmem`.
        ["total_shmem", "shmem"].iter().find_map(|key| {
            text.lines().find_map(|line| {
                let (k, v) = line.split_once(' ')?;
                (k == *key).then(|| v.trim().parse().ok()).flatten()
            })
        })
    })
}

/// The counter of processes of the sandbox the OOM killer has ended (its memory cgroup's
/// `oom_kill`: v2 `memory.events`, v1 `memory.oom_control`), found and opened once and read
/// before and after a command (9.10): each read is one `pread` at offset 0 of the open file,
/// which the kernel generates afresh.
pub struct OomCounter(fs::File);

impl OomCounter {
    /// The sandbox's counter file, opened; `None` without a memory cgroup.
    pub fn find(record: &SandboxRecord) -> Option<OomCounter> {
        let name = cgroup_name(record);
        // Where the cgroup lives when the hierarchies are mounted as usual (root's v2 with its
        // `memory.events`, or v1's memory controller with its `memory.oom_control`: neither
        // version has the other's file): found without parsing mountinfo (`exec` pays this
        // each time), by opening the file itself. The directory is named after this sandbox's
        // instance, so a counter there is its own. Elsewhere, either file in every hierarchy.
        let usual = [
            Path::new("/sys/fs/cgroup")
                .join(airlock_linux::cgroup::PARENT_DIR)
                .join(&name)
                .join("memory.events"),
            Path::new("/sys/fs/cgroup/memory")
                .join(airlock_linux::cgroup::PARENT_DIR)
                .join(&name)
                .join("memory.oom_control"),
        ];
        let elsewhere = std::iter::once_with(|| cgroup_dirs(&name))
            .flatten()
            .flat_map(|dir| ["memory.events", "memory.oom_control"].map(|file| dir.join(file)));
        usual
            .into_iter()
            .chain(elsewhere)
            .find_map(|path| fs::File::open(path).ok())
            .map(OomCounter)
    }

    /// How many processes the OOM killer has ended so far.
    pub fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut text = Vec::with_capacity(256);
        let mut chunk = [0u8; 256];
        loop {
            let n = self.0.read_at(&mut chunk, text.len() as u64).ok()?;
            if n == 0 {
                break;
            }
            text.extend_from_slice(&chunk[..n]);
        }
        oom_kills(std::str::from_utf8(&text).ok()?)
    }
}

/// The `oom_kill` count of a `memory.events` or `memory.oom_control` text.
fn oom_kills(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == "oom_kill").then(|| v.trim().parse().ok()).flatten()
    })
}

/// The cgroup directories of a sandbox, in every hierarchy this host uses.
fn cgroup_dirs(name: &str) -> Vec<PathBuf> {
    use airlock_linux::cgroup::{base_dirs, Layout, PARENT_DIR};
    let Ok(layout) = Layout::detect() else {
        return Vec::new();
    };
    base_dirs(&layout)
        .unwrap_or_default()
        .into_iter()
        .map(|b| b.join(PARENT_DIR).join(name))
        .collect()
}

impl Backend for LinuxBackend {
    type Spec = SandboxSpec;

    fn name(&self) -> &'static str {
        if self.vm.is_some() {
            "vm"
        } else {
            "linux"
        }
    }

    fn prepare(&self, record: &SandboxRecord, spec: &SandboxSpec) -> Result<(), BackendError> {
        self.make_dir(&record.paths.state_dir, record)?;
        self.make_dir(&record.paths.runtime_dir, record)?;
        let mut spec = spec.clone();
        spec.id = record.epoch.instance.clone();
        let egress = spec.egress.as_mut().map(|e| {
            e.host_dir = record.paths.runtime_dir.join(EGRESS_DIR);
            egress_start(
                e.host_dir.clone(),
                Some(record.project_root.clone()),
                crate::paths::audit_log_path(&record.paths),
            )
        });
        let request = StartRequest {
            version: HOST_VERSION,
            spec,
            runtime_dir: record.paths.runtime_dir.clone(),
            egress,
        };
        if let Some(settings) = &self.vm {
            crate::vm::write_start(&record.paths.state_dir, settings)?;
        }
        let path = record.paths.state_dir.join(START_FILE);
        let bytes = serde_json::to_vec(&request).map_err(|source| BackendError::Encode {
            what: "the start request",
            source,
        })?;
        // Not flushed: read by the keeper this `up` starts next (and while it runs, by `exec`,
        // `push`/`pull` and sessions); after a machine crash it describes nothing that runs,
        // and its directory goes with the next cleanup.
        airlock_core::write_atomic_with(&path, &bytes, 0o600, airlock_core::Durability::Atomic)
            .map_err(|source| BackendError::Write {
                path: path.clone(),
                source,
            })
    }

    fn owner_ahead(&self, paths: &SandboxPaths) -> Option<ProcessIdentity> {
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        parked
            .as_mut()
            .and_then(super::Parking::keeper)
            .filter(|k| k.state_dir == paths.state_dir)
            .and_then(|k| k.identity().ok())
    }

    fn start(&self, record: &SandboxRecord) -> Result<Box<dyn Starting + '_>, BackendError> {
        let log_path = record.paths.state_dir.join(LOG_FILE);
        let parked = self
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(super::Parking::take)
            .filter(|k| k.state_dir == record.paths.state_dir);
        let parked = match parked {
            Some(k) => k,
            None => ParkedKeeper::spawn(&record.paths.state_dir)?,
        };
        // Read before the go-ahead, from the child not yet reaped: its pid is its own.
        let owner = parked.identity()?;
        let (child, stdout) = parked.go()?;
        Ok(Box::new(LinuxStarting {
            _child: child,
            stdout: BufReader::new(stdout),
            owner,
            log: log_path,
            cgroup_name: record.epoch.instance.clone(),
        }))
    }

    fn inspect(&self, record: &SandboxRecord) -> Inspection {
        let runtime = ownership::disk_usage(&record.paths.runtime_dir);
        let state = ownership::disk_usage(&record.paths.state_dir);
        let layer = writable_layer_bytes(&cgroup_name(record)).unwrap_or(0);
        Inspection {
            disk_bytes: Some(runtime + state + layer),
            ..self.probe(record)
        }
    }

    /// Liveness (pid, start time, command line of keeper and PID 1), version and exit note;
    /// no walk of the sandbox's directories, no read of its cgroup.
    fn probe(&self, record: &SandboxRecord) -> Inspection {
        let live = |id: Option<&ProcessIdentity>| id.map_or(Liveness::Gone, check_process);
        Inspection {
            owner: live(record.keeper.as_ref()),
            guest: live(record.guest.as_ref()),
            disk_bytes: None,
            incompatible: incompatible(record),
            exit_note: fs::read_to_string(record.paths.state_dir.join(EXIT_NOTE))
                .ok()
                .map(|s| s.trim().to_owned()),
            warnings: start_warnings(record),
        }
    }

    fn stop(&self, record: &SandboxRecord, grace: Duration) -> Result<StopReport, BackendError> {
        use rustix::process::Signal;
        let mut report = StopReport::default();
        let data = data_of(record);
        if let Some(fd) = record.keeper.as_ref().and_then(proven_pidfd) {
            // A keeper that is gone, or whose pid now belongs to someone else, is not signalled.
            if !signal_and_wait(&fd, Signal::TERM, grace) {
                report.killed = true;
                signal_and_wait(&fd, Signal::KILL, Duration::from_secs(5));
            }
        }
        // The PDEATHSIG chain takes the init stage and PID 1 down with the keeper; should either
        // outlive it (or the keeper never ran), end them too, still proven first.
        for id in [data.init.as_ref(), record.guest.as_ref()]
            .into_iter()
            .flatten()
        {
            if let Some(fd) = proven_pidfd(id) {
                report.killed = true;
                if !signal_and_wait(&fd, Signal::KILL, Duration::from_secs(5)) {
                    report
                        .unmanaged
                        .push(format!("pid {} did not exit after SIGKILL", id.pid));
                }
            }
        }
        // A keeper that stopped in order removed its cgroup; one that was killed left it (it
        // runs no janitor): its owner mark names the dead keeper, so it is ours to remove.
        remove_orphaned_cgroup(&cgroup_name(record), &mut report);
        Ok(report)
    }

    fn remove(&self, record: &SandboxRecord) -> Result<Freed, BackendError> {
        let mut freed = Freed::default();
        let expected = marker(record);
        let roots = self.roots();
        let root_refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        // A socket or directory left by a killed keeper goes with its directory.
        for dir in [&record.paths.runtime_dir, &record.paths.state_dir] {
            match check_dir(dir, &root_refs, &expected) {
                DirOwnership::Absent => {}
                DirOwnership::Ours => {
                    freed.bytes += ownership::disk_usage(dir);
                    fs::remove_dir_all(dir).map_err(io_err("cannot remove", dir))?;
                    freed.removed.push(dir.clone());
                }
                DirOwnership::Unmanaged { reason } => freed.left.push((dir.clone(), reason)),
            }
        }
        let _ = airlock_linux::cgroup::sweep_stale();
        let name = cgroup_name(record);
        for dir in cgroup_dirs(&name).into_iter().filter(|d| d.exists()) {
            freed.left.push((
                dir,
                "the cgroup still exists (a process inside it did not exit)".into(),
            ));
        }
        Ok(freed)
    }

    fn connect(&self, record: &SandboxRecord) -> Result<Channel, BackendError> {
        let socket = record.paths.runtime_dir.join(SOCKET);
        let mut stream = with_socket_path(&socket, |p| UnixStream::connect(p))
            .map_err(io_err("cannot connect to", &socket))?;
        stream
            .write_all(&[MODE_STREAM])
            .map_err(io_err("cannot write to", &socket))?;
        let key_path = record
            .paths
            .runtime_dir
            .join(&record.epoch.instance)
            .join("key");
        let key = fs::read(&key_path).map_err(io_err("cannot read the epoch key", &key_path))?;
        Ok(Channel { stream, key })
    }

    fn orphans(&self, known: &[&SandboxRecord]) -> Vec<(PathBuf, Option<String>)> {
        let mut out = Vec::new();
        for root in self.roots() {
            let Ok(entries) = fs::read_dir(&root) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                // Ephemeral `airlock run` sandboxes live beside ours and belong to their run.
                if name.starts_with("run-") || known.iter().any(|r| r.name.as_str() == name) {
                    continue;
                }
                let marker = fs::read_to_string(path.join(ownership::MARKER)).ok();
                out.push((path, marker));
            }
        }
        out.sort();
        out
    }
}

/// `up`'s view of a keeper coming up.
struct LinuxStarting {
    _child: Child,
    stdout: BufReader<ChildStdout>,
    owner: ProcessIdentity,
    log: PathBuf,
    cgroup_name: String,
}

impl Starting for LinuxStarting {
    fn owner(&self) -> &ProcessIdentity {
        &self.owner
    }

    fn wait(
        &mut self,
        deadline: Instant,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Ready, BackendError> {
        let started = Instant::now();
        loop {
            if cancelled() {
                return Err(BackendError::Cancelled {
                    while_doing: "waiting for the sandbox to start",
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(BackendError::Timeout {
                    waited: started.elapsed(),
                });
            }
            let slice = (deadline - now).min(Duration::from_millis(50));
            let mut fds = [rustix::event::PollFd::new(
                self.stdout.get_ref(),
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(slice.subsec_nanos()),
            };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => return self.read_report(),
                Err(e) => {
                    return Err(BackendError::Io {
                        what: "cannot wait for the keeper's report in",
                        path: self.log.clone(),
                        source: e.into(),
                    })
                }
            }
        }
    }
}

impl LinuxStarting {
    fn read_report(&mut self) -> Result<Ready, BackendError> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(io_err("cannot read the keeper's report from", &self.log))?;
        if n == 0 {
            return Err(BackendError::OwnerExited {
                log: self.log.clone(),
                last_line: log_tail(&self.log),
            });
        }
        // The version first: a keeper of another airlock is never misread.
        let report: KeeperReport =
            crate::wire::decode(line.trim().as_bytes()).map_err(BackendError::Version)?;
        match report.outcome {
            KeeperOutcome::Ready {
                guest_pid,
                init_pid,
                timings,
            } => {
                let proven = |pid: u32, what: &'static str| {
                    settled_identity(pid).map_err(|source| BackendError::Identity {
                        what,
                        pid,
                        source,
                    })
                };
                let guest = proven(guest_pid, "the sandbox's PID 1")?;
                let init = proven(init_pid, "the sandbox's init stage")?;
                let data = LinuxData {
                    init: Some(init),
                    cgroup_name: self.cgroup_name.clone(),
                    host_version: report.version,
                };
                Ok(Ready {
                    guest,
                    backend_data: serde_json::to_value(data).unwrap_or_default(),
                    timings,
                })
            }
            KeeperOutcome::Failed(failure) => Err(BackendError::Start(failure)),
        }
    }
}

/// What the keeper warned about when the sandbox started (its [`START_WARNINGS`] file, in the
/// host-only state directory).
pub fn start_warnings(record: &SandboxRecord) -> Vec<String> {
    fs::read_to_string(record.paths.state_dir.join(START_WARNINGS))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The last line of the keeper's log, for an error message.
fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    let _ = fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text));
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(empty)")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counter file stays open: each read is the file's current text, from its start, of
    /// either cgroup version's format, longer than one read's buffer too.
    #[test]
    fn the_oom_counter_rereads_its_open_file_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.events");
        let write = |text: &str| {
            let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(0).unwrap();
            f.write_all(text.as_bytes()).unwrap();
        };
        fs::write(&path, "").unwrap();
        let counter = OomCounter(fs::File::open(&path).unwrap());
        assert_eq!(counter.read(), None);
        write("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
        assert_eq!(counter.read(), Some(0));
        let padding = "low 0\n".repeat(100);
        write(&format!("{padding}oom 2\noom_kill 3\noom_group_kill 0\n"));
        assert_eq!(counter.read(), Some(3));
    }

    /// `up`'s wait on a "keeper" that prints `line` as its report.
    fn wait_for_report(line: &str) -> Result<Ready, BackendError> {
        let mut child = Command::new("sh")
            .args(["-c", "printf '%s\\n' \"$1\"", "sh", line])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let owner = ownership::process_identity(std::process::id()).unwrap();
        let mut starting = LinuxStarting {
            _child: child,
            stdout: BufReader::new(stdout),
            owner,
            log: PathBuf::from("/nonexistent/keeper.log"),
            cgroup_name: "t".into(),
        };
        starting.wait(Instant::now() + Duration::from_secs(10), &|| false)
    }

    #[test]
    fn a_keeper_answering_another_or_no_protocol_version_is_refused_not_misread() {
        // A newer keeper's report, shaped like ours except for the version.
        let me = std::process::id();
        let newer = format!(
            r#"{{"version":{},"outcome":{{"ready":{{"guest_pid":{me},"init_pid":{me},"timings":[]}}}}}}"#,
            HOST_VERSION + 1
        );
        match wait_for_report(&newer) {
            Err(BackendError::Version(airlock_protocol::host::HostVersionError::Other {
                found,
            })) => assert_eq!(found, HOST_VERSION + 1),
            other => panic!("a newer keeper's report was read: {other:?}"),
        }
        // What a keeper from before versioning printed.
        let older = format!(r#"{{"Ready":{{"guest_pid":{me},"init_pid":{me},"timings":[]}}}}"#);
        match wait_for_report(&older) {
            Err(BackendError::Version(airlock_protocol::host::HostVersionError::Unversioned)) => {}
            other => panic!("an older keeper's report was read: {other:?}"),
        }
        // Ours is read, and the version is recorded for `status`.
        let ours = format!(
            r#"{{"version":{HOST_VERSION},"outcome":{{"ready":{{"guest_pid":{me},"init_pid":{me},"timings":[]}}}}}}"#
        );
        let ready = wait_for_report(&ours).expect("our own report");
        assert_eq!(ready.backend_data["host_version"], HOST_VERSION);
    }
}
