//! The init stage: `airlock __init`, exec'd by the host before any namespace exists, so the
//! guest runs the host's binary and never depends on the image's libc.
//!
//! Order of operations (see also `bootstrap.rs` for the handshake):
//! 1. `PR_SET_PDEATHSIG(SIGKILL)`, then check the parent is still the airlock that started us
//!    (it may have died before the prctl). Close every descriptor but the three protocol ones
//!    (I7: descriptors leaked into airlock by its caller end here).
//! 2. Read the bootstrap message; join the sandbox's cgroup when the host sends its join files
//!    (`run`, which creates it while this process execs; otherwise the spawn joined it before
//!    the exec); then `unshare` user, mount, pid, uts and ipc namespaces.
//!    The user namespace is unshared in the same call, always, also for root (I1). The network
//!    namespace is PID 1's (step 6).
//! 3. Tell the host `unshared`; it writes the id maps (it may: it is the parent, in the parent
//!    namespace); wait for `mapped`. Only then become
//!    non-dumpable (earlier, `/proc/PID/uid_map` would turn root-owned and unwritable for an
//!    unprivileged host); PID 1 inherits it.
//! 4. Become root of the new user namespace when a root identity exists (so the files we create
//!    belong to it), then unshare the cgroup namespace (after joining the cgroup, so its root is
//!    the sandbox's own cgroup).
//! 5. Fork: the child is PID 1 of the new PID namespace. The intermediate reports PID 1's host
//!    pid, waits for it and exits with its status; being killed (its own PDEATHSIG) kills PID 1
//!    through PID 1's PDEATHSIG, which tears down the whole PID namespace.
//! 6. PID 1: PDEATHSIG again (and a parent-liveness check through a pipe, since `getppid` is 0
//!    across a PID namespace), non-dumpable (I7: sandbox processes cannot open `/proc/1/*` or
//!    ptrace it), rootfs and `pivot_root`, hostname, the caller's `preflight` (the compiled
//!    seccomp program), `ready`, then the caller runs the guest with the returned [`Handoff`].
//!    The network namespace (with `lo` up) is made on a thread of PID 1 while the main thread
//!    builds the root filesystem ([`PendingNet`]): creating one costs about a millisecond of
//!    kernel work (every subsystem's per-namespace setup), which thus overlaps the mounts
//!    instead of adding to them. PID 1 joins it before it mounts `/sys` (which shows the
//!    mounting process's network namespace) and long before any sandbox process exists; a
//!    failure to make or join it fails the start.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sched::{unshare, CloneFlags};
use rustix::process::{set_parent_process_death_signal, Gid, Signal, Uid};
use thiserror::Error;

use crate::bootstrap::{
    Bootstrap, BootstrapError, Stage, Sync, CONTROL_FD, FIRST_UNUSED_FD, SYNC_FD,
};
use crate::idmounts::{IdMountError, Received};
use crate::rootfs::{self, RootfsError};
use crate::spec::SandboxSpec;
use crate::sys::fd::{close_all_from, take_inherited};
use crate::sys::fork::{fork_single_threaded, Forked};

