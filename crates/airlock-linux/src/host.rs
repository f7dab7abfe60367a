//! The host side of starting and destroying one sandbox.
//!
//! [`Sandbox::start`] is the start sequence, in order:
//! 1. Decide the id maps ([`crate::idmap::plan`]; a root invoker first claims the sandbox's own id
//!    range); refuse at once when `--root` was required and the host cannot provide a root
//!    identity (with the exact reason).
//! 2. Create the sandbox's 0700 runtime directory, and in it the owner marker (`pid start-time`,
//!    see [`sweep_stale`]), the per-epoch key (32 random bytes, 0600, only when other processes
//!    need it: [`StartOptions::key_file`]) and an empty `scratch`
//!    directory the init stage mounts its tmpfs on.
//! 3. Create the control socketpair, the handshake socketpair and the bootstrap pipe, all
//!    close-on-exec; spawn `airlock __init` with exactly those three at fixed numbers and an empty
//!    environment (nothing of the host environment reaches the guest implicitly).
//!    [`Sandbox::spawn`] ends here: a caller may finish the spec while the init stage execs
//!    and loads (`run` makes its cgroup then), then calls [`Spawning::handshake`].
//! 4. Send the bootstrap message (spec and key) through the pipe (and, for a cgroup made after
//!    the spawn, its join files: `cgroup`), then run the handshake ([`Spawning::handshake`],
//!    or [`Spawning::send_bootstrap`] and [`Booting::finish`] for a caller with work that only
//!    the handshake's rest needs: `run` makes its egress directory in between):
//!    `unshared` → write the id maps → `mapped` (for a root invoker with its
//!    id-mapped mounts, `idmounts.rs`) → `pid1 N` → `ready`.
//!    Any failure kills the init stage and removes everything created above; each step may take
//!    at most [`START_TIMEOUT`].
//!
//! [`Sandbox::kill_with`] (`run`, once its command has exited, and a keeper stopping its
//! sandbox) ends PID 1 and the init stage with SIGKILL together, waits for both, reaps both and
//! removes the runtime directory; dropping a [`Sandbox`] kills it too, reporting nothing.
//!
//! Lifetime: the init stage has `PR_SET_PDEATHSIG(SIGKILL)` bound to the *thread* that spawned
//! it, so call `start` from a thread that lives as long as the sandbox (the main thread).

use std::fs;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock_protocol::Key;
use thiserror::Error;

use crate::bootstrap::{
    Bootstrap, BootstrapError, Sync, BOOTSTRAP_FD, CONTROL_FD, INIT_VERB, KEY_LEN, SYNC_FD,
};
use crate::idmap::{self, HostIds, IdMapError, IdPlan};
use crate::idmounts::{self, IdMountError};
use crate::spec::{Image, SandboxSpec};

