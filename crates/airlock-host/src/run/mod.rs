//! The ephemeral sandbox of `airlock run` (PRODUCT §2, I1–I9, O5), step by step. The verb
//! validates its command line, loads the configuration and builds the [`SandboxSpec`]
//! ([`build_spec`], a plain value: the runtime makes no policy decisions), then:
//!
//! 1. [`EphemeralRun::start`]: the init stage spawned (`Sandbox::spawn`), then, while it execs
//!    and loads, the limits (the sandbox's cgroup with its janitor, so a SIGKILLed airlock
//!    leaves none; where the user may not create cgroups, default limits are skipped with a
//!    warning naming `airlock doctor`, an explicit limit refuses the run), then the bootstrap
//!    message (`Spawning::send_bootstrap`), then, while the init stage reads it and unshares,
//!    the egress sockets (the proxy child starts on the first connection, `egress::lazy`), then
//!    the rest of the sandbox's handshake (`Booting::finish`); the init stage joins the cgroup
//!    as soon as it has its bootstrap message, before it unshares anything and before PID 1
//!    exists, so every sandbox process is inside it.
//! 2. The verb execs CMD through the control channel of [`EphemeralRun::sandbox`].
//! 3. [`EphemeralRun::finish`]: kill the sandbox (`Sandbox::kill_with`), remove its cgroup,
//!    stop the proxy.
//!
//! If airlock itself dies, the sandbox dies with it (PDEATHSIG chain, control socket EOF) and
//! the janitor removes the cgroup.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use airlock_config::{env_vars, Effective, Roots};
use airlock_linux::bootstrap::{BootstrapError, Stage};
use airlock_linux::host::{Sandbox, StartError, StartOptions};
use airlock_linux::spec::{HostUser, Image, Limit, Limits, Mapping, SandboxSpec};

use crate::error::{ErrorKind, HostError};
use crate::paths::ensure_root;

pub mod limits;

/// A started ephemeral sandbox with its egress proxy and cgroup; [`EphemeralRun::finish`]
/// tears all three down.
pub struct EphemeralRun {
    sandbox: Sandbox,
    egress: RunEgress,
    cgroup: limits::RunCgroup,
    warn: limits::Warn,
    /// The imported image's hold: `image rm` refuses while this run lives.
    _image: Option<airlock_image::ImageHold>,
}