#[derive(Debug, Error)]
pub enum InitError {
    #[error("{syscall} failed: {source}")]
    Syscall {
        syscall: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the airlock process that started this sandbox is gone")]
    ParentGone,
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Rootfs(#[from] RootfsError),
    #[error(transparent)]
    IdMount(#[from] IdMountError),
    #[error("the per-epoch key is malformed")]
    BadKey,
    #[error("cannot prepare the guest's confinement: {0}")]
    Preflight(String),
}

impl InitError {
    /// Which start stage failed, for the host's classification (see `bootstrap.rs`).
    pub fn stage(&self) -> Stage {
        match self {
            InitError::Syscall { syscall, .. }
                if syscall.starts_with("unshare") || syscall.starts_with("setns") =>
            {
                Stage::Namespaces
            }
            InitError::Rootfs(RootfsError::ImageLink { .. }) => Stage::Image,
            InitError::Rootfs(_) | InitError::IdMount(_) => Stage::Rootfs,
            InitError::Syscall { .. }
            | InitError::ParentGone
            | InitError::Bootstrap(_)
            | InitError::BadKey
            | InitError::Preflight(_) => Stage::Init,
        }
    }
}

/// What PID 1 hands to the guest once the sandbox is built.
#[derive(Debug)]
pub struct Handoff {
    /// The guest end of the control socketpair.
    pub control: OwnedFd,
    /// The per-epoch key.
    pub key: [u8; crate::bootstrap::KEY_LEN],
    pub spec: SandboxSpec,
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    /// Whether `--root` processes can be served (`Bootstrap::root_processes`).
    pub root_allowed: bool,
    /// The root view's mount namespace, which `--root` processes join (a root invoker's
    /// sandbox that may run them; `rootfs/root_view.rs`).
    pub root_view: Option<OwnedFd>,
}

fn sys<T, E: Into<std::io::Error>>(syscall: &'static str, r: Result<T, E>) -> Result<T, InitError> {
    r.map_err(|e| InitError::Syscall {
        syscall,
        source: e.into(),
    })
}

/// Runs the init stage. Returns only in PID 1, with the sandbox built and entered; the
/// intermediate process exits inside this function. On error, the caller reports it and exits
/// non-zero; the error has already been sent to the host when the handshake was up.
///
/// `preflight` runs in PID 1 after the rootfs is entered and before `ready` is sent: whatever the
/// guest needs to confine sandbox processes (the seccomp program) is built there, so a failure
/// fails the start itself rather than the first command (partial enforcement is failure).
pub fn run<T>(preflight: impl FnOnce() -> Result<T, String>) -> Result<(Handoff, T), InitError> {
    sys(
        "prctl(PR_SET_PDEATHSIG)",
        set_parent_process_death_signal(Some(Signal::KILL)),
    )?;
    sys("close_range", close_all_from(FIRST_UNUSED_FD))?;
    let sync_stream = UnixStream::from(take_inherited(SYNC_FD));
    let control = take_inherited(CONTROL_FD);
    let mut sync = Sync::new(sync_stream)?;
    match prepare(&mut sync, control, preflight) {
        Ok(handoff) => Ok(handoff),
        Err(e) => {
            let _ = sync.send(&format!("error {} {e}", e.stage().as_str()));
            Err(e)
        }
    }
}

fn prepare<T>(
    sync: &mut Sync,
    control: OwnedFd,
    preflight: impl FnOnce() -> Result<T, String>,
) -> Result<(Handoff, T), InitError> {
    let boot = Bootstrap::read_inherited()?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(boot.host_pid) {
        return Err(InitError::ParentGone);
    }
    let key = decode_key(&boot.key_hex)?;
    // 1b. The sandbox's cgroup, when the host made it while we exec'd (`run`): joined before
    //     anything is unshared, with the identity we were started with, as a spawn's pre-exec
    //     join would have; PID 1 and everything it starts inherit it.
    if boot.join_cgroup {
        join_cgroup(sync)?;
    }
    // Entered while we still have the invoker's identity: once a root invoker's sandbox runs
    // under its own id range, the host directories above it are no longer searchable. The new
    // mount namespace moves the working directory onto its copy of the mount.
    sys("chdir(scratch)", rustix::process::chdir(&boot.scratch_dir))?;

    // 2. Every namespace but cgroup (joined after the host moved us into our cgroup) and
    //    network (made by PID 1 alongside the root filesystem, `PendingNet`).
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC;
    sys("unshare", unshare(flags))?;

    // 3. Maps and cgroup are done by the host, which also passes a root invoker's id-mapped
    //    mounts (idmounts.rs) with the `mapped` line.
    sync.send("unshared")?;
    // While the host writes the maps: a sandbox without `--root` processes starts only
    // processes that drop every capability, so the bounding set (all of the new namespace's)
    // is emptied once here, off the critical path, for PID 1 and every process it starts
    // (`empty_bounding_set`). Neither this process nor PID 1 executes a program, the only
    // thing the set limits. Where it fails, each spawn drops it as before.
    if !boot.root_processes {
        let _ = crate::sys::process::empty_bounding_set();
    }
    let (labels, fds) = sync.expect_with_fds("mapped")?;
    let mut mounts = Received::new(&labels, fds)?;
    // Only now: a non-dumpable process's /proc files belong to root, which would have kept an
    // unprivileged host from writing our uid_map. From here on the key in our memory is shielded
    // from ptrace and /proc/PID/mem (PID 1, forked below, inherits this).
    sys(
        "prctl(PR_SET_DUMPABLE)",
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable),
    )?;

    // 4. Identity for setup, then the cgroup namespace.
    if boot.root_mapped {
        sys(
            "setresgid",
            rustix::thread::set_thread_res_gid(Gid::ROOT, Gid::ROOT, Gid::ROOT),
        )?;
        sys(
            "setresuid",
            rustix::thread::set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT),
        )?;
    }
    sys(
        "unshare(CLONE_NEWCGROUP)",
        unshare(CloneFlags::CLONE_NEWCGROUP),
    )?;

    // 5. PID 1 is our child.
    let (alive_r, alive_w) = sys(
        "pipe",
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC),
    )?;
    // Both the intermediate (`pid1 N`) and PID 1 (`ready`) write to the handshake socket, and
    // the host reads them in that order: PID 1 says `ready` only once the intermediate has
    // said `pid1` (it closes `said_w` after sending), or a busy machine can swap the two lines.
    let (said_r, said_w) = sys(
        "pipe",
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC),
    )?;
    // Opened here, while `/proc/self` is still ours (PID 1 pivots into the sandbox's root).
    let mappings = crate::sys::mem::OwnMappings::open();
    match sys("fork", fork_single_threaded())? {
        Forked::Parent { child } => {
            drop((alive_r, control, mounts, said_r));
            sync.send(&format!("pid1 {child}"))?;
            drop(said_w);
            intermediate_wait(child, alive_w, mappings)
        }
        Forked::Child => {
            drop((alive_w, said_w, mappings));
            let root_view = pid1_setup(&boot, alive_r, &mut mounts)?;
            let prepared = preflight().map_err(InitError::Preflight)?;
            wait_for_close(said_r);
            // With the init stage's share of issue 9's budget (`rootfs/costs.rs`).
            sync.send(&format!("ready {}", rootfs::Costs::measured().line()))?;
            let handoff = Handoff {
                control,
                key,
                sandbox_uid: boot.sandbox_uid,
                sandbox_gid: boot.sandbox_gid,
                root_allowed: boot.root_processes,
                root_view,
                spec: boot.spec,
            };
            Ok((handoff, prepared))
        }
    }
}