#[derive(Debug, Error)]
pub enum StartError {
    #[error("--root is not available on this host: {reason}")]
    RootUnavailable { reason: String },
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the sandbox's id maps: {0}")]
    IdMap(#[from] IdMapError),
    #[error(transparent)]
    IdMount(#[from] IdMountError),
    #[error("the sandbox did not start: {source}")]
    Init {
        #[source]
        source: BootstrapError,
    },
    #[error("cannot apply the sandbox's resource limits: {0}")]
    Limits(#[source] crate::cgroup::CgroupError),
}

/// What a root invoker's host prepares on a thread of its own while the init stage is spawned
/// and unshares (B3: off the critical path): the image's id-mapped mounts and the entries of
/// the image others may not read (issue 9.5).
struct Background {
    image: idmounts::ImageMounts,
    unreadable: Vec<idmounts::Unreadable>,
    /// How long each took (not on the critical path; reported with `AIRLOCK_TRACE_PHASES`).
    image_took: Duration,
    scan_took: Duration,
}

type BackgroundThread = std::thread::JoinHandle<Result<Background, IdMountError>>;

impl Background {
    /// Starts the thread: the image's mounts first (through a namespace with the sandbox's own
    /// maps, `plan`'s), then, when `--root` processes may run (`root_view`), the scan (its walk
    /// of `/usr` and `/lib*` cached in `cache`). Without them nothing in the sandbox holds
    /// in-sandbox root but airlock's own init stage and PID 1: nothing is masked, and the
    /// `host` image's maps leave out the sandbox user's ids, so that no file of it is the
    /// sandbox user's (`rootfs/unreadable.rs`).
    fn spawn(
        spec: &SandboxSpec,
        plan: &IdPlan,
        cache: Option<PathBuf>,
        root_view: bool,
    ) -> BackgroundThread {
        let image = spec.image.clone();
        let (uid_map, gid_map) = if root_view || !matches!(image, Image::Host) {
            (plan.uid_map_text(), plan.gid_map_text())
        } else {
            plan.image_map_texts_without_sandbox_user()
        };
        std::thread::spawn(move || {
            let t = Instant::now();
            let image = idmounts::prepare_image(&image, &uid_map, &gid_map)?;
            let image_took = t.elapsed();
            let t = Instant::now();
            let unreadable = if root_view {
                idmounts::scan_unreadable(cache.as_deref())?
            } else {
                Vec::new()
            };
            Ok(Background {
                image,
                unreadable,
                image_took,
                scan_took: t.elapsed(),
            })
        })
    }
}

/// How long each step of the start handshake may take before the start is abandoned.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to start sandboxes.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// The airlock binary, exec'd as `airlock __init` (normally `/proc/self/exe`).
    pub exe: PathBuf,
    /// Directory holding one 0700 subdirectory per live sandbox (under the runtime root).
    pub sandboxes_dir: PathBuf,
    /// Whether `--root` processes may run in this sandbox (`run --root`, and every sandbox
    /// `exec` can reach: persistent sandboxes, whose `exec --root` and provisioning run as
    /// in-sandbox root). A root invoker's sandbox then gets the root view, in which what
    /// `--root` writes to a workspace belongs to the invoker (`rootfs/root_view.rs`), and the
    /// masks over what others may not read in the image, which its in-sandbox root could read
    /// otherwise (`rootfs/unreadable.rs`): one more user namespace, a clone of each mapping and
    /// the walk of `/etc` and `/opt` at start. Without it (a plain `run`) nothing in the sandbox
    /// holds in-sandbox root but airlock's init stage and PID 1, which refuses `--root`
    /// processes, so the image is neither scanned nor masked and is shown without the sandbox
    /// user's ids: every sandbox process gets the kernel's "others" permission on it.
    pub root_view: bool,
    /// Whether the per-epoch key is also written to `<dir>/key` (0600) for other airlock
    /// processes (`exec` into a persistent sandbox). An ephemeral run holds it in memory only.
    pub key_file: bool,
    /// Where the walk of the image's `/usr` and `/lib*` for entries others may not read is
    /// cached between starts (`idmounts::SCAN_CACHE_FILE` in the runtime root, one for every
    /// sandbox of the user, never inside a directory that holds one entry per sandbox); `None`
    /// walks them at every start that scans.
    pub scan_cache: Option<PathBuf>,
}

/// Time spent in each start phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartTimings {
    /// Runtime directory, key, descriptors, spawning the init stage.
    pub prepare: Duration,
    /// Until the init stage has unshared its namespaces.
    pub namespaces: Duration,
    /// Writing the id maps.
    pub maps: Duration,
    /// From the maps written to the id-mapped mounts sent (root invokers only), without
    /// [`StartTimings::scan`]: pairing and passing what was made off the critical path.
    pub idmounts: Duration,
    /// Waiting for the background thread (root invokers only): the image's mounts and the scan
    /// for what others may not read run on it from the start, so this is what they did not
    /// overlap.
    pub scan: Duration,
    /// Off the critical path (root invokers only), each overlapping the spawn of the init stage:
    /// the workspaces' and egress mounts (`map:<i>`, main thread), the image's mounts and the
    /// scan (background thread). Not additive with the phases above.
    pub owned_mounts: Duration,
    pub image_mounts: Duration,
    pub scan_walk: Duration,
    /// What the init stage reported with `ready` (`rootfs/costs.rs`): its share of issue 9's
    /// budget, inside [`StartTimings::rootfs`].
    pub init_costs: crate::rootfs::Costs,
    /// Building the root filesystem and entering it, until `ready`.
    pub rootfs: Duration,
}

/// A started sandbox. Dropping it kills it; [`Sandbox::kill_with`] does so in order and reports.
#[derive(Debug)]
pub struct Sandbox {
    id: String,
    dir: PathBuf,
    init: crate::sys::spawn::Spawned,
    pid1: Option<OwnedFd>,
    control: Option<OwnedFd>,
    key: [u8; KEY_LEN],
    ids: IdPlan,
    /// A root invoker's claim on the sandbox's id range (released when the sandbox is gone).
    range: Option<idmap::RangeClaim>,
    /// The image's mounts and the scan for what others may not read (root invokers), made
    /// while the init stage starts.
    background: Option<BackgroundThread>,
    pub timings: StartTimings,
}

/// The sandbox's cgroup, joined by the init stage itself (see [`crate::cgroup::JoinFds`]):
/// between its fork and its exec when given to [`Sandbox::spawn`], or, given to
/// [`Spawning::handshake`] instead, right after it read its bootstrap message and before it
/// unshares anything. Either way before PID 1 exists (PID 1 is its child and inherits it), and
/// no start waits on the kernel's threadgroup lock. `None`: no cgroup (limits skipped).
pub type CgroupJoin<'a> = Option<&'a crate::cgroup::JoinFds>;

/// A sandbox whose init stage was spawned ([`Sandbox::spawn`]) and has not had its bootstrap
/// message yet. Dropping it kills the init stage and removes the runtime directory.
#[derive(Debug)]
pub struct Spawning {
    sandbox: Sandbox,
    boot_w: OwnedFd,
    sync_host: UnixStream,
    scratch: PathBuf,
    root_view: bool,
}

impl Spawning {
    /// Steps 4 and on: sends `spec` (the one given to [`Sandbox::spawn`], completed) in the
    /// bootstrap message and runs the handshake until `ready`. `join`: a cgroup made after the
    /// spawn (`run` makes it while the init stage execs), whose join files go to the init
    /// stage, which joins it before it unshares anything; `None` when the spawn joined one
    /// already, or there is none.
    pub fn handshake(
        self,
        spec: &SandboxSpec,
        join: CgroupJoin<'_>,
    ) -> Result<Sandbox, StartError> {
        self.send_bootstrap(spec, join)?.finish()
    }