impl EphemeralRun {
    /// Starts the egress proxy, the cgroup and the sandbox of `spec` (steps 3–4 of a run),
    /// reporting each phase to `phases` and each warning (limits skipped, a cgroup that could
    /// not be removed) to `warn`. On failure nothing started is left behind.
    pub fn start(
        roots: &Roots,
        project_root: Option<PathBuf>,
        spec: &mut SandboxSpec,
        phases: &mut Phases,
        warn: limits::Warn,
    ) -> Result<Self, HostError> {
        ensure_root(roots, &roots.runtime)?;
        let image = hold_image(roots, &spec.image)?;
        let opts = StartOptions {
            exe: PathBuf::from("/proc/self/exe"),
            sandboxes_dir: roots.runtime.join("sandboxes"),
            // `run --root` only: nothing else reaches a run's sandbox as root.
            root_view: spec.require_root,
            // This process alone talks to the sandbox: the key stays in its memory.
            key_file: false,
            scan_cache: Some(roots.runtime.join(airlock_linux::idmounts::SCAN_CACHE_FILE)),
        };
        // Runtime directories of runs whose airlock was killed (L9: ownership-checked cleanup).
        airlock_linux::host::sweep_stale(&opts.sandboxes_dir);
        // The init stage first: it execs and loads while the cgroup and the egress directory
        // are made, which only its bootstrap message (sent by the handshake) needs. It joins
        // the cgroup itself when it has read that message, before it unshares anything and
        // before PID 1 exists (`airlock_linux::init`).
        phases.done("prepare");
        // The cgroup is made on a thread meanwhile: spawning blocks this thread until the init
        // stage has exec'd (`sys::spawn`), time the cgroup's directories and limits (cgroupfs
        // calls only) take on the other CPU. Its janitor is started here, by the thread that
        // outlives the sandbox, before the init stage can join the cgroup (its bootstrap
        // message, sent below, lets it).
        let (spawning, cgroup) = std::thread::scope(|s| {
            let made = std::thread::Builder::new()
                .name("airlock-cgroup".to_owned())
                .spawn_scoped(s, || limits::create(spec, warn));
            let spawning = Sandbox::spawn(spec, &opts, None);
            let cgroup = match made {
                Ok(thread) => thread.join().unwrap_or_else(|_| {
                    Err(HostError::internal(
                        "run.cgroup",
                        "the thread making the sandbox's cgroup panicked",
                    ))
                }),
                Err(_) => limits::create(spec, warn),
            };
            (spawning, cgroup)
        });
        let spawning = match spawning {
            Ok(spawning) => spawning,
            Err(e) => {
                if let Ok(mut cgroup) = cgroup {
                    cgroup.destroy();
                }
                return Err(start_error(e));
            }
        };
        phases.restart();
        // The cgroup before the egress proxy, so the proxy runs inside the sandbox's limits
        // from its start (9.10: a connection flood from inside costs the sandbox, not the
        // host). Dropping `spawning` on a failure kills the init stage, which has not had its
        // bootstrap message.
        let mut cgroup = cgroup?;
        if let Err(e) = cgroup.start_janitor() {
            // The cgroup is already removed.
            drop(spawning);
            return Err(e);
        }
        phases.done("cgroup");
        // The join files, opened once (cgroupfs opens are not free): the proxy child gets
        // duplicates, the init stage these.
        let join = match cgroup.join_fds() {
            Ok(join) => join,
            Err(e) => {
                drop(spawning);
                cgroup.destroy();
                return Err(start_error(StartError::Limits(e)));
            }
        };
        let egress_join = join
            .as_ref()
            .map(airlock_linux::cgroup::JoinFds::try_clone)
            .transpose()
            .map_err(|e| {
                HostError::new(
                    ErrorKind::BackendUnavailable,
                    "backend.cgroup",
                    format!("cannot open the sandbox's cgroup for the egress proxy: {e}"),
                )
            });
        let egress_join = match egress_join {
            Ok(j) => j,
            Err(e) => {
                drop(spawning);
                cgroup.destroy();
                return Err(e);
            }
        };
        // The bootstrap message before the egress directory: the init stage reads it, joins the
        // cgroup and unshares while the directory and its sockets are made, which only the
        // mounts need (`mapped` and later). The spec names the directory already.
        if let Some(e) = spec.egress.as_mut() {
            e.host_dir = egress_relay_dir(roots, &spec.id);
        }
        let booting = match spawning.send_bootstrap(spec, join.as_ref()) {
            Ok(b) => b,
            Err(e) => {
                cgroup.destroy();
                return Err(start_error(e));
            }
        };
        drop(join);
        phases.done("bootstrap");
        let egress = match start_egress(roots, project_root, spec, egress_join, warn) {
            Ok(egress) => egress,
            Err(e) => {
                drop(booting);
                cgroup.destroy();
                return Err(e);
            }
        };
        phases.done("egress");
        let sandbox = match booting.finish() {
            Ok(s) => s,
            Err(e) => {
                cgroup.destroy();
                return Err(start_error(e));
            }
        };
        let t = sandbox.timings;
        phases.add("spawn", t.prepare);
        phases.add("namespaces", t.namespaces);
        phases.add("maps", t.maps);
        phases.add("idmounts", t.idmounts);
        phases.add("idmounts-wait", t.scan);
        phases.add("rootfs+pivot_root", t.rootfs);
        add_issue9_costs(phases, &t);
        phases.restart();
        Ok(Self {
            sandbox,
            egress,
            cgroup,
            warn,
            _image: image,
        })
    }

