//! Spawning sandbox processes, and the signal self-pipe of the guest's PID 1.
//!
//! [`spawn`] clones a child that runs, on data prepared before the clone, the steps below and
//! then `execve`; the caller's thread waits until the child has exec'd or failed
//! (`CLONE_VFORK`), and a failure comes back as the step that failed and its errno.
//!
//! 0. Every signal the caller catches, and SIGPIPE (ignored by Rust programs), back to its
//!    default disposition, then the empty signal mask (the child starts with every signal
//!    blocked, so no handler of the caller's runs in it). Then fds 0, 1 and 2 are placed.
//! 1. `setns(CLONE_NEWNS)` into the mount namespace the confinement names, if any (a root
//!    invoker's `--root` processes: the root view, `rootfs/root_view.rs`); first, while every
//!    capability is still held.
//! 2. `setsid()`: a new session and process group, so the process has no controlling
//!    terminal it did not open and cannot inject input (`TIOCSTI`) into one of ours; the
//!    guest signals the whole group by its pid.
//! 3. `TIOCSCTTY` on fd 0 (PTY mode only): the PTY becomes the controlling terminal. This
//!    needs step 2 (only a session leader without a terminal may acquire one).
//! 4. `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`: every descriptor but 0/1/2 is marked
//!    close-on-exec, so none survives `execve` (PRODUCT I7).
//! 5. Capability bounding set emptied (one `PR_CAPBSET_DROP` per capability of the caller's
//!    bounding set, read once per process; none when the caller emptied its own for good,
//!    [`empty_bounding_set`]) and ambient set cleared (when dropping capabilities). This must
//!    precede step 6: `PR_CAPBSET_DROP` needs `CAP_SETPCAP`, which switching to a non-zero uid
//!    removes.
//! 6. Identity: `setgroups`, `setresgid`, `setresuid` (raw per-thread syscalls, never libc's
//!    set*id, which signal every thread of the caller), each id switch followed by
//!    `PR_SET_DUMPABLE = 0` (see "Memory"). Groups before gid before uid, since each step
//!    needs the privilege the next one gives up.
//! 7. `chdir` to the working directory, after step 6 so access is checked as the new identity.
//! 8. Capabilities: effective, permitted and inheritable sets emptied with one `capset`.
//! 9. `PR_SET_NO_NEW_PRIVS`, required by step 10 for an unprivileged caller and wanted anyway
//!    (setuid binaries and file capabilities grant nothing afterwards).
//! 10. The seccomp filter (`seccomp(SECCOMP_SET_MODE_FILTER)`), last, so the filter does not
//!     have to allow the setup syscalls above; it must allow `execve`.
//! 11. `execve` with exactly the requested environment, tried as glibc's `execvp` tries it
//!     (what `std::process::Command` ran before): the program itself when it has a `/`, else
//!     each `PATH` entry of the new environment in turn, going on after a missing or denied
//!     file and reporting EACCES when one was denied; a file without `#!` (ENOEXEC) is run by
//!     `/bin/sh`.
//!
//! The child runs only async-signal-safe code: raw syscalls on data prepared before the
//! clone, no allocation, no lock.
//!
//! # Memory
//!
//! Where it is safe, the child shares the caller's memory until its exec
//! (`clone(CLONE_VM | CLONE_VFORK)`, what `posix_spawn` does) instead of copying it: a fork of
//! the guest's PID 1 copies every page table of a process with a 10 MB binary and its threads,
//! the child tears the copy down again at its exec, and PID 1 then takes a copy-on-write fault
//! on each page it writes. Credentials, capabilities, `no_new_privs`, the seccomp filter, the
//! signal dispositions, the descriptor table, the working directory and the namespaces are
//! the child's own in both cases; the memory's *dumpable* flag is not: an id switch
//! (`commit_creds`) sets it to `fs.suid_dumpable` for the whole memory. With 0 that keeps
//! PID 1 non-dumpable; with 2 it becomes "dumpable by root of its user namespace" (the
//! host's), which no sandbox process is, so `ptrace` and `/proc/1/mem` stay refused; the
//! child then sets it back to 0 at once, so PID 1 is exactly as before. With 1 it would make
//! PID 1 (its key, its control socket) traceable by a sandbox process of the same uid: so the
//! setting is read (a descriptor held from setup, [`hold_suid_dumpable`]) before each spawn,
//! and when it is 1, or cannot be read, the child gets a copy of the memory, as a fork would
//! (`clone(CLONE_VFORK)`), and resets the flag of that copy after each switch the same way.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{Gid, Uid, WaitOptions};
use rustix::thread::{CapabilitySet, CapabilitySets};

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>` (Linux 5.11).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// A step of the child's setup, in execution order; named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ChildStep {
    /// `setsid`.
    Setsid = 1,
    /// `ioctl(0, TIOCSCTTY)`.
    ControllingTty,
    /// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`.
    CloseFds,
    /// `prctl(PR_CAPBSET_DROP)`.
    BoundingSet,
    /// `prctl(PR_CAP_AMBIENT_CLEAR_ALL)`.
    AmbientCaps,
    /// `setgroups`.
    Setgroups,
    /// `setresgid`.
    Setresgid,
    /// `setresuid`.
    Setresuid,
    /// `chdir`.
    Chdir,
    /// `capset`.
    Capset,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs,
    /// `seccomp(SECCOMP_SET_MODE_FILTER)`.
    Seccomp,
    /// `execve` (program not found, not executable, …).
    Exec,
    /// `setns(CLONE_NEWNS)` (the first step when there is one).
    MountNamespace,
    /// `dup2` of the standard descriptors.
    Stdio,
    /// `prctl(PR_SET_DUMPABLE)` after an id switch.
    NotDumpable,
}

impl ChildStep {
    const ALL: [ChildStep; 16] = [
        Self::Setsid,
        Self::ControllingTty,
        Self::CloseFds,
        Self::BoundingSet,
        Self::AmbientCaps,
        Self::Setgroups,
        Self::Setresgid,
        Self::Setresuid,
        Self::Chdir,
        Self::Capset,
        Self::NoNewPrivs,
        Self::Seccomp,
        Self::Exec,
        Self::MountNamespace,
        Self::Stdio,
        Self::NotDumpable,
    ];

    fn from_byte(byte: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|step| *step as u8 == byte)
    }

    /// The syscall this step makes.
    pub fn syscall(self) -> &'static str {
        match self {
            Self::Setsid => "setsid",
            Self::ControllingTty => "ioctl(TIOCSCTTY)",
            Self::CloseFds => "close_range",
            Self::BoundingSet => "prctl(PR_CAPBSET_DROP)",
            Self::AmbientCaps => "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
            Self::Setgroups => "setgroups",
            Self::Setresgid => "setresgid",
            Self::Setresuid => "setresuid",
            Self::Chdir => "chdir",
            Self::Capset => "capset",
            Self::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            Self::Seccomp => "seccomp",
            Self::Exec => "execve",
            Self::MountNamespace => "setns(CLONE_NEWNS)",
            Self::Stdio => "dup2",
            Self::NotDumpable => "prctl(PR_SET_DUMPABLE)",
        }
    }
}