    /// Step 4's first half: sends `spec` in the bootstrap message (and `join`, as for
    /// [`Spawning::handshake`]), so the init stage reads it, joins the cgroup and unshares while
    /// the caller finishes what only the rest of the handshake needs (`run`: its egress
    /// directory, whose path `spec` names already and which only the mounts take, `mapped` and
    /// later), then calls [`Booting::finish`]. Dropping the result kills the init stage and
    /// removes the runtime directory.
    pub fn send_bootstrap(
        self,
        spec: &SandboxSpec,
        join: CgroupJoin<'_>,
    ) -> Result<Booting, StartError> {
        let Spawning {
            mut sandbox,
            boot_w,
            sync_host,
            scratch,
            root_view,
        } = self;
        let key = Key::from_bytes(sandbox.key);
        let boot = Bootstrap {
            spec: spec.clone(),
            key_hex: key.to_hex(),
            host_pid: std::process::id(),
            scratch_dir: scratch,
            sandbox_uid: sandbox.ids.sandbox_uid,
            sandbox_gid: sandbox.ids.sandbox_gid,
            root_mapped: sandbox.ids.root_unavailable.is_none(),
            root_processes: sandbox.ids.root_processes(root_view),
            join_cgroup: join.is_some(),
        };
        let sync = sandbox.send_bootstrap(&boot, boot_w, sync_host, join)?;
        Ok(Booting {
            sandbox,
            boot,
            sync,
            root_view,
        })
    }
}

/// A sandbox whose init stage has its bootstrap message ([`Spawning::send_bootstrap`]); the
/// handshake's rest is [`Booting::finish`]. Dropping it kills the init stage and removes the
/// runtime directory.
pub struct Booting {
    sandbox: Sandbox,
    boot: Bootstrap,
    sync: Sync,
    root_view: bool,
}

impl std::fmt::Debug for Booting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Booting")
            .field("sandbox", &self.sandbox)
            .finish_non_exhaustive()
    }
}