    /// The running sandbox, to exec the command through its control channel.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Opens an exec stream to the sandbox's PID 1 over its control channel (`SCM_RIGHTS`);
    /// the caller authenticates it with [`Sandbox::key`].
    pub fn open_stream(&self) -> Result<std::os::unix::net::UnixStream, HostError> {
        let control = self.sandbox.control().ok_or_else(|| {
            HostError::internal("run.control", "the sandbox's control channel is closed")
        })?;
        let stream = airlock_protocol::open_stream(control)
            .map_err(|e| HostError::internal("run.stream", e.to_string()))?;
        fault_hook(&stream);
        Ok(stream)
    }

    /// `Some` when the OOM killer ended a process of the sandbox (or its proxy) so far.
    pub fn out_of_memory(&self) -> Option<limits::OutOfMemory> {
        self.cgroup.out_of_memory()
    }

    /// Kills the sandbox, stops the proxy and removes the cgroup. CMD is done: while the kernel
    /// tears the killed sandbox down (its exiting tasks unmount its filesystems, about a
    /// millisecond during which this process would only wait), the proxy is reaped, the egress
    /// directory removed and the run's state directory retired (its audit log kept in
    /// `<state>/run-logs` when it holds anything, see `lifecycle::runs`); none of them needs
    /// the sandbox gone, and a sandbox process about to die can no longer reach the proxy
    /// once its listeners are closed. The cgroup goes last, once every process in it is gone.
    /// A sandbox that did not die cleanly is the error, for a warning: everything else was
    /// still torn down.
    pub fn finish(self, phases: &mut Phases) -> Result<(), StartError> {
        // The image's hold (bound, not dropped) ends with this function, after the sandbox.
        let Self {
            sandbox,
            mut egress,
            mut cgroup,
            warn,
            _image,
        } = self;
        egress.begin_stop();
        // CMD has exited and its status is read: nothing more is asked of the guest, so PID 1
        // and the init stage are SIGKILLed together rather than PID 1 woken to shut down.
        let mut stopped = Ok(());
        let destroyed = sandbox.kill_with(|| stopped = egress.stop());
        phases.done("destroy");
        cgroup.destroy();
        phases.done("cgroup-remove");
        if let Err(e) = stopped {
            warn(&e.to_string());
        }
        destroyed
    }
}

/// The ephemeral sandbox's egress proxy (N1), started on the first connection
/// (`egress::lazy`), stopped and its directory removed on drop; the run's state directory
/// (its audit log, created right before the proxy starts) is retired after the proxy is gone.
pub(crate) struct RunEgress {
    dir: std::path::PathBuf,
    proxy: Option<crate::egress::lazy::LazyProxy>,
    /// `<state>/runs/<id>` and `<state>/run-logs`, until retired (the first exists only when
    /// a proxy was started).
    state: Option<(PathBuf, PathBuf)>,
    warn: limits::Warn,
}

impl RunEgress {
    /// Signals the proxy to end, without waiting (see [`RunEgress::stop`]).
    fn begin_stop(&mut self) {
        if let Some(proxy) = self.proxy.as_mut() {
            proxy.begin_stop();
        }
    }

    /// Reaps the proxy, removes the egress directory and retires the run's state directory.
    fn stop(mut self) -> Result<(), HostError> {
        self.end_proxy();
        self.retire_state()
    }