/// Why a process could not be spawned, or the signal pipe not installed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// A setup step in the child (or the final `execve`) failed.
    #[error("{} failed while starting {program:?}: {source}", step.syscall())]
    Child {
        /// The step that failed.
        step: ChildStep,
        /// The program being started.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An argument, variable or path contains a NUL byte.
    #[error("{what} contains a NUL byte")]
    Nul {
        /// Which input.
        what: &'static str,
    },
    /// The argument vector is empty.
    #[error("cannot spawn an empty argv")]
    EmptyArgv,
    /// A syscall in the parent failed.
    #[error("{syscall} failed: {source}")]
    Syscall {
        /// The syscall.
        syscall: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Who the child becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// Keep the caller's uid, gid and groups.
    Inherit,
    /// Switch to `uid`/`gid`; `groups: None` leaves supplementary groups alone (needed where
    /// `/proc/self/setgroups` is `deny`), `Some(list)` sets exactly `list`.
    Switch {
        /// Real, effective and saved uid.
        uid: u32,
        /// Real, effective and saved gid.
        gid: u32,
        /// Supplementary groups.
        groups: Option<Vec<u32>>,
    },
}

/// The confinement applied to every sandbox process, handed over as data by the runtime.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// Empty the bounding, ambient, effective, permitted and inheritable capability sets.
    pub drop_capabilities: bool,
    /// Set `no_new_privs` (always done when `seccomp` is present).
    pub no_new_privs: bool,
    /// Remove `CAP_SETFCAP` from the bounding, effective, permitted and inheritable sets while
    /// keeping the rest (for `--root` processes): file capabilities written into a workspace
    /// or mount would reach the host (issue 9.6).
    pub withhold_setfcap: bool,
    /// The child's `oom_score_adj`: sandbox processes are the OOM killer's first choice, before
    /// the guest's PID 1 (issue 9.10). The parent raises its own value around the clone (see
    /// [`hold_own_oom_score_adj`], required first), so the child has it from the start. Not
    /// written by the child: until `execve` it is non-dumpable like PID 1 (or shares its memory), its `/proc` files
    /// belong to a root the sandbox may not map, and making it dumpable would expose PID 1's
    /// memory (the key) to other sandbox processes.
    pub oom_score_adj: Option<u16>,
    /// A compiled seccomp filter; it must allow `execve`.
    pub seccomp: Option<seccompiler::BpfProgram>,
    /// A mount namespace to join first (`--root` processes of a root invoker's sandbox: the
    /// root view, `rootfs/root_view.rs`).
    pub mount_ns: Option<std::sync::Arc<OwnedFd>>,
}

/// What to start.
#[derive(Debug)]
pub struct SpawnSpec {
    /// Program (looked up in the new environment's `PATH`) and arguments.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// Working directory, entered as the new identity.
    pub cwd: String,
    /// Descriptors that become 0, 1 and 2 (the same PTY slave three times in PTY mode).
    pub stdio: [OwnedFd; 3],
    /// Make fd 0 the controlling terminal (PTY mode).
    pub controlling_tty: bool,
    /// Identity.
    pub identity: Identity,
}

/// How the child gets its memory (see the module docs, "Memory").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CloneMode {
    /// `clone(CLONE_VM | CLONE_VFORK)`: the caller's memory, shared until the child's exec.
    Shared,
    /// `clone(CLONE_VFORK)`: a copy of it (a fork), where an identity switch would make the
    /// shared memory dumpable (`fs.suid_dumpable = 1`) or that setting cannot be read.
    Copy,
}

/// Everything the child needs, prepared before the clone: it allocates nothing, takes no lock
/// and writes nothing of the caller's but `failed` and the script slot of [`ExecPlan`].
struct ChildPlan<'a> {
    mount_ns: Option<RawFd>,
    /// Descriptors that become 0, 1 and 2.
    stdio: [RawFd; 3],
    controlling_tty: bool,
    /// Signals set back to their default disposition (bit `n` for signal `n`).
    reset_signals: u64,
    /// Capabilities dropped from the bounding set (bit `n` for capability `n`); only when
    /// dropping capabilities.
    bounding: Option<u64>,
    drop_capabilities: bool,
    withhold_setfcap: bool,
    no_new_privs: bool,
    identity: Option<(Uid, Gid, Option<&'a [Gid]>)>,
    cwd: &'a CStr,
    seccomp: Option<&'a seccompiler::BpfProgram>,
    exec: &'a ExecPlan,
    /// Write end of the report pipe ([`CloneMode::Copy`]: the child's memory is its own).
    report: Option<RawFd>,
    /// `step << 16 | errno` of the step that failed ([`CloneMode::Shared`]); 0 until then.
    failed: AtomicI32,
    /// The parent's own `oom_score_adj` file and its usual value, which the child writes back
    /// first thing: the child keeps the raised value it inherited, and the parent is back to
    /// its own before the child can exec anything ([`with_oom_score_adj`]).
    restore_oom: Option<(RawFd, &'a [u8])>,
}

/// Starts `spec` under `confinement`; returns the child's pid. The caller reaps it.
pub fn spawn(spec: SpawnSpec, confinement: &Confinement) -> Result<u32, ProcessError> {
    spawn_as(spec, confinement, clone_mode())
}

fn spawn_as(
    spec: SpawnSpec,
    confinement: &Confinement,
    mode: CloneMode,
) -> Result<u32, ProcessError> {
    let program = spec.argv.first().ok_or(ProcessError::EmptyArgv)?.clone();
    // Refuses a NUL in the arguments or the environment.
    let exec = ExecPlan::new(&spec.argv, &spec.env)?;
    let cwd = CString::new(spec.cwd.as_str()).map_err(|_| ProcessError::Nul { what: "cwd" })?;
    let report = match mode {
        CloneMode::Shared => None,
        CloneMode::Copy => Some(pipe_with(PipeFlags::CLOEXEC).map_err(|e| parent_err("pipe2", e))?),
    };
    let identity = match &spec.identity {
        Identity::Inherit => None,
        Identity::Switch { uid, gid, groups } => Some((
            Uid::from_raw(*uid),
            Gid::from_raw(*gid),
            groups
                .as_ref()
                .map(|g| g.iter().copied().map(Gid::from_raw).collect::<Vec<_>>()),
        )),
    };
    let raise_oom = match confinement.oom_score_adj {
        Some(adj) => Some((adj, own_oom_score_adj()?)),
        None => None,
    };
    let plan = ChildPlan {
        // Kept open by `confinement` until `spawn` returns (the child has joined by then).
        mount_ns: confinement.mount_ns.as_ref().map(|fd| fd.as_raw_fd()),
        stdio: spec.stdio.each_ref().map(AsRawFd::as_raw_fd),
        controlling_tty: spec.controlling_tty,
        reset_signals: CAUGHT_SIGNALS.load(Ordering::Relaxed)
            | 1 << libc::SIGPIPE
            | 1 << libc::SIGSEGV
            | 1 << libc::SIGBUS,
        bounding: confinement.drop_capabilities.then(bounding_to_drop),
        drop_capabilities: confinement.drop_capabilities,
        withhold_setfcap: confinement.withhold_setfcap && !confinement.drop_capabilities,
        no_new_privs: confinement.no_new_privs || confinement.seccomp.is_some(),
        identity: identity
            .as_ref()
            .map(|(uid, gid, groups)| (*uid, *gid, groups.as_deref())),
        cwd: &cwd,
        seccomp: confinement.seccomp.as_ref(),
        exec: &exec,
        report: report.as_ref().map(|(_, write)| write.as_raw_fd()),
        failed: AtomicI32::new(0),
        restore_oom: raise_oom.map(|(_, own)| (own.file.as_raw_fd(), own.usual.as_slice())),
    };
    let cloned = match raise_oom {
        Some((adj, own)) => with_oom_score_adj(own, adj, || clone_child(&plan, mode))?,
        None => clone_child(&plan, mode),
    };
    let pid = cloned.map_err(|source| ProcessError::Syscall {
        syscall: "clone",
        source,
    })?;
    // The child has exec'd or exited (CLONE_VFORK): what it reported is complete.
    let failure = match report {
        None => decode_failure(plan.failed.load(Ordering::Acquire)),
        Some((read, write)) => {
            drop(write);
            let mut word = [0u8; 4];
            match rustix::io::read(&read, &mut word) {
                Ok(4) => decode_failure(i32::from_le_bytes(word)),
                _ => None,
            }
        }
    };
    drop(spec.stdio);
    let Some((step, errno)) = failure else {
        return Ok(pid as u32);
    };
    // Reaped here, like `std::process::Command` does: the pid never reaches the caller.
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        while let Err(Errno::INTR) = rustix::process::waitpid(Some(pid), WaitOptions::empty()) {}
    }
    Err(ProcessError::Child {
        step,
        program,
        source: std::io::Error::from_raw_os_error(errno),
    })
}