impl Booting {
    /// The rest of step 4: `unshared` → the id maps → `mapped` → `pid1 N` → `ready`.
    pub fn finish(self) -> Result<Sandbox, StartError> {
        let Booting {
            mut sandbox,
            boot,
            sync,
            root_view,
        } = self;
        sandbox.finish_handshake(&boot, sync, root_view)?;
        Ok(sandbox)
    }
}

impl Sandbox {
    /// Starts a sandbox (see the module docs for the sequence): [`Sandbox::spawn`], then
    /// [`Spawning::handshake`] at once.
    pub fn start(
        spec: &SandboxSpec,
        opts: &StartOptions,
        join: CgroupJoin<'_>,
    ) -> Result<Sandbox, StartError> {
        Self::spawn(spec, opts, join)?.handshake(spec, None)
    }

    /// Steps 1–3 of the start: the id maps, the runtime directory and the init stage, spawned.
    /// The init stage then execs and loads while the caller finishes what the bootstrap
    /// message carries (`run`: its egress directory) before [`Spawning::handshake`]. Of the
    /// spec, only the user, `--root`, the id and the image count here; the handshake takes the
    /// rest. Dropping the result kills the init stage and removes the directory.
    pub fn spawn(
        spec: &SandboxSpec,
        opts: &StartOptions,
        join: CgroupJoin<'_>,
    ) -> Result<Spawning, StartError> {
        let t0 = Instant::now();
        let host = HostIds::probe(spec.user.uid, spec.user.gid, &spec.user.name);
        // A root invoker's sandbox gets an id range of its own, held until it is gone (13).
        let claim = if host.uid == 0 {
            Some(idmap::claim_root_range(
                Path::new(idmap::ROOT_RANGE_DIR),
                &host.taken,
            )?)
        } else {
            None
        };
        let ids = idmap::plan(&host, claim.as_ref().map(|c| c.range));
        if spec.require_root {
            if let Some(reason) = &ids.root_unavailable {
                return Err(StartError::RootUnavailable {
                    reason: reason.clone(),
                });
            }
        }
        let dir = create_private_dir(&opts.sandboxes_dir, &spec.id)?;
        // Off the critical path: it overlaps creating and spawning the init stage. The walk of
        // `/usr` and `/lib*` is cached where the caller says (the runtime root).
        let cache = opts.scan_cache.clone();
        let background = ids
            .mount_maps
            .is_some()
            .then(|| Background::spawn(spec, &ids, cache, opts.root_view));
        let spawned = Self::spawn_init(spec, opts, join, dir.clone(), (ids, background), t0).map(
            |mut spawning| {
                spawning.sandbox.range = claim;
                spawning
            },
        );
        if spawned.is_err() {
            let _ = fs::remove_dir_all(&dir);
        }
        spawned
    }

    fn spawn_init(
        spec: &SandboxSpec,
        opts: &StartOptions,
        join: CgroupJoin<'_>,
        dir: PathBuf,
        (ids, background): (IdPlan, Option<BackgroundThread>),
        t0: Instant,
    ) -> Result<Spawning, StartError> {
        let key = new_key()?;
        if opts.key_file {
            write_private(&dir.join("key"), key.as_bytes())?;
        }
        let scratch = dir.join("scratch");
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&scratch)
            .map_err(|source| StartError::Create {
                path: scratch.clone(),
                source,
            })?;
        let io = |what| move |source| StartError::Io { what, source };
        // SOCK_SEQPACKET, close-on-exec: the protocol's control channel (docs/architecture.md).
        let (control_host, control_guest) = airlock_protocol::control_socketpair()
            .map_err(|e| io("socketpair")(std::io::Error::other(e.to_string())))?;
        let (sync_host, sync_guest) = UnixStream::pair().map_err(io("socketpair"))?;
        let (boot_r, boot_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| io("pipe")(e.into()))?;