    fn end_proxy(&mut self) {
        drop(self.proxy.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// After the proxy is reaped (it wrote the audit log until then). A run whose command made
    /// no request started no proxy and created no state directory.
    fn retire_state(&mut self) -> Result<(), HostError> {
        match self.state.take() {
            Some((run_dir, logs)) if run_dir.symlink_metadata().is_ok() => {
                crate::lifecycle::runs::retire(&run_dir, &logs).map(drop)
            }
            Some(_) | None => Ok(()),
        }
    }
}

impl Drop for RunEgress {
    fn drop(&mut self) {
        self.end_proxy();
        if let Err(e) = self.retire_state() {
            (self.warn)(&e.to_string());
        }
    }
}

/// Creates `<runtime>/egress/<id>/` (0700, with an `owner` marker: this process's pid and start
/// time, so a run killed before its cleanup leaves a directory the next run's sweep proves stale
/// and removes) and in it `relay/`, the egress directory bound into the sandbox, with the
/// relays' sockets bound; the proxy child starts on the first connection, inside the sandbox's
/// cgroup (`join`). The audit log goes to `<state>/runs/<id>/audit.jsonl`, whose directory is
/// created (with its own owner marker) right before the proxy starts; the run retires it when
/// it ends (see `lifecycle::runs`).
pub(crate) fn start_egress(
    roots: &Roots,
    project_root: Option<PathBuf>,
    spec: &mut SandboxSpec,
    join: Option<airlock_linux::cgroup::JoinFds>,
    warn: limits::Warn,
) -> Result<RunEgress, HostError> {
    use crate::egress::{lazy::LazyProxy, materialize};
    let base = roots.runtime.join("egress");
    ensure_root(roots, &base)?;
    airlock_linux::host::sweep_stale(&base);
    let outer = base.join(&spec.id);
    let dir = egress_relay_dir(roots, &spec.id);
    let image_root = spec.image.root_dir().to_path_buf();
    let mut guard = RunEgress {
        dir: outer.clone(),
        proxy: None,
        state: None,
        warn,
    };
    ensure_root(roots, &outer)?;
    // The same mark as the cgroup's and the runtime directory's (read from `/proc` once).
    let started = airlock_linux::host::own_start_time().ok_or_else(|| {
        HostError::internal(
            "egress.owner",
            "cannot read this process's start time from /proc/self/stat",
        )
    })?;
    write_marker(
        &outer.join(airlock_linux::host::OWNER_FILE),
        format!("{} {started}\n", std::process::id()).as_bytes(),
    )?;
    materialize(&dir, roots, &image_root)?;
    let runs = crate::lifecycle::runs::runs_root(&roots.state);
    let logs = crate::lifecycle::runs::run_logs_root(&roots.state);
    let run_dir = runs.join(&spec.id);
    let audit = run_dir.join(crate::paths::AUDIT_LOG_FILE);
    guard.state = Some((run_dir, logs.clone()));
    let before: crate::egress::lazy::BeforeStart = {
        let (roots, id) = (roots.clone(), spec.id.clone());
        Box::new(move || {
            ensure_root(&roots, &runs)?;
            ensure_root(&roots, &logs)?;
            crate::lifecycle::runs::create_run_dir(&runs, &id).map(drop)
        })
    };
    let start = crate::wire::egress_start(dir.clone(), project_root, audit);
    let sockets = crate::egress::lazy::socket_names(spec);
    guard.proxy = Some(LazyProxy::start(start, &sockets, join, before, warn)?);
    if let Some(e) = spec.egress.as_mut() {
        e.host_dir = dir;
    }
    Ok(guard)
}

/// `<runtime>/egress/<id>/relay`: the egress directory of sandbox `id` (see [`start_egress`]).
fn egress_relay_dir(roots: &Roots, id: &str) -> PathBuf {
    roots.runtime.join("egress").join(id).join("relay")
}

/// Writes the owner marker into the fresh egress directory: a new 0600 file, no fsync. The
/// directory lives in the runtime root, which does not survive a reboot, so durability buys
/// nothing (an fsync there cost several milliseconds per run on a disk-backed runtime root); a
/// sweep that reads a marker still being written cannot parse it and leaves the directory alone
/// (the same rule as the sandbox runtime directories, see `airlock_linux::host::sweep_stale`).
fn write_marker(path: &Path, content: &[u8]) -> Result<(), HostError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(content))
        .map_err(|e| {
            HostError::internal(
                "egress.owner",
                format!("cannot write {}: {e}", path.display()),
            )
        })
}