fn decode_failure(word: i32) -> Option<(ChildStep, i32)> {
    let step = ChildStep::from_byte((word >> 16) as u8)?;
    Some((step, word & 0xffff))
}

fn parent_err(syscall: &'static str, errno: Errno) -> ProcessError {
    ProcessError::Syscall {
        syscall,
        source: errno.into(),
    }
}

/// Clones the child that runs `plan` and waits until it has exec'd or exited (`CLONE_VFORK`).
fn clone_child(plan: &ChildPlan<'_>, mode: CloneMode) -> std::io::Result<libc::pid_t> {
    let flags = match mode {
        CloneMode::Shared => libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        CloneMode::Copy => libc::CLONE_VFORK | libc::SIGCHLD,
    };
    // SAFETY: `child_main` only reads `plan` (and what it points to, all alive in the
    // caller's frame until this returns) and writes `plan.failed` and the script slot, both
    // made for it; it sets the caught signals back to their defaults before it unblocks any.
    unsafe {
        super::spawn::clone_vfork(
            flags,
            child_main,
            plan as *const ChildPlan<'_> as *mut libc::c_void,
        )
    }
}

/// The child, between the clone and its exec.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the caller's `ChildPlan`, alive until this child execs or exits.
    let plan = unsafe { &*(arg as *const ChildPlan<'_>) };
    let (step, errno) = plan.apply();
    let word = (step as i32) << 16 | (errno & 0xffff).max(1);
    plan.failed.store(word, Ordering::Release);
    if let Some(fd) = plan.report {
        let bytes = word.to_le_bytes();
        // SAFETY: write(2) of a local buffer to the inherited report pipe.
        let _ = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    }
    // SAFETY: _exit ends only this child; no atexit handler runs on the shared memory.
    unsafe { libc::_exit(127) }
}

impl ChildPlan<'_> {
    /// Runs in the child: the numbered steps of the module docs, then the exec. Returns only
    /// on failure: the step and its errno.
    fn apply(&self) -> (ChildStep, i32) {
        macro_rules! step {
            ($step:expr, $result:expr) => {
                if let Err(errno) = $result {
                    return ($step, errno.raw_os_error());
                }
            };
        }
        if let Some((file, usual)) = self.restore_oom {
            // Best effort: the parent writes it back too once this child has exec'd.
            // SAFETY: pwrite(2) of the parent's buffer (alive until `spawn` returns) to the
            // parent's descriptor, which it holds for the rest of its life.
            let _ = unsafe { libc::pwrite(file, usual.as_ptr().cast(), usual.len(), 0) };
        }
        reset_signals(self.reset_signals);
        step!(ChildStep::Stdio, place_stdio(self.stdio));
        if let Some(ns) = self.mount_ns {
            // SAFETY: the descriptor is open: the parent holds it until `spawn` returns.
            let ns = unsafe { BorrowedFd::borrow_raw(ns) };
            step!(
                ChildStep::MountNamespace,
                rustix::thread::move_into_link_name_space(
                    ns,
                    Some(rustix::thread::LinkNameSpaceType::Mount),
                )
            );
        }
        step!(ChildStep::Setsid, rustix::process::setsid());
        if self.controlling_tty {
            // SAFETY: fd 0 is open in the child: the PTY slave was placed there.
            let stdin = unsafe { BorrowedFd::borrow_raw(0) };
            step!(
                ChildStep::ControllingTty,
                rustix::process::ioctl_tiocsctty(stdin)
            );
        }
        step!(ChildStep::CloseFds, cloexec_from(3));
        if let Some(bounding) = self.bounding {
            step!(ChildStep::BoundingSet, drop_bounding(bounding));
            step!(
                ChildStep::AmbientCaps,
                rustix::thread::clear_ambient_capability_set()
            );
        }
        if let Some((uid, gid, groups)) = &self.identity {
            if let Some(groups) = groups {
                step!(
                    ChildStep::Setgroups,
                    rustix::thread::set_thread_groups(groups)
                );
            }
            step!(
                ChildStep::Setresgid,
                rustix::thread::set_thread_res_gid(*gid, *gid, *gid)
            );
            step!(ChildStep::NotDumpable, not_dumpable());
            step!(
                ChildStep::Setresuid,
                rustix::thread::set_thread_res_uid(*uid, *uid, *uid)
            );
            step!(ChildStep::NotDumpable, not_dumpable());
        }
        step!(ChildStep::Chdir, rustix::process::chdir(self.cwd));
        if self.drop_capabilities {
            let empty = CapabilitySets {
                effective: CapabilitySet::empty(),
                permitted: CapabilitySet::empty(),
                inheritable: CapabilitySet::empty(),
            };
            step!(
                ChildStep::Capset,
                rustix::thread::set_capabilities(None, empty)
            );
        }
        if self.withhold_setfcap {
            step!(ChildStep::BoundingSet, withhold(CapabilitySet::SETFCAP));
        }
        if self.no_new_privs {
            step!(
                ChildStep::NoNewPrivs,
                rustix::thread::set_no_new_privs(true)
            );
        }
        if let Some(program) = self.seccomp {
            step!(ChildStep::Seccomp, install_seccomp(program));
        }
        (ChildStep::Exec, self.exec.exec())
    }
}

/// `PR_SET_DUMPABLE = 0` again after an identity switch: `commit_creds` set the memory's
/// dumpable flag to `fs.suid_dumpable`, and in [`CloneMode::Shared`] that memory is the
/// caller's (see the module docs, "Memory").
fn not_dumpable() -> Result<(), Errno> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
}