/// Moves this process into the cgroup whose join files (`cgroup::JoinFds`) the host sent with
/// the `cgroup` line: `0` written to each, as a spawn's pre-exec join does (one thread: this
/// process has no other). A failed write fails the start: nothing runs outside the limits.
fn join_cgroup(sync: &mut Sync) -> Result<(), InitError> {
    let (_, fds) = sync.expect_with_fds("cgroup")?;
    if fds.is_empty() {
        return Err(InitError::Syscall {
            syscall: "joining the sandbox's cgroup",
            source: std::io::Error::other("the host sent no join file"),
        });
    }
    sys(
        "joining the sandbox's cgroup",
        crate::sys::fd::join_cgroup(fds.iter().map(|fd| fd.as_fd())),
    )
}

/// Blocks until every write end of `pipe` is closed (or a byte arrives).
fn wait_for_close(pipe: OwnedFd) {
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(&pipe, &mut byte) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok(_) | Err(_) => return,
        }
    }
}

/// The intermediate process: waits for PID 1 and exits with its status (never returns).
fn intermediate_wait(
    child: libc::pid_t,
    _alive: OwnedFd,
    mappings: Option<crate::sys::mem::OwnMappings>,
) -> ! {
    // A persistent sandbox keeps this process for its whole life, waiting: once PID 1 has
    // run a while, give back the binary's pages start-up mapped (a short `run` never gets
    // here, so it pays nothing for it).
    if let (Some(pidfd), Some(own)) = (crate::pidfd::open(child), mappings) {
        if !crate::pidfd::wait_exit(&pidfd, crate::sys::mem::IDLE_AFTER) {
            own.release();
        }
    }
    let pid = nix::unistd::Pid::from_raw(child);
    let code = loop {
        match nix::sys::wait::waitpid(pid, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => break code,
            Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => break 128 + sig as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break 70,
        }
    };
    std::process::exit(code)
}

fn pid1_setup(
    boot: &Bootstrap,
    alive: OwnedFd,
    mounts: &mut Received,
) -> Result<Option<OwnedFd>, InitError> {
    sys(
        "prctl(PR_SET_PDEATHSIG)",
        set_parent_process_death_signal(Some(Signal::KILL)),
    )?;
    // The intermediate holds the write end; if it already died, the pipe reports hang-up.
    let mut fds = [rustix::event::PollFd::new(
        &alive,
        rustix::event::PollFlags::IN,
    )];
    let ready = sys(
        "poll",
        rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())),
    )?;
    if ready > 0 {
        return Err(InitError::ParentGone);
    }
    drop(alive);
    // Briefly dumpable, to open our own /proc/self/oom_score_adj (a non-dumpable process's
    // /proc files belong to a root the sandbox may not map). No sandbox process exists yet, and
    // the host processes that could attach meanwhile could attach to airlock itself anyway.
    sys(
        "prctl(PR_SET_DUMPABLE)",
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable),
    )?;
    let held = crate::sys::process::hold_own_oom_score_adj();
    // While the host's /proc is still there: read before each spawn of a sandbox process.
    crate::sys::process::hold_suid_dumpable();
    sys(
        "prctl(PR_SET_DUMPABLE)",
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable),
    )?;
    sys("open(/proc/self/oom_score_adj)", held)?;
    let net = PendingNet::start()?;
    let root_view = rootfs::build(boot, mounts, || net.enter())?;
    limit_processes(boot)?;
    sys(
        "sethostname",
        rustix::system::sethostname(boot.spec.hostname.as_bytes()),
    )?;
    Ok(root_view)
}