/// Issue 9's budget ("the id-mapped mounts and the tmpfs sizes must not cost more than 0.5 ms
/// of `run -- true`"), one `cost:<name>` line each (scripts/bench-run sums them): on the
/// critical path the host's pairing and passing of the id-mapped mounts, its wait for the thread
/// that made the image's mounts and scanned for what others may not read, and the init stage's
/// parts (`rootfs/costs.rs` of airlock-linux, inside `rootfs+pivot_root`); off it (`overlapped-`,
/// each overlapping the spawn of the init stage, CPU rather than wall time) what was made
/// meanwhile. All zero for an unprivileged invoker except the tmpfs sizes.
fn add_issue9_costs(phases: &Phases, t: &airlock_linux::host::StartTimings) {
    phases.add("cost:host-idmounts", t.idmounts);
    phases.add("cost:host-idmounts-wait", t.scan);
    for (name, took) in t.init_costs.named() {
        phases.add(&format!("cost:{name}"), took);
    }
    phases.add("cost:overlapped-host-owned-idmounts", t.owned_mounts);
    phases.add("cost:overlapped-host-image-idmounts", t.image_mounts);
    phases.add("cost:overlapped-host-scan-unreadable", t.scan_walk);
}

/// How long each step of a run took (`AIRLOCK_TRACE_PHASES`, for scripts/bench): every phase
/// goes to the sink the caller gave, as it ends; without a sink nothing is measured out.
pub struct Phases {
    sink: Option<fn(&str, Duration)>,
    since: std::time::Instant,
}

impl Phases {
    pub fn new(sink: Option<fn(&str, Duration)>) -> Self {
        Self {
            sink,
            since: std::time::Instant::now(),
        }
    }

    pub fn add(&self, name: &str, took: Duration) {
        if let Some(sink) = self.sink {
            sink(name, took);
        }
    }

    /// The phase `name` ended now; the next one starts.
    pub fn done(&mut self, name: &str) {
        self.add(name, self.since.elapsed());
        self.restart();
    }

    pub fn restart(&mut self) {
        self.since = std::time::Instant::now();
    }
}

/// The invoking host user: uid/gid of this process, name from `/etc/passwd` (or `$USER`).
fn host_user(home: &Path) -> HostUser {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let name = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| airlock_linux::doctor::user_name_for(&text, uid))
        .or_else(|| std::env::var(env_vars::USER).ok())
        .unwrap_or_default();
    HostUser {
        uid,
        gid,
        name,
        home: home.to_path_buf(),
    }
}