        // Its own process group (set in the child before exec, so no window): a Ctrl+C on the
        // terminal signals the whole foreground group, and the init stage (default SIGINT
        // action) dying of it would kill PID 1 through PDEATHSIG before airlock forwards the
        // signal to the command. Airlock alone decides what the sandbox gets. Started without
        // copying airlock's address space (`sys::spawn`), with an empty environment (nothing of
        // the host environment reaches the guest implicitly), stdin and stdout on /dev/null.
        let sync_guest = OwnedFd::from(sync_guest);
        let null = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(io("opening /dev/null"))?;
        let spawn_error = |source| StartError::Spawn {
            exe: opts.exe.clone(),
            source,
        };
        let exe = crate::sys::spawn::c_string(&opts.exe).map_err(spawn_error)?;
        let verb = std::ffi::CString::new(INIT_VERB).map_err(|e| spawn_error(e.into()))?;
        let join_fds = join.map(|j| j.raw()).unwrap_or_default();
        let request = crate::sys::spawn::SpawnRequest {
            exe: &exe,
            argv: &[&exe, &verb],
            // A failed join (the child's write to a join file) fails the spawn itself.
            join: &join_fds,
            fds: &[
                (null.as_raw_fd(), 0),
                (null.as_raw_fd(), 1),
                (boot_r.as_raw_fd(), BOOTSTRAP_FD),
                (sync_guest.as_raw_fd(), SYNC_FD),
                (control_guest.as_raw_fd(), CONTROL_FD),
            ],
            new_process_group: true,
        };
        let child = crate::sys::spawn::spawn(&request).map_err(spawn_error)?;
        drop((boot_r, sync_guest, control_guest, null));