/// The sandbox's network namespace, being made on a thread of its own: `unshare` there
/// affects only that thread, which brings `lo` up in it and returns a descriptor of it.
/// PID 1's main thread joins it with [`PendingNet::enter`] (the thread has then exited, and
/// PID 1 is single-threaded again before it starts any process). See the module docs, step 6.
struct PendingNet(std::thread::JoinHandle<Result<OwnedFd, InitError>>);

impl PendingNet {
    fn start() -> Result<PendingNet, InitError> {
        let thread = std::thread::Builder::new()
            .name("airlock-net".to_owned())
            .stack_size(64 * 1024)
            .spawn(|| {
                sys("unshare(CLONE_NEWNET)", unshare(CloneFlags::CLONE_NEWNET))?;
                sys("SIOCSIFFLAGS(lo)", crate::sys::net::set_interface_up("lo"))?;
                sys(
                    "open(/proc/thread-self/ns/net)",
                    crate::sys::idmount::open_namespace(std::path::Path::new(
                        "/proc/thread-self/ns/net",
                    )),
                )
            });
        Ok(PendingNet(sys("spawning the network thread", thread)?))
    }

    /// Waits for the namespace and moves the calling thread into it.
    fn enter(self) -> Result<(), InitError> {
        let ns = self.0.join().map_err(|_| InitError::Syscall {
            syscall: "unshare(CLONE_NEWNET)",
            source: std::io::Error::other("the network thread panicked"),
        })??;
        sys(
            "setns(CLONE_NEWNET)",
            rustix::thread::move_into_link_name_space(
                ns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            ),
        )
    }
}

/// `RLIMIT_NPROC = pids_max` for PID 1 and everything it starts: a process limit that holds
/// without cgroups (issue 9.10). Since Linux 5.14 the kernel counts it per user namespace and
/// uid, so it counts only this sandbox's processes. The kernel exempts host uid 0 (`INIT_USER`),
/// which no sandbox process is: a root invoker's sandbox runs under an id range of its own
/// (`idmap.rs`). The cgroup's `pids.max`, when there is one, applies as well.
fn limit_processes(boot: &Bootstrap) -> Result<(), InitError> {
    let Some(limit) = boot.spec.limits.pids_max else {
        return Ok(());
    };
    let rlimit = rustix::process::Rlimit {
        current: Some(limit.value),
        maximum: Some(limit.value),
    };
    sys(
        "setrlimit(RLIMIT_NPROC)",
        rustix::process::setrlimit(rustix::process::Resource::Nproc, rlimit),
    )
}

/// Whether the kernel counts `RLIMIT_NPROC` per user namespace (Linux 5.14, "ucounts"), so that
/// [`limit_processes`] bounds a sandbox's processes without counting the invoker's host ones.
/// Callers use it to decide that `pids_max` is enforceable without cgroups.
pub fn nproc_limit_is_per_sandbox() -> bool {
    release_at_least(
        &rustix::system::uname().release().to_string_lossy(),
        (5, 14),
    )
}

fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= want
}

fn decode_key(hex_key: &str) -> Result<[u8; crate::bootstrap::KEY_LEN], InitError> {
    airlock_protocol::Key::from_hex(hex_key)
        .map(|key| *key.as_bytes())
        .map_err(|_| InitError::BadKey)
}

#[cfg(test)]
mod tests {
    use super::release_at_least;

    #[test]
    fn kernel_release_comparison_reads_major_and_minor() {
        assert!(release_at_least("6.18.44-fc-v657", (5, 14)));
        assert!(release_at_least("5.14.0-284.el9.x86_64", (5, 14)));
        assert!(!release_at_least("5.10.0-28-amd64", (5, 14)));
        assert!(!release_at_least("4.19.0", (5, 14)));
        assert!(!release_at_least("garbage", (5, 14)));
    }
}