/// Sets the signals in `set` back to their default disposition, then unblocks every signal
/// (the mask the new program starts with, as `std::process::Command` leaves it).
fn reset_signals(set: u64) {
    // SAFETY: sigaction/sigprocmask on this process (its own signal handlers: no
    // CLONE_SIGHAND) with valid, zero-initialised structures; the numbers are valid signals
    // or rejected harmlessly (EINVAL for SIGKILL/SIGSTOP, none of which is in `set`).
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..64 {
            if set & (1 << sig) != 0 {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// `dup2` of each descriptor onto 0, 1 and 2 (which clears their close-on-exec flag); a
/// source below 3 is first moved above 2, so that no placement clobbers a later source.
fn place_stdio(stdio: [RawFd; 3]) -> Result<(), Errno> {
    let mut sources = stdio;
    for source in &mut sources {
        if *source < 3 {
            // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor of this process (its own table).
            let moved = unsafe { libc::fcntl(*source, libc::F_DUPFD_CLOEXEC, 3) };
            if moved < 0 {
                return Err(Errno::from_raw_os_error(super::probe::errno()));
            }
            *source = moved;
        }
    }
    for (target, source) in sources.into_iter().enumerate() {
        // SAFETY: dup2 between descriptors of this process (no CLONE_FILES).
        if unsafe { libc::dup2(source, target as RawFd) } < 0 {
            return Err(Errno::from_raw_os_error(super::probe::errno()));
        }
    }
    Ok(())
}

/// The program, its arguments and environment, and where `execve` is tried: glibc's `execvp`
/// (what `std::process::Command` runs) on data prepared before the clone, with the `PATH` of
/// the new environment.
struct ExecPlan {
    /// Owners of the strings `argv` and `envp` point into.
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// `/bin/sh FILE ARGS…`, for a file `execve` rejects as not executable (ENOEXEC) (slot 1
    /// is written by the child; atomic pointers have the layout of plain ones).
    script_argv: Vec<AtomicPtr<libc::c_char>>,
    /// The paths tried in order: the program itself when it has a `/`, else one per `PATH`
    /// entry.
    candidates: Vec<CString>,
    /// Whether the candidates are a `PATH` search (try on after a missing or denied one).
    search: bool,
}

/// glibc's `_PATH_BSHELL`.
const SCRIPT_SHELL: &CStr = c"/bin/sh";
/// glibc's `_CS_PATH`: the search path when the environment has no `PATH`.
const DEFAULT_SEARCH_PATH: &str = "/bin:/usr/bin";
/// glibc's bound on the `PATH` it searches (`PATH_MAX`).
const PATH_MAX: usize = 4096;

impl ExecPlan {
    fn new(argv: &[String], env: &[(String, String)]) -> Result<Self, ProcessError> {
        let nul = |what| move |_| ProcessError::Nul { what };
        let args = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(nul("argv"))?;
        // Later entries win, sorted by name: the environment `std::process::Command` built.
        // Every entry is checked, an overridden one too.
        let vars = env
            .iter()
            .map(|(k, v)| {
                if k.contains('\0') || v.contains('\0') {
                    Err(ProcessError::Nul {
                        what: "environment",
                    })
                } else {
                    Ok((k.as_str(), v.as_str()))
                }
            })
            .collect::<Result<BTreeMap<&str, &str>, _>>()?;
        let vars_c = vars
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(nul("environment"))?;
        let file = args.first().ok_or(ProcessError::EmptyArgv)?.as_bytes();
        let search = !file.contains(&b'/');
        let candidates = match (file.is_empty(), search) {
            (true, _) => Vec::new(),
            (false, false) => vec![args[0].clone()],
            (false, true) => {
                let path = vars
                    .get(airlock_env::PATH)
                    .copied()
                    .unwrap_or(DEFAULT_SEARCH_PATH);
                search_candidates(file, path.as_bytes())
            }
        };
        let ptr = |s: &CString| s.as_ptr();
        let mut argv_p: Vec<*const libc::c_char> = args.iter().map(ptr).collect();
        argv_p.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = vars_c.iter().map(ptr).collect();
        envp.push(std::ptr::null());
        let mut script_argv = vec![
            AtomicPtr::new(SCRIPT_SHELL.as_ptr().cast_mut()),
            AtomicPtr::new(std::ptr::null_mut()),
        ];
        script_argv.extend(
            args[1..]
                .iter()
                .map(|a| AtomicPtr::new(a.as_ptr().cast_mut())),
        );
        script_argv.push(AtomicPtr::new(std::ptr::null_mut()));
        let mut strings = args;
        strings.extend(vars_c);
        Ok(Self {
            _strings: strings,
            argv: argv_p,
            envp,
            script_argv,
            candidates,
            search,
        })
    }

    /// Runs in the child: `execvp`'s tries. Returns only when none succeeded: the errno
    /// `execvp` would have left (EACCES when any candidate was denied, else the last one's).
    fn exec(&self) -> i32 {
        let mut got_eacces = false;
        let mut last = libc::ENOENT;
        for candidate in &self.candidates {
            let mut errno = self.execve(candidate.as_ptr(), self.argv.as_ptr());
            if errno == libc::ENOEXEC {
                // A file without `#!` is run by the shell, as glibc does.
                self.script_argv[1].store(candidate.as_ptr().cast_mut(), Ordering::Relaxed);
                errno = self.execve(
                    SCRIPT_SHELL.as_ptr(),
                    // `AtomicPtr<T>` has the in-memory representation of `*mut T`.
                    self.script_argv.as_ptr().cast(),
                );
                if !self.search {
                    return errno;
                }
                last = errno;
                got_eacces |= errno == libc::EACCES;
                continue;
            }
            if !self.search {
                return errno;
            }
            match errno {
                libc::EACCES => got_eacces = true,
                libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
                // Found, but something else went wrong executing it.
                _ => return errno,
            }
            last = errno;
        }
        if got_eacces {
            libc::EACCES
        } else {
            last
        }
    }

    fn execve(&self, path: *const libc::c_char, argv: *const *const libc::c_char) -> i32 {
        // SAFETY: NUL-terminated C strings and NULL-terminated vectors prepared by the parent,
        // alive until the child execs or exits.
        unsafe { libc::execve(path, argv, self.envp.as_ptr()) };
        super::probe::errno()
    }
}

/// The paths glibc's `execvp` tries for `file` (which has no `/`) on `path`, in order: each
/// entry followed by `/file`, an empty entry meaning the working directory. Like glibc, an
/// entry as long as the bounded `PATH` is skipped (and the `:` after it read as an empty entry).
fn search_candidates(file: &[u8], path: &[u8]) -> Vec<CString> {
    let bound = path.len().min(PATH_MAX - 1) + 1;
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let end = path[start..]
            .iter()
            .position(|&b| b == b':')
            .map_or(path.len(), |i| start + i);
        if end - start >= bound {
            if end == path.len() {
                break;
            }
            start = end;
            continue;
        }
        let mut candidate = path[start..end].to_vec();
        if end > start {
            candidate.push(b'/');
        }
        candidate.extend_from_slice(file);
        if let Ok(candidate) = CString::new(candidate) {
            out.push(candidate);
        }
        if end == path.len() {
            break;
        }
        start = end + 1;
    }
    out
}

/// `/proc/sys/fs/suid_dumpable`, opened once (see [`hold_suid_dumpable`]); `None` when it
/// could not be opened.
static SUID_DUMPABLE: OnceLock<Option<OwnedFd>> = OnceLock::new();

/// Opens `/proc/sys/fs/suid_dumpable` for [`spawn`], which reads it before each spawn. Call it
/// before the root filesystem hides the host's `/proc` (the guest's PID 1 does so during
/// setup); without it, the first spawn opens it, and where it cannot be read every spawn
/// copies the caller's memory.
pub fn hold_suid_dumpable() {
    let _ = suid_dumpable_fd();
}

fn suid_dumpable_fd() -> Option<&'static OwnedFd> {
    SUID_DUMPABLE
        .get_or_init(|| {
            rustix::fs::open(
                c"/proc/sys/fs/suid_dumpable",
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .ok()
        })
        .as_ref()
}

/// Shared memory unless an identity switch could make it dumpable by other processes.
fn clone_mode() -> CloneMode {
    let Some(fd) = suid_dumpable_fd() else {
        return CloneMode::Copy;
    };
    let mut buf = [0u8; 8];
    match rustix::io::pread(fd, &mut buf, 0) {
        Ok(n) => mode_for(&buf[..n]),
        Err(_) => CloneMode::Copy,
    }
}

/// The mode for a reading of `fs.suid_dumpable`: 0 (the switch makes the memory
/// non-dumpable) and 2 (dumpable by root of its user namespace only, i.e. the host's) keep
/// PID 1 out of reach; 1, or anything unknown, would not.
fn mode_for(setting: &[u8]) -> CloneMode {
    match setting.trim_ascii() {
        b"0" | b"2" => CloneMode::Shared,
        _ => CloneMode::Copy,
    }
}

/// What [`bounding_set`] read, or 0 once [`empty_bounding_set`] emptied it.
static BOUNDING: OnceLock<u64> = OnceLock::new();

/// The capabilities of this process's bounding set (bit `n` for capability `n`), read once:
/// the set only shrinks, so the first reading covers every later one (dropping a capability
/// that is already gone succeeds).
fn bounding_set() -> u64 {
    *BOUNDING.get_or_init(|| {
        let mut set = 0u64;
        for cap in 0..64u32 {
            let one = CapabilitySet::from_bits_retain(1u64 << cap);
            match rustix::thread::capability_is_in_bounding_set(one) {
                Ok(true) => set |= 1u64 << cap,
                Ok(false) => {}
                Err(Errno::INVAL) => return set,
                // Unknown: every number is dropped, up to the first the kernel rejects.
                Err(_) => return u64::MAX,
            }
        }
        set
    })
}

/// What the child drops from the bounding set: [`bounding_set`], unless that says "emptied"
/// while this thread still holds `CAP_CHOWN` there (a thread older than
/// [`empty_bounding_set`], whose set is its own): then every capability, as before.
fn bounding_to_drop() -> u64 {
    let set = bounding_set();
    let chown = CapabilitySet::CHOWN;
    if set == 0 && rustix::thread::capability_is_in_bounding_set(chown).unwrap_or(true) {
        return u64::MAX;
    }
    set
}

/// Empties the calling thread's capability bounding set for good, for a caller that spawns
/// only processes with `drop_capabilities` (the guest's PID 1 when it serves no `--root`
/// process): the threads it creates afterwards inherit the empty set, and so do the processes
/// they [`spawn`], whose child then has nothing left to drop (it was one `PR_CAPBSET_DROP`,
/// a new set of credentials each, per capability and per spawn). The bounding set only limits
/// what an `execve` may grant; the caller keeps its effective and permitted capabilities.
///
/// Call it before the threads that spawn exist (the set is per thread). On failure (no
/// `CAP_SETPCAP`) nothing is recorded, and every child drops the set itself as before.
pub fn empty_bounding_set() -> Result<(), ProcessError> {
    if BOUNDING.get() == Some(&0) && bounding_to_drop() == 0 {
        // Emptied already, on this thread or one it descends from (the init stage, before
        // PID 1 was forked): each drop would still make a new set of credentials.
        return Ok(());
    }
    drop_bounding(u64::MAX).map_err(|e| parent_err("prctl(PR_CAPBSET_DROP)", e))?;
    // A reading made before (by a spawn on this thread) stays: dropping again is harmless.
    let _ = BOUNDING.set(0);
    Ok(())
}

/// Drops the capabilities in `set` from the bounding set (one `PR_CAPBSET_DROP` each); a
/// number past `cap_last_cap` ends the list.
fn drop_bounding(set: u64) -> Result<(), Errno> {
    for cap in 0..64u32 {
        if set & (1u64 << cap) == 0 {
            continue;
        }
        let one = CapabilitySet::from_bits_retain(1u64 << cap);
        match rustix::thread::remove_capability_from_bounding_set(one) {
            Ok(()) => {}
            Err(Errno::INVAL) => return Ok(()),
            Err(errno) => return Err(errno),
        }
    }
    Ok(())
}

/// Marks every descriptor `>= first` close-on-exec.
fn cloexec_from(first: libc::c_uint) -> Result<(), Errno> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on this process's own
    // descriptors; it closes nothing and touches no memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    zero_or_errno(rc)
}

/// A raw syscall's return code: `Ok` for 0, else the thread's errno (async-signal-safe).
fn zero_or_errno(rc: libc::c_long) -> Result<(), Errno> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(super::probe::errno()))
    }
}