        let mut sandbox = Sandbox {
            id: spec.id.clone(),
            dir,
            init: child,
            pid1: None,
            control: Some(control_host),
            key: *key.as_bytes(),
            ids,
            range: None,
            background,
            timings: StartTimings::default(),
        };
        sandbox.timings.prepare = t0.elapsed();
        Ok(Spawning {
            sandbox,
            boot_w,
            sync_host,
            scratch,
            root_view: opts.root_view,
        })
    }

    fn send_bootstrap(
        &mut self,
        boot: &Bootstrap,
        boot_w: OwnedFd,
        sync_host: UnixStream,
        join: CgroupJoin<'_>,
    ) -> Result<Sync, StartError> {
        let init_err = |source| StartError::Init { source };
        let msg = serde_json::to_vec(boot).map_err(|e| StartError::Io {
            what: "encoding the bootstrap message",
            source: e.into(),
        })?;
        let mut pipe = fs::File::from(boot_w);
        pipe.write_all(&msg).map_err(|source| StartError::Io {
            what: "writing the bootstrap message",
            source,
        })?;
        drop(pipe);
        // A wedged init stage (a mount that never returns) must not hang airlock forever.
        sync_host
            .set_read_timeout(Some(START_TIMEOUT))
            .map_err(|source| StartError::Io {
                what: "setting the start timeout",
                source,
            })?;
        let mut sync = Sync::new(sync_host).map_err(init_err)?;
        if let Some(join) = join {
            let fds: Vec<_> = join.fds().collect();
            sync.send_with_fds("cgroup", &fds).map_err(init_err)?;
        }
        Ok(sync)
    }

    fn finish_handshake(
        &mut self,
        boot: &Bootstrap,
        mut sync: Sync,
        root_view: bool,
    ) -> Result<(), StartError> {
        let init_err = |source| StartError::Init { source };
        let mut t = Instant::now();
        // While the init stage execs and unshares: the mounts that do not need its namespace.
        // A failure is reported after the init stage's answer, which names the cause better
        // when both fail for one reason (no user namespaces at all: exit 69, not 70).
        let owned = self
            .ids
            .mount_maps
            .as_ref()
            .map(|maps| idmounts::prepare_owned(&boot.spec, maps, root_view));
        self.timings.owned_mounts = t.elapsed();
        sync.expect("unshared").map_err(init_err)?;
        let owned = owned.transpose()?;
        self.timings.namespaces = t.elapsed();
        t = Instant::now();
        idmap::write_maps(self.init.id(), &self.ids)?;
        self.timings.maps = t.elapsed();
        t = Instant::now();
        // Kept until `ready`: dropping it reaps the helper children, which have exited by then.
        let mut prepared = None;
        match owned {
            Some(owned) => {
                let waited = Instant::now();
                let background = self.join_background()?;
                self.timings.scan = waited.elapsed();
                self.timings.image_mounts = background.image_took;
                self.timings.scan_walk = background.scan_took;
                let mounts = idmounts::prepare(owned, background.image, background.unreadable);
                let fds: Vec<_> = mounts.fds.iter().map(|f| f.as_fd()).collect();
                sync.send_with_fds(&mounts.line(), &fds).map_err(init_err)?;
                prepared = Some(mounts);
            }
            None => sync.send("mapped").map_err(init_err)?,
        }
        self.timings.idmounts = t.elapsed().saturating_sub(self.timings.scan);
        t = Instant::now();
        let pid1 = sync.expect("pid1").map_err(init_err)?;
        let pid1: i32 = pid1.parse().map_err(|_| {
            init_err(BootstrapError::Unexpected {
                expected: "a pid",
                got: pid1.clone(),
            })
        })?;
        self.pid1 = crate::pidfd::open(pid1);
        let costs = sync.expect("ready").map_err(init_err)?;
        self.timings.rootfs = t.elapsed();
        self.timings.init_costs = crate::rootfs::Costs::parse(&costs);
        drop(prepared);
        Ok(())
    }

    /// The background thread's work (`None` without id-mapped mounts).
    fn join_background(&mut self) -> Result<Background, StartError> {
        match self.background.take().map(std::thread::JoinHandle::join) {
            Some(Ok(done)) => Ok(done?),
            Some(Err(_)) => Err(StartError::IdMount(IdMountError::Scan {
                path: PathBuf::from("/etc"),
                source: std::io::Error::other("the thread preparing the image's mounts panicked"),
            })),
            None => Err(StartError::IdMount(IdMountError::Mismatch(
                "the image's mounts were not prepared".to_owned(),
            ))),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Host end of the control socketpair (held by PID 1 on the other side).
    pub fn control(&self) -> Option<BorrowedFd<'_>> {
        self.control.as_ref().map(|c| c.as_fd())
    }

    /// Takes the host end of the control socket (closing it makes the guest exit).
    pub fn take_control(&mut self) -> Option<OwnedFd> {
        self.control.take()
    }

    pub fn key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// The id layout in use.
    pub fn ids(&self) -> &IdPlan {
        &self.ids
    }

    /// Host pid of the init stage (the intermediate process; PID 1 is its only child).
    pub fn init_pid(&self) -> u32 {
        self.init.id()
    }

    /// Ends the sandbox at once, for a caller that has nothing more to ask of the guest (`run`
    /// once CMD has exited, a keeper stopping its sandbox): SIGKILL to PID 1 and to the init
    /// stage together, then waits for both and removes the runtime directory. PID 1, as init of
    /// the PID namespace, ends every process in it, and its pidfd turns readable only once they
    /// are all gone; nothing waits for PID 1 to run a shutdown of its own.
    ///
    /// `meanwhile` runs between the signals and the wait: the kernel tears the sandbox down in
    /// its exiting tasks (the mount namespace with one expedited RCU grace period per overlay,
    /// serially: about a millisecond) while this process would only sleep, so host-side cleanup
    /// that does not need the sandbox gone (its egress directory, its proxy) overlaps it. This
    /// still returns only once the sandbox is gone.
    ///
    /// PID 1 is the init stage's child: killed together, the init stage cannot reap it. So
    /// that it does not become a zombie for the host's init to reap, this process becomes a
    /// child subreaper first (the kernel propagates it to the init stage, already running):
    /// PID 1 is re-parented here when the init stage dies, and reaped here.
    pub fn kill_with(mut self, meanwhile: impl FnOnce()) -> Result<(), StartError> {
        let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
        if let Some(pid1) = &self.pid1 {
            let _ = rustix::process::pidfd_send_signal(pid1, rustix::process::Signal::KILL);
        }
        // Our unreaped child: its pid cannot have been reused. Its death alone would also end
        // PID 1 (PDEATHSIG); both are signalled so that neither waits for the other.
        let _ = self.init.kill();
        // Closed only now: closed first, it woke PID 1 to run its own shutdown (which the
        // SIGKILL makes moot), and on a busy CPU PID 1 then preempted this process before it
        // had sent the signals.
        self.control = None;
        meanwhile();
        if let Some(pid1) = &self.pid1 {
            crate::pidfd::wait_exit(pid1, KILL_WAIT);
        }
        let _ = self.init.wait();
        // Re-parented here by now unless the init stage reaped it first (then: ECHILD).
        if let Some(pid1) = self.pid1.take() {
            crate::pidfd::reap(&pid1);
        }
        let dir = std::mem::take(&mut self.dir);
        remove_runtime_dir(&dir).map_err(|source| StartError::Io {
            what: "removing the sandbox runtime directory",
            source,
        })
    }

    /// Kills PID 1 unless it is gone already (which, as init of the PID namespace, means every
    /// sandbox process is gone), waits for it, then ends and reaps the init stage.
    fn stop(&mut self) {
        self.control = None;
        if let Some(pid1) = &self.pid1 {
            if !crate::pidfd::wait_exit(pid1, Duration::ZERO) {
                let _ = rustix::process::pidfd_send_signal(pid1, rustix::process::Signal::KILL);
                crate::pidfd::wait_exit(pid1, KILL_WAIT);
            }
        }
        // The intermediate exits right after reaping PID 1; kill it in case PID 1 never started.
        if !matches!(self.init.try_wait(), Ok(Some(_))) {
            let _ = self.init.kill();
        }
        let _ = self.init.wait();
        self.pid1 = None;
    }
}