/// Test hook, debug builds only (release builds never read it): `AIRLOCK_TEST_FAULT=
/// stream-closed` shuts the freshly opened stream down before the handshake, as a guest that
/// died at that moment would, so the internal-error path (exit 70) can be driven for real.
fn fault_hook(stream: &std::os::unix::net::UnixStream) {
    if cfg!(debug_assertions)
        && std::env::var("AIRLOCK_TEST_FAULT").is_ok_and(|f| f == "stream-closed")
    {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}

/// A hold on the imported image a sandbox uses (none for other images), taken before the
/// sandbox starts and kept until a run ends (or `up` has written its record and finished), so
/// `image rm` cannot take its tree away meanwhile; a persistent sandbox is then found through
/// its record.
pub fn hold_image(
    roots: &Roots,
    image: &Image,
) -> Result<Option<airlock_image::ImageHold>, HostError> {
    let Image::Imported(i) = image else {
        return Ok(None);
    };
    let unavailable = |detail: String| {
        HostError::new(ErrorKind::Config, "image.not_found", detail)
            .with_hint("`airlock image ls` lists the imported images")
    };
    let name = airlock_image::ImageName::parse(&i.name).map_err(unavailable)?;
    let store = airlock_image::Store::open_existing(&roots.data)
        .map_err(|e| unavailable(e.to_string()))?
        .ok_or_else(|| unavailable(format!("no image named {name:?} is imported")))?;
    store
        .hold(&name)
        .map(Some)
        .map_err(|e| unavailable(e.to_string()))
}

/// The imported image `name`, as the backend needs it (its tree and, for L1, its digest).
fn imported(name: &str) -> Result<airlock_linux::spec::ImportedImage, HostError> {
    let missing = |detail: String| {
        HostError::new(ErrorKind::Config, "image.not_found", detail).with_hint(
            "`airlock image ls` lists the imported images; `airlock image import FILE --name \
             NAME` imports one",
        )
    };
    let roots = airlock_config::Roots::from_env(|k| std::env::var_os(k))?;
    let name = airlock_image::ImageName::parse(name).map_err(missing)?;
    let store = airlock_image::Store::open_existing(&roots.data)
        .map_err(|e| missing(e.to_string()))?
        .ok_or_else(|| missing(format!("no image named {name:?} is imported")))?;
    let info = store.get(&name).map_err(|e| missing(e.to_string()))?;
    Ok(airlock_linux::spec::ImportedImage {
        rootfs: store.rootfs(&name),
        name: info.name,
        digest: info.digest,
    })
}

/// `workspace_mode = "clone"` promises that the host work tree is never written; an ephemeral
/// run has no clone of its own, so it refuses rather than mapping the work tree (A5).
pub fn refuse_clone_mode(effective: &Effective) -> Result<(), HostError> {
    use airlock_config::raw::WorkspaceMode;
    match effective
        .workspaces
        .iter()
        .find(|w| w.mode.value == WorkspaceMode::Clone)
    {
        Some(w) => Err(HostError::new(
            ErrorKind::Config,
            "run.clone_mode",
            format!(
                "workspace {} uses workspace_mode = \"clone\", which `run` does not support: \
                 it would map the work tree itself",
                w.name
            ),
        )
        .with_hint("use `airlock up --no-attach` and `airlock exec`, which work in the clone")),
        None => Ok(()),
    }
}

pub fn build_spec(eff: &Effective, root: bool) -> Result<SandboxSpec, HostError> {
    use airlock_config::Origin;
    let image = match &eff.image.value {
        airlock_config::effective::Image::Host => Image::Host,
        airlock_config::effective::Image::Directory(p) => Image::Directory(p.clone()),
        airlock_config::effective::Image::Named(name) => Image::Imported(imported(name)?),
    };
    let explicit = |o: Origin| match o {
        Origin::Default => false,
        Origin::User | Origin::Project | Origin::Flag => true,
    };
    let limits = Limits {
        memory_mb: Some(Limit {
            value: eff.memory_mb.value,
            explicit: explicit(eff.memory_mb.origin),
        }),
        pids_max: Some(Limit {
            value: eff.pids_max.value,
            explicit: explicit(eff.pids_max.origin),
        }),
        cpus: eff.cpus.value.map(|value| Limit {
            value,
            explicit: explicit(eff.cpus.origin),
        }),
    };
    let user = host_user(&eff.home.sandbox_path);
    let home = eff.home.sandbox_path.to_string_lossy().into_owned();
    let id = sandbox_id();
    Ok(SandboxSpec {
        hostname: "airlock".to_owned(),
        image,
        workspaces: eff
            .workspaces
            .iter()
            .map(|w| Mapping {
                host: w.host_path.clone(),
                sandbox: w.sandbox_path.clone(),
                writable: true,
            })
            .collect(),
        mounts: eff
            .mounts
            .iter()
            .map(|m| Mapping {
                host: m.host_path.clone(),
                sandbox: m.sandbox_path.clone(),
                writable: !m.read_only,
            })
            .chain(eff.workspaces.iter().flat_map(linked_git_mappings))
            .collect(),
        env: vec![
            (
                env_vars::PATH.to_owned(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            ),
            (
                env_vars::LANG.to_owned(),
                env_vars::SANDBOX_LOCALE.to_owned(),
            ),
            (env_vars::HOME.to_owned(), home),
        ],
        user,
        limits,
        require_root: root,
        id,
        egress: None,
        protect: protected_paths(eff),
    })
}

/// The effective protected paths that are not lifted, as the runtime takes them (issue 9.9).
fn protected_paths(eff: &Effective) -> Vec<airlock_linux::spec::Protected> {
    use airlock_config::protect::IfMissing as From;
    use airlock_linux::spec::IfMissing as To;
    eff.protect
        .iter()
        .filter(|p| !p.lifted)
        .map(|p| airlock_linux::spec::Protected {
            path: p.path.clone(),
            if_missing: match p.if_missing {
                From::Skip => To::Skip,
                From::Dir => To::Dir,
                From::File => To::File,
            },
            files_only: p.files_only,
        })
        .collect()
}

/// For a linked git worktree: the main repository's git directory read-write (A5: commits and
/// branches work inside), with its `config` and `hooks` read-only on top (C8: the host executes
/// or trusts them; both are mount points, so they cannot be renamed away either). The git
/// directory was confirmed by git's own back-pointer when the configuration was loaded (C7).
/// These are mounts, not workspaces: the workspace protection rules (`.git/hooks` below a work
/// tree) do not fit a git directory.
fn linked_git_mappings(w: &airlock_config::effective::Workspace) -> Vec<Mapping> {
    let mut out = Vec::new();
    if let Some(linked) = &w.linked_git_dir {
        let common = &linked.common_dir;
        out.push(Mapping {
            host: common.clone(),
            sandbox: common.clone(),
            writable: true,
        });
        for protected in ["config", "hooks"] {
            let path = common.join(protected);
            // `up` creates a missing `hooks` directory before it builds the spec, so the
            // sandbox cannot plant one; a missing `config` means git itself cannot work.
            if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_symlink()) {
                out.push(Mapping {
                    host: path.clone(),
                    sandbox: path,
                    writable: false,
                });
            }
        }
    }
    out
}

/// `run-<pid>-<random>`: unique among this user's live sandboxes, `[a-z0-9-]`.
fn sandbox_id() -> String {
    let mut b = [0u8; 4];
    let _ = getrandom_bytes(&mut b);
    let r: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("run-{}-{r}", std::process::id())
}

fn getrandom_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// The working directory inside the sandbox: `-w` (relative to the current directory), else
/// the current directory when it is mapped, else the first workspace. It must lie inside a
/// workspace, a mount or the sandbox home once symlinks are resolved; `/proc` paths (e.g.
/// `/proc/self/fd/N`, which would name a host descriptor) and `..` escapes are refused.
pub fn resolve_workdir(
    requested: Option<&Path>,
    cwd: &Path,
    spec: &SandboxSpec,
) -> Result<PathBuf, HostError> {
    let mapped: Vec<&Path> = spec
        .workspaces
        .iter()
        .chain(spec.mounts.iter())
        .map(|m| m.sandbox.as_path())
        .collect();
    let home = spec.user.home.as_path();
    let refuse = |p: &Path, why: &str| {
        HostError::usage(format!("-w {}: {why}", p.display())).with_hint(
            "pass a directory inside the project's workspace, a configured mount or $HOME",
        )
    };
    let Some(req) = requested else {
        let inside = mapped.iter().any(|m| cwd.starts_with(m));
        return Ok(if inside {
            cwd.to_path_buf()
        } else {
            mapped
                .first()
                .map(|m| m.to_path_buf())
                .unwrap_or_else(|| home.to_path_buf())
        });
    };
    let joined =
        normalize(&cwd.join(req)).ok_or_else(|| refuse(req, "escapes the root with '..'"))?;
    if joined.starts_with("/proc") || joined.starts_with("/dev") {
        return Err(refuse(req, "paths through /proc or /dev are not allowed"));
    }
    if let Some(m) = mapped.iter().find(|m| joined.starts_with(m)) {
        // Same path on the host: resolve symlinks there and require the result to stay inside.
        let real = std::fs::canonicalize(&joined)
            .map_err(|e| refuse(req, &format!("cannot be resolved ({e})")))?;
        if !real.starts_with(m) || !real.is_dir() {
            return Err(refuse(
                req,
                "resolves outside the mapped directory or is not a directory",
            ));
        }
        return Ok(real);
    }
    if joined.starts_with(home) {
        // The sandbox's own home starts empty: only the home itself exists at start.
        if joined == home {
            return Ok(joined);
        }
        return Err(refuse(req, "does not exist in the sandbox's (empty) home"));
    }
    Err(refuse(req, "is outside the sandbox's mapped directories"))
}

/// Lexical normalization of an absolute path; `None` when `..` climbs above `/`.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

/// Classifies a start failure (PRODUCT O5: 69 when the host cannot provide the backend).
pub fn start_error(e: StartError) -> HostError {
    let doctor = "run `airlock doctor` to see what this host is missing";
    match &e {
        StartError::RootUnavailable { .. } => HostError::new(
            ErrorKind::BackendUnavailable,
            "run.root_unavailable",
            e.to_string(),
        )
        .with_hint("run without --root, or add subordinate ids (see `airlock doctor`)"),
        StartError::IdMap(_) => HostError::new(
            ErrorKind::BackendUnavailable,
            "backend.idmap",
            e.to_string(),
        )
        .with_hint(doctor),
        StartError::IdMount(_) => HostError::new(
            ErrorKind::BackendUnavailable,
            "backend.idmount",
            e.to_string(),
        )
        .with_hint(doctor),
        StartError::Init { source } => match source {
            BootstrapError::Remote {
                stage: Stage::Namespaces,
                message,
            } => HostError::new(
                ErrorKind::BackendUnavailable,
                "backend.namespaces",
                format!(
                    "this host does not let airlock create the sandbox's namespaces \
                         (user, mount, pid, net, uts, ipc, cgroup): {message}"
                ),
            )
            .with_hint(doctor),
            BootstrapError::Remote {
                stage: Stage::Rootfs,
                message,
            } => HostError::new(
                ErrorKind::BackendUnavailable,
                "backend.rootfs",
                format!(
                    "this host cannot build the sandbox's root filesystem (overlayfs, tmpfs, \
                         proc and sysfs inside a user namespace): {message}"
                ),
            )
            .with_hint(doctor),
            BootstrapError::Remote {
                stage: Stage::Image,
                message,
            } => HostError::new(ErrorKind::Failed, "image.unusable", message.clone()).with_hint(
                "this image cannot be a sandbox's root filesystem: import a corrected archive, \
                 or use another image",
            ),
            BootstrapError::Remote {
                stage: Stage::Init, ..
            }
            | BootstrapError::Read(_)
            | BootstrapError::Decode(_)
            | BootstrapError::Sync(_)
            | BootstrapError::Closed { .. }
            | BootstrapError::Unexpected { .. } => {
                HostError::internal("run.start", e.to_string()).with_hint(doctor)
            }
        },
        StartError::Limits(_) => HostError::new(
            ErrorKind::BackendUnavailable,
            "backend.cgroup",
            e.to_string(),
        )
        .with_hint(doctor),
        StartError::Create { .. } | StartError::Io { .. } | StartError::Spawn { .. } => {
            HostError::internal("run.start", e.to_string())
                .with_hint("check the permissions of airlock's runtime directory")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_with(ws: &Path, home: &Path) -> SandboxSpec {
        let user = HostUser {
            uid: 1,
            gid: 1,
            name: "u".into(),
            home: home.into(),
        };
        let workspace = Mapping {
            host: ws.into(),
            sandbox: ws.into(),
            writable: true,
        };
        SandboxSpec {
            workspaces: vec![workspace],
            ..SandboxSpec::bare("t", user)
        }
    }

    #[test]
    fn workdir_through_proc_fd_or_outside_mappings_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("out")).unwrap();
        let spec = spec_with(&ws, Path::new("/home/u"));
        let ok = resolve_workdir(Some(Path::new("sub")), &ws, &spec).unwrap();
        assert_eq!(ok, ws.join("sub"));
        for bad in ["/proc/self/fd/3", "/etc", "out", "../..", "/dev/fd/4"] {
            assert!(
                resolve_workdir(Some(Path::new(bad)), &ws, &spec).is_err(),
                "{bad} was accepted"
            );
        }
        assert_eq!(
            resolve_workdir(Some(Path::new("/home/u")), &ws, &spec).unwrap(),
            PathBuf::from("/home/u")
        );
    }
}