/// PID 1's own `/proc/self/oom_score_adj`, opened for writing by [`hold_own_oom_score_adj`].
static OWN_OOM_SCORE_ADJ: OnceLock<OwnOomScoreAdj> = OnceLock::new();

/// Spawns with a raised `oom_score_adj` one at a time: the value is the whole process's, so
/// two threads raising and restoring it at once would hand a child the wrong value or leave
/// the parent with the raised one.
static OOM_SCORE_ADJ_SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct OwnOomScoreAdj {
    file: OwnedFd,
    /// The value it had when opened, which is the process's own between spawns.
    usual: Vec<u8>,
}

fn own_oom_score_adj() -> Result<&'static OwnOomScoreAdj, ProcessError> {
    OWN_OOM_SCORE_ADJ.get().ok_or(ProcessError::Syscall {
        syscall: "open(/proc/self/oom_score_adj)",
        source: std::io::Error::from_raw_os_error(libc::EBADF),
    })
}

/// Opens the caller's `/proc/self/oom_score_adj` for writing and keeps it for [`spawn`]. Call it
/// once, while the process is dumpable: a non-dumpable process's `/proc` files belong to a root
/// the sandbox may not map, so it could not open its own file later. The guest's PID 1 calls it
/// during setup, before any sandbox process exists.
pub fn hold_own_oom_score_adj() -> std::io::Result<()> {
    let file = rustix::fs::open(
        c"/proc/self/oom_score_adj",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut buf = [0u8; 16];
    let n = rustix::io::pread(&file, &mut buf, 0)?;
    let usual = buf[..n].to_vec();
    let _ = OWN_OOM_SCORE_ADJ.set(OwnOomScoreAdj { file, usual });
    Ok(())
}

/// Runs `spawn_child` with this process's `oom_score_adj` raised to `adj`, so the child inherits
/// `adj` from its first instruction (no program can fork before it is set). The child writes
/// the usual value back before anything else ([`ChildPlan::restore_oom`]), so the parent is back
/// to it before the child's program runs; the parent writes it too, for a child that failed
/// first. Allowed without privilege: the usual value is not below the kernel's per-process
/// minimum. One spawn at a time ([`OOM_SCORE_ADJ_SPAWN`]).
fn with_oom_score_adj<T>(
    own: &OwnOomScoreAdj,
    adj: u16,
    spawn_child: impl FnOnce() -> T,
) -> Result<T, ProcessError> {
    let err = |e: Errno| ProcessError::Syscall {
        syscall: "write(/proc/self/oom_score_adj)",
        source: e.into(),
    };
    let _one_at_a_time = OOM_SCORE_ADJ_SPAWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    rustix::io::pwrite(&own.file, adj.to_string().as_bytes(), 0).map_err(err)?;
    let result = spawn_child();
    rustix::io::pwrite(&own.file, &own.usual, 0).map_err(err)?;
    Ok(result)
}

/// Removes `cap` from the bounding set and from the effective, permitted and inheritable sets
/// (which also removes it from the ambient set); every other capability stays.
fn withhold(cap: CapabilitySet) -> Result<(), Errno> {
    if rustix::thread::capability_is_in_bounding_set(cap)? {
        rustix::thread::remove_capability_from_bounding_set(cap)?;
    }
    let mut sets = rustix::thread::capabilities(None)?;
    sets.effective.remove(cap);
    sets.permitted.remove(cap);
    sets.inheritable.remove(cap);
    rustix::thread::set_capabilities(None, sets)
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog)` for the calling thread (the only thread of
/// the child).
fn install_seccomp(program: &seccompiler::BpfProgram) -> Result<(), Errno> {
    let len = u16::try_from(program.len()).map_err(|_| Errno::INVAL)?;
    if len == 0 {
        return Err(Errno::INVAL);
    }
    let prog = libc::sock_fprog {
        len,
        // seccompiler's `sock_filter` is `#[repr(C)]` with the kernel's layout.
        filter: program.as_ptr().cast_mut().cast::<libc::sock_filter>(),
    };
    // SAFETY: `prog` points at `len` valid filter instructions that outlive the call; the
    // kernel copies them before returning.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &prog as *const libc::sock_fprog,
        )
    };
    zero_or_errno(rc)
}