/// How long to wait for PID 1 after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(5);

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            self.stop();
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Creates `<parent>/<id>` (0700; `parent` too when missing) holding its [`OWNER_FILE`]: this
/// process's pid and start time, so [`sweep_stale`] removes it once this process is gone.
pub fn create_private_dir(parent: &Path, id: &str) -> Result<PathBuf, StartError> {
    let create = |path: &Path, recursive: bool| {
        fs::DirBuilder::new()
            .mode(0o700)
            .recursive(recursive)
            .create(path)
            .map_err(|source| StartError::Create {
                path: path.to_path_buf(),
                source,
            })
    };
    create(parent, true)?;
    let dir = parent.join(id);
    create(&dir, false)?;
    let me = std::process::id();
    let owner = format!("{me} {}\n", own_start_time().unwrap_or_default());
    write_private(&dir.join(OWNER_FILE), owner.as_bytes())?;
    Ok(dir)
}

/// Removes a sandbox runtime directory made by [`create_private_dir`] and `spawn_init`: its
/// layout is known (the empty `scratch` directory, the `key` file of a persistent sandbox, the
/// [`OWNER_FILE`] last, then the directory), so it takes one syscall per entry instead of a
/// directory walk (`remove_dir_all` opens, stats and lists each directory). Anything else in
/// it, or any failure, falls back to the walk, which also reports the error.
fn remove_runtime_dir(dir: &Path) -> std::io::Result<()> {
    let gone = |r: rustix::io::Result<()>| matches!(r, Ok(()) | Err(rustix::io::Errno::NOENT));
    let known = gone(rustix::fs::rmdir(dir.join("scratch")))
        && gone(rustix::fs::unlink(dir.join("key")))
        && gone(rustix::fs::unlink(dir.join(OWNER_FILE)))
        && rustix::fs::rmdir(dir).is_ok();
    match known {
        true => Ok(()),
        false => fs::remove_dir_all(dir),
    }
}