/// Write end of the signal self-pipe; `-1` until [`install_signal_pipe`] runs.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
/// The signals [`install_signal_pipe`] caught (bit `n` for signal `n`): [`spawn`]'s child sets
/// them back to their defaults before it unblocks signals.
static CAUGHT_SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = [signal as u8];
        // SAFETY: write(2) on a non-blocking pipe is async-signal-safe; when the pipe is full
        // the byte is dropped, which is fine because readers treat bytes as wake-ups and
        // re-check state (waitpid loops until no child is left to reap).
        let _ = unsafe { libc::write(fd, byte.as_ptr().cast(), 1) };
    }
}

/// Installs handlers for `signals` that write each delivered signal's number, as one byte,
/// into a pipe; returns the read end. A real handler (not a blocked mask) is required: the
/// kernel drops signals with the default disposition sent to a PID namespace's init.
/// Call once per process.
pub fn install_signal_pipe(signals: &[libc::c_int]) -> Result<OwnedFd, ProcessError> {
    let (read, write) =
        pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).map_err(|e| parent_err("pipe2", e))?;
    // The write end lives for the rest of the process: handlers may run at any time.
    SIGNAL_PIPE.store(
        std::os::fd::IntoRawFd::into_raw_fd(write),
        Ordering::Relaxed,
    );
    rustix::io::ioctl_fionbio(&read, false).map_err(|e| parent_err("ioctl(FIONBIO)", e))?;
    for &signal in signals {
        // SAFETY: an all-zero sigaction is a valid value (empty mask, no flags) that is then
        // filled in; `on_signal` only performs async-signal-safe work.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        CAUGHT_SIGNALS.fetch_or(1u64 << (signal as u32 & 63), Ordering::Relaxed);
        // SAFETY: `action` is fully initialised; sigaction has no other memory effects.
        let rc = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(ProcessError::Syscall {
                syscall: "sigaction",
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(read)
}

/// The signals pending for the calling thread or for the whole process (`sigpending(2)`
/// gives the union), as a mask with bit `n - 1` set for signal `n` (1 to 64). One syscall,
/// where `/proc/self/status` (`SigPnd`, `ShdPnd`) costs the kernel a page of formatting.
pub fn pending_signals() -> std::io::Result<u64> {
    // SAFETY: an all-zero sigset_t is a valid value that sigpending then fills in.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable sigset_t; sigpending writes nothing else.
    if unsafe { libc::sigpending(&mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut mask = 0u64;
    for signal in 1..=64 {
        // SAFETY: `set` is initialised; sigismember only reads it.
        if unsafe { libc::sigismember(&set, signal) } == 1 {
            mask |= 1 << (signal - 1);
        }
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

    fn run(
        argv: &[&str],
        identity: Identity,
        confinement: &Confinement,
    ) -> Result<(i32, String), ProcessError> {
        run_in(
            argv,
            &[("PATH", "/usr/bin:/bin")],
            "/",
            identity,
            confinement,
            clone_mode(),
        )
    }

    /// Runs `argv` with exactly `env`, in `cwd`, in clone mode `mode`; its exit code and
    /// stdout+stderr.
    fn run_in(
        argv: &[&str],
        env: &[(&str, &str)],
        cwd: &str,
        identity: Identity,
        confinement: &Confinement,
        mode: CloneMode,
    ) -> Result<(i32, String), ProcessError> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let spec = SpawnSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: cwd.into(),
            stdio: [null.into(), rustix::io::dup(&write).unwrap(), write],
            controlling_tty: false,
            identity,
        };
        let pid = spawn_as(spec, confinement, mode)?;
        let mut out = String::new();
        std::fs::File::from(read).read_to_string(&mut out).unwrap();
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        let (_, status) =
            rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
                .unwrap()
                .unwrap();
        Ok((status.exit_status().unwrap_or(-1), out))
    }

    #[test]
    fn child_runs_in_its_own_session_with_only_the_requested_env() {
        let (code, out) = run(
            &[
                "sh",
                "-c",
                "echo pid=$$; echo pid=$(cut -d' ' -f6 /proc/$$/stat); env",
            ],
            Identity::Inherit,
            &Confinement::default(),
        )
        .unwrap();
        assert_eq!(code, 0);
        let mut lines = out.lines();
        let pid = lines.next().unwrap();
        assert_eq!(
            lines.next().unwrap(),
            pid,
            "child must lead its own session (sid == pid)"
        );
        let env: Vec<&str> = lines
            .filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_="))
            .collect();
        assert_eq!(env, ["PATH=/usr/bin:/bin"]);
    }

    #[test]
    fn missing_program_is_reported_as_an_execve_failure() {
        let err = run(
            &["/nonexistent/airlock-test"],
            Identity::Inherit,
            &Confinement::default(),
        )
        .unwrap_err();
        match err {
            ProcessError::Child { step, source, .. } => {
                assert_eq!(step, ChildStep::Exec);
                assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn confined_child_holds_no_capabilities_and_no_new_privs() {
        if !airlock_testkit::needs_root("dropping the bounding set needs CAP_SETPCAP") {
            return;
        }
        let confinement = Confinement {
            drop_capabilities: true,
            no_new_privs: true,
            withhold_setfcap: false,
            oom_score_adj: None,
            seccomp: None,
            mount_ns: None,
        };
        let (code, out) = run(
            &["grep", "-E", "^(Cap|NoNewPrivs)", "/proc/self/status"],
            Identity::Inherit,
            &confinement,
        )
        .unwrap();
        assert_eq!(code, 0);
        for line in out.lines() {
            let (key, value) = line.split_once(':').unwrap();
            let expected = if key == "NoNewPrivs" {
                "1"
            } else {
                "0000000000000000"
            };
            assert_eq!(value.trim(), expected, "{line}");
        }
    }

    #[test]
    fn children_of_threads_made_before_or_after_the_bounding_set_was_emptied_hold_none() {
        if !airlock_testkit::needs_root("emptying the bounding set needs CAP_SETPCAP") {
            return;
        }
        fn caps() -> String {
            let confinement = Confinement {
                drop_capabilities: true,
                no_new_privs: true,
                ..Confinement::default()
            };
            let argv = ["grep", "-E", "^(Cap|NoNewPrivs)", "/proc/self/status"];
            let (code, out) = run(&argv, Identity::Inherit, &confinement).unwrap();
            assert_eq!(code, 0, "{out}");
            out
        }
        fn assert_none(out: &str) {
            for line in out.lines() {
                let (key, value) = line.split_once(':').unwrap();
                let want = if key == "NoNewPrivs" {
                    "1"
                } else {
                    "0000000000000000"
                };
                assert_eq!(value.trim(), want, "{line}");
            }
        }
        // A thread that exists before the set is emptied keeps its own, full set.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let older = std::thread::spawn(move || {
            wait.recv().unwrap();
            caps()
        });
        std::thread::spawn(move || {
            empty_bounding_set().unwrap();
            let own = rustix::thread::capabilities(None).unwrap();
            assert!(own.effective.contains(CapabilitySet::SYS_ADMIN), "{own:?}");
            assert_none(&caps());
            // And a thread made after it inherits the empty set.
            assert_none(&std::thread::spawn(caps).join().unwrap());
        })
        .join()
        .unwrap();
        go.send(()).unwrap();
        assert_none(&older.join().unwrap());
    }

    #[test]
    fn root_child_cannot_set_file_capabilities_but_keeps_the_others() {
        if !airlock_testkit::needs_root("withholding CAP_SETFCAP") {
            return;
        }
        let confinement = Confinement {
            drop_capabilities: false,
            no_new_privs: true,
            withhold_setfcap: true,
            oom_score_adj: None,
            seccomp: None,
            mount_ns: None,
        };
        let (code, out) = run(
            &["grep", "-E", "^Cap(Eff|Bnd|Prm)", "/proc/self/status"],
            Identity::Inherit,
            &confinement,
        )
        .unwrap();
        assert_eq!(code, 0);
        const SETFCAP: u32 = 31;
        for line in out.lines() {
            let (key, value) = line.split_once(':').unwrap();
            let bits = u64::from_str_radix(value.trim(), 16).unwrap();
            assert_eq!(bits & (1 << SETFCAP), 0, "{key} still has CAP_SETFCAP");
            assert_ne!(bits & (1 << 0), 0, "{key} lost CAP_CHOWN too");
        }
    }

    #[test]
    fn spawned_process_starts_with_the_requested_oom_score_adj_and_the_parent_keeps_its_own() {
        hold_own_oom_score_adj().unwrap();
        let own = || std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
        let before = own();
        let confinement = Confinement {
            oom_score_adj: Some(500),
            ..Confinement::default()
        };
        let (code, out) = run(
            &["cat", "/proc/self/oom_score_adj"],
            Identity::Inherit,
            &confinement,
        )
        .unwrap();
        assert_eq!((code, out.as_str()), (0, "500\n"));
        assert_eq!(own(), before, "the parent's own value is restored");
        // Restored before the child's program runs: what it reads of its parent is the usual.
        let parent = format!("/proc/{}/oom_score_adj", std::process::id());
        let (code, out) = run(&["cat", &parent], Identity::Inherit, &confinement).unwrap();
        assert_eq!((code, out), (0, before));
    }

    /// The guest's PID 1 spawns from several threads at once (one per exec stream): each
    /// child still gets the raised value, and the parent ends with its own, not a raised value
    /// one thread took for its own while another had raised it.
    #[test]
    fn concurrent_spawns_each_get_the_raised_oom_score_adj_and_the_parent_keeps_its_own() {
        hold_own_oom_score_adj().unwrap();
        let own = || std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
        let before = own();
        let confinement = Confinement {
            oom_score_adj: Some(600),
            ..Confinement::default()
        };
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..25 {
                        let (code, out) = run(
                            &["cat", "/proc/self/oom_score_adj"],
                            Identity::Inherit,
                            &confinement,
                        )
                        .unwrap();
                        assert_eq!((code, out.as_str()), (0, "600\n"));
                    }
                });
            }
        });
        assert_eq!(own(), before, "the parent's own value is restored");
    }

    #[test]
    fn identity_switch_changes_uid_gid_and_groups() {
        if !airlock_testkit::needs_root("switching identity needs CAP_SETUID/CAP_SETGID") {
            return;
        }
        let identity = Identity::Switch {
            uid: 65534,
            gid: 65534,
            groups: Some(vec![]),
        };
        let (code, out) = run(&["id"], identity, &Confinement::default()).unwrap();
        assert_eq!(code, 0);
        assert!(
            out.starts_with("uid=65534") && out.contains("gid=65534"),
            "{out}"
        );
        assert!(
            !out.contains("groups=0") && !out.contains("(root)"),
            "{out}"
        );
    }

    #[test]
    fn descriptor_without_cloexec_does_not_reach_the_child() {
        let (leak_read, _leak_write) = pipe_with(PipeFlags::empty()).unwrap();
        rustix::io::fcntl_setfd(&leak_read, rustix::io::FdFlags::empty()).unwrap();
        let (code, out) = run(
            &["ls", "/proc/self/fd"],
            Identity::Inherit,
            &Confinement::default(),
        )
        .unwrap();
        assert_eq!(code, 0);
        // 3 is the directory ls itself opened to list /proc/self/fd.
        let fds: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(
            fds,
            ["0", "1", "2", "3"],
            "leaked fd {}",
            leak_read.as_raw_fd()
        );
    }

    #[test]
    fn failing_setup_step_is_named_in_the_error() {
        let spec_cwd = Confinement {
            no_new_privs: true,
            ..Confinement::default()
        };
        for mode in [CloneMode::Shared, CloneMode::Copy] {
            let err = run_in(
                &["true"],
                &[("PATH", "/usr/bin:/bin")],
                "/nonexistent/airlock-cwd",
                Identity::Inherit,
                &spec_cwd,
                mode,
            )
            .unwrap_err();
            match err {
                ProcessError::Child { step, source, .. } => {
                    assert_eq!(step, ChildStep::Chdir, "{mode:?}");
                    assert_eq!(source.raw_os_error(), Some(libc::ENOENT), "{mode:?}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// A directory with `name` holding `body` in mode `mode` (none when `body` is `None`: a
    /// directory of that name instead).
    fn dir_with(name: &str, body: Option<&str>, mode: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        match body {
            Some(body) => {
                std::fs::write(&path, body).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            None => std::fs::create_dir(&path).unwrap(),
        }
        dir
    }

    fn exec_errno(argv: &[&str], path: &str) -> i32 {
        let err = run_in(
            argv,
            &[("PATH", path)],
            "/",
            Identity::Inherit,
            &Confinement::default(),
            clone_mode(),
        )
        .unwrap_err();
        match err {
            ProcessError::Child { step, source, .. } => {
                assert_eq!(step, ChildStep::Exec, "{source}");
                source.raw_os_error().unwrap()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_blocked_signal_sent_to_this_thread_is_reported_pending() {
        use nix::sys::signal::{SigSet, Signal};
        // On a thread of its own: the mask and the pending signal stay with it, and the
        // signal is taken (sigwait) before the thread ends.
        std::thread::spawn(|| {
            let mut only = SigSet::empty();
            only.add(Signal::SIGUSR2);
            only.thread_block().unwrap();
            let bit = 1u64 << (Signal::SIGUSR2 as i32 - 1);
            assert_eq!(pending_signals().unwrap() & bit, 0);
            nix::sys::pthread::pthread_kill(nix::sys::pthread::pthread_self(), Signal::SIGUSR2)
                .unwrap();
            assert_ne!(pending_signals().unwrap() & bit, 0);
            assert_eq!(only.wait().unwrap(), Signal::SIGUSR2);
            assert_eq!(pending_signals().unwrap() & bit, 0);
        })
        .join()
        .unwrap();
    }

    fn dir(t: &tempfile::TempDir) -> &str {
        t.path().to_str().unwrap()
    }

    #[test]
    fn a_nul_in_the_arguments_environment_or_directory_is_refused_before_any_clone() {
        let nul = |argv: &[&str], env: &[(&str, &str)], cwd: &str| match run_in(
            argv,
            env,
            cwd,
            Identity::Inherit,
            &Confinement::default(),
            clone_mode(),
        ) {
            Err(ProcessError::Nul { what }) => what,
            other => panic!("{other:?}"),
        };
        assert_eq!(nul(&["true", "a\0b"], &[], "/"), "argv");
        // An entry a later one overrides is refused too.
        let env = [("X", "a\0b"), ("X", "ok")];
        assert_eq!(nul(&["true"], &env, "/"), "environment");
        assert_eq!(nul(&["true"], &[], "/\0tmp"), "cwd");
    }

    #[test]
    fn a_command_on_no_path_entry_is_not_found() {
        let empty = tempfile::tempdir().unwrap();
        let path = format!("{}:/nonexistent/airlock:{}", dir(&empty), "/usr/bin");
        assert_eq!(
            exec_errno(&["airlock-no-such-command"], &path),
            libc::ENOENT
        );
        assert_eq!(exec_errno(&[""], "/usr/bin"), libc::ENOENT);
    }

    #[test]
    fn a_file_without_execute_permission_is_denied_even_when_later_entries_lack_it() {
        let denied = dir_with("tool", Some("#!/bin/sh\necho no\n"), 0o644);
        let empty = tempfile::tempdir().unwrap();
        let path = format!("{}:{}", dir(&denied), dir(&empty));
        assert_eq!(exec_errno(&["tool"], &path), libc::EACCES);
        let direct = format!("{}/tool", dir(&denied));
        assert_eq!(exec_errno(&[direct.as_str()], "/usr/bin"), libc::EACCES);
    }

    #[test]
    fn a_directory_on_the_path_is_denied() {
        let holder = dir_with("tool", None, 0);
        assert_eq!(exec_errno(&["tool"], dir(&holder)), libc::EACCES);
        assert_eq!(exec_errno(&[dir(&holder)], "/usr/bin"), libc::EACCES);
    }

    #[test]
    fn the_search_goes_on_past_a_denied_file_to_an_executable_one() {
        let denied = dir_with("tool", Some("#!/bin/sh\necho first\n"), 0o644);
        let runs = dir_with("tool", Some("#!/bin/sh\necho second \"$@\"\n"), 0o755);
        let path = format!("{}:{}", dir(&denied), dir(&runs));
        for mode in [CloneMode::Shared, CloneMode::Copy] {
            let (code, out) = run_in(
                &["tool", "arg"],
                &[("PATH", &path)],
                "/",
                Identity::Inherit,
                &Confinement::default(),
                mode,
            )
            .unwrap();
            assert_eq!((code, out.as_str()), (0, "second arg\n"), "{mode:?}");
        }
    }

    #[test]
    fn a_file_without_an_interpreter_line_is_run_by_the_shell() {
        let script = dir_with("tool", Some("echo scripted \"$0\" \"$1\"\n"), 0o755);
        let (code, out) = run_in(
            &["tool", "one"],
            &[("PATH", dir(&script))],
            "/",
            Identity::Inherit,
            &Confinement::default(),
            clone_mode(),
        )
        .unwrap();
        let expected = format!("scripted {}/tool one\n", dir(&script));
        assert_eq!((code, out), (0, expected));
    }

    #[test]
    fn an_empty_path_entry_is_the_working_directory_and_no_path_is_bin_and_usr_bin() {
        let here = dir_with("tool", Some("#!/bin/sh\necho here\n"), 0o755);
        let (code, out) = run_in(
            &["tool"],
            &[("PATH", "/nonexistent/airlock:")],
            dir(&here),
            Identity::Inherit,
            &Confinement::default(),
            clone_mode(),
        )
        .unwrap();
        assert_eq!((code, out.as_str()), (0, "here\n"));
        let (code, out) = run_in(
            &["sh", "-c", "echo found"],
            &[],
            "/",
            Identity::Inherit,
            &Confinement::default(),
            clone_mode(),
        )
        .unwrap();
        assert_eq!((code, out.as_str()), (0, "found\n"));
    }

    #[test]
    fn search_candidates_follow_glibc() {
        let c = |file: &str, path: &str| -> Vec<String> {
            search_candidates(file.as_bytes(), path.as_bytes())
                .into_iter()
                .map(|c| c.into_string().unwrap())
                .collect()
        };
        assert_eq!(c("ls", "/a:/b/"), ["/a/ls", "/b//ls"]);
        assert_eq!(c("ls", ""), ["ls"]);
        assert_eq!(c("ls", ":/a:"), ["ls", "/a/ls", "ls"]);
    }

    #[test]
    fn memory_is_shared_only_where_an_id_switch_keeps_it_out_of_reach() {
        assert_eq!(mode_for(b"0\n"), CloneMode::Shared);
        assert_eq!(mode_for(b"2\n"), CloneMode::Shared);
        assert_eq!(mode_for(b"1\n"), CloneMode::Copy);
        assert_eq!(mode_for(b""), CloneMode::Copy);
        assert_eq!(mode_for(b"3\n"), CloneMode::Copy);
    }

    #[test]
    fn the_caller_stays_non_dumpable_across_a_childs_identity_switch() {
        if !airlock_testkit::needs_root("switching identity needs CAP_SETUID/CAP_SETGID") {
            return;
        }
        use rustix::process::{dumpable_behavior, set_dumpable_behavior, DumpableBehavior};
        set_dumpable_behavior(DumpableBehavior::NotDumpable).unwrap();
        let identity = Identity::Switch {
            uid: 65534,
            gid: 65534,
            groups: Some(vec![]),
        };
        for mode in [CloneMode::Shared, CloneMode::Copy] {
            let (code, out) = run_in(
                &["id", "-u"],
                &[("PATH", "/usr/bin:/bin")],
                "/",
                identity.clone(),
                &Confinement::default(),
                mode,
            )
            .unwrap();
            assert_eq!((code, out.as_str()), (0, "65534\n"), "{mode:?}");
            let after = dumpable_behavior().unwrap();
            assert_eq!(after, DumpableBehavior::NotDumpable, "{mode:?}");
        }
        set_dumpable_behavior(DumpableBehavior::Dumpable).unwrap();
    }

    #[test]
    fn the_child_starts_with_an_empty_mask_and_default_sigpipe() {
        let mut set: libc::sigset_t = crate::sys::spawn::unsafe_zeroed_sigset();
        let mut old: libc::sigset_t = crate::sys::spawn::unsafe_zeroed_sigset();
        // SAFETY: valid sigsets owned by this frame; the mask is restored below.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        }
        let (code, out) = run(
            &["grep", "-E", "^(SigBlk|SigIgn):", "/proc/self/status"],
            Identity::Inherit,
            &Confinement::default(),
        )
        .unwrap();
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        assert_eq!(code, 0, "{out}");
        for line in out.lines() {
            let (name, mask) = line.split_once(':').unwrap();
            let mask = u64::from_str_radix(mask.trim(), 16).unwrap();
            match name {
                "SigIgn" => assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE ignored"),
                _ => assert_eq!(mask, 0, "the child started with blocked signals"),
            }
        }
    }
}