/// Marker in every sandbox runtime directory: `<pid> <start time>` of the airlock process that
/// created it (PRODUCT R2: a directory is ours only if it carries our marker).
pub const OWNER_FILE: &str = "owner";

/// This process's start time ([`start_time`] of its own pid), read from `/proc` once per
/// process: the owner marks of one run (its cgroup, its runtime and egress directories) name
/// the same process, which cannot change its start time. Keyed by the pid, so a forked child
/// reads its own.
pub fn own_start_time() -> Option<u64> {
    static OWN: std::sync::OnceLock<(u32, Option<u64>)> = std::sync::OnceLock::new();
    let me = std::process::id();
    match OWN.get_or_init(|| (me, start_time(me))) {
        (pid, started) if *pid == me => *started,
        _ => start_time(me),
    }
}

/// A process's start time (clock ticks since boot, field 22 of `/proc/PID/stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = crate::sys::fd::read_pseudo_file(Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Removes runtime directories of sandboxes whose owning airlock process is provably gone
/// (its pid is dead or now belongs to a process with another start time). Directories without
/// a readable marker are left alone. Returns what was removed.
pub fn sweep_stale(sandboxes_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(sandboxes_dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let Ok(owner) = fs::read_to_string(dir.join(OWNER_FILE)) else {
            continue;
        };
        let mut parts = owner.split_whitespace();
        let (Some(Ok(pid)), Some(Ok(started))) = (
            parts.next().map(str::parse::<u32>),
            parts.next().map(str::parse::<u64>),
        ) else {
            continue;
        };
        if start_time(pid) != Some(started) && fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

fn new_key() -> Result<Key, StartError> {
    Key::generate().map_err(|e| StartError::Io {
        what: "getrandom",
        source: std::io::Error::other(e.to_string()),
    })
}

fn write_private(path: &Path, content: &[u8]) -> Result<(), StartError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| StartError::Create {
            path: path.to_path_buf(),
            source,
        })?;
    f.write_all(content).map_err(|source| StartError::Create {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_this_process_start_time() {
        let me = std::process::id();
        assert!(own_start_time().is_some());
        assert_eq!(own_start_time(), start_time(me));
    }

    #[test]
    fn a_runtime_directory_is_removed_whatever_it_holds() {
        let tmp = tempfile::tempdir().unwrap();
        // The layout a run leaves (scratch and the owner marker).
        let plain = create_private_dir(tmp.path(), "plain").unwrap();
        fs::create_dir(plain.join("scratch")).unwrap();
        remove_runtime_dir(&plain).unwrap();
        assert!(!plain.exists());
        // A persistent sandbox's key, and something unexpected (a non-empty scratch, a stray
        // file): the walk takes over.
        let odd = create_private_dir(tmp.path(), "odd").unwrap();
        fs::create_dir_all(odd.join("scratch/left")).unwrap();
        fs::write(odd.join("key"), b"k").unwrap();
        fs::write(odd.join("stray"), b"s").unwrap();
        remove_runtime_dir(&odd).unwrap();
        assert!(!odd.exists());
        // A missing directory is an error, as with the walk.
        assert!(remove_runtime_dir(&tmp.path().join("missing")).is_err());
    }

    #[test]
    fn stale_sweep_removes_only_directories_of_dead_owners() {
        let tmp = tempfile::tempdir().unwrap();
        let mk = |name: &str, owner: Option<String>| {
            let d = tmp.path().join(name);
            fs::create_dir(&d).unwrap();
            fs::create_dir(d.join("scratch")).unwrap();
            if let Some(o) = owner {
                fs::write(d.join(OWNER_FILE), o).unwrap();
            }
            d
        };
        let me = std::process::id();
        let alive = mk("alive", Some(format!("{me} {}", start_time(me).unwrap())));
        // Same pid, another start time: the pid was reused, the owner is gone.
        let reused = mk("reused", Some(format!("{me} 1")));
        let unmarked = mk("unmarked", None);
        let removed = sweep_stale(tmp.path());
        assert_eq!(removed, vec![reused.clone()]);
        assert!(alive.exists() && unmarked.exists() && !reused.exists());
    }
}
