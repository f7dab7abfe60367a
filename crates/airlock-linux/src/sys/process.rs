//! Spawning sandbox processes, and the signal self-pipe of the guest's PID 1.
//!
//! [`spawn`] forks through `std::process::Command` (which reports `execve` failures back to
//! the parent) and runs one pre-exec hook in the child. The hook applies, in this order:
//!
//! 0. `setns(CLONE_NEWNS)` into the mount namespace the confinement names, if any (a root
//!    invoker's `--root` processes: the root view, `rootfs/root_view.rs`); first, while every
//!    capability is still held.
//! 1. `setsid()`: a new session and process group, so the process has no controlling
//!    terminal it did not open and cannot inject input (`TIOCSTI`) into one of ours; the
//!    guest signals the whole group by its pid.
//! 2. `TIOCSCTTY` on fd 0 (PTY mode only): the PTY becomes the controlling terminal. This
//!    needs step 1 (only a session leader without a terminal may acquire one).
//! 3. `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`: every descriptor but 0/1/2 is marked
//!    close-on-exec, so none survives `execve` (PRODUCT I7). Marking instead of closing keeps
//!    std's exec-error pipe working until the exec itself.
//! 4. Capability bounding set emptied and ambient set cleared (when dropping capabilities).
//!    This must precede step 5: `PR_CAPBSET_DROP` needs `CAP_SETPCAP`, which switching to a
//!    non-zero uid removes.
//! 5. Identity: `setgroups`, `setresgid`, `setresuid` (raw per-thread syscalls; the child has
//!    one thread). Groups before gid before uid, since each step needs the privilege the next
//!    one gives up.
//! 6. `chdir` to the working directory, after step 5 so access is checked as the new identity.
//! 7. Capabilities: effective, permitted and inheritable sets emptied with `capset`.
//! 8. `PR_SET_NO_NEW_PRIVS`, required by step 9 for an unprivileged caller and wanted anyway
//!    (setuid binaries and file capabilities grant nothing afterwards).
//! 9. The seccomp filter (`seccomp(SECCOMP_SET_MODE_FILTER)`), last, so the filter does not
//!    have to allow the setup syscalls above; it must allow `execve`.
//! 10. `execve` with exactly the requested environment (std's `env_clear`).
//!
//! Every step runs only async-signal-safe code: raw syscalls on data prepared before the
//! fork. A failing step writes its number into a close-on-exec pipe before returning, so the
//! parent's [`ProcessError`] names the step that failed, not just an errno.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{Gid, Uid};
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
}

impl ChildStep {
    const ALL: [ChildStep; 14] = [
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
    /// the guest's PID 1 (issue 9.10). The parent raises its own value around the fork (see
    /// [`hold_own_oom_score_adj`], required first), so the child has it from the start. Not
    /// written by the child: until `execve` it is non-dumpable like PID 1, its `/proc` files
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

/// Everything the pre-exec hook needs, prepared before the fork (no allocation after it).
struct ChildPlan {
    mount_ns: Option<RawFd>,
    controlling_tty: bool,
    drop_capabilities: bool,
    withhold_setfcap: bool,
    no_new_privs: bool,
    identity: Option<(Uid, Gid, Option<Vec<Gid>>)>,
    cwd: CString,
    seccomp: Option<seccompiler::BpfProgram>,
    report: RawFd,
}

/// Starts `spec` under `confinement`; returns the child's pid. The caller reaps it.
pub fn spawn(spec: SpawnSpec, confinement: &Confinement) -> Result<u32, ProcessError> {
    let program = spec.argv.first().ok_or(ProcessError::EmptyArgv)?.clone();
    if spec.argv.iter().any(|a| a.contains('\0')) {
        return Err(ProcessError::Nul { what: "argv" });
    }
    if spec
        .env
        .iter()
        .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return Err(ProcessError::Nul {
            what: "environment",
        });
    }
    let cwd = CString::new(spec.cwd.as_str()).map_err(|_| ProcessError::Nul { what: "cwd" })?;
    let (report_read, report_write) =
        pipe_with(PipeFlags::CLOEXEC).map_err(|e| parent_err("pipe2", e))?;
    let plan = ChildPlan {
        // Kept open by `confinement` until `spawn` returns (the child has joined by then).
        mount_ns: confinement.mount_ns.as_ref().map(|fd| fd.as_raw_fd()),
        controlling_tty: spec.controlling_tty,
        drop_capabilities: confinement.drop_capabilities,
        withhold_setfcap: confinement.withhold_setfcap && !confinement.drop_capabilities,
        no_new_privs: confinement.no_new_privs || confinement.seccomp.is_some(),
        identity: match spec.identity {
            Identity::Inherit => None,
            Identity::Switch { uid, gid, groups } => Some((
                Uid::from_raw(uid),
                Gid::from_raw(gid),
                groups.map(|g| g.into_iter().map(Gid::from_raw).collect()),
            )),
        },
        cwd,
        seccomp: confinement.seccomp.clone(),
        report: report_write.as_raw_fd(),
    };
    let [stdin, stdout, stderr] = spec.stdio;
    let mut command = Command::new(&program);
    command
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    // SAFETY: the closure runs in the forked child before execve. It only makes raw syscalls
    // (rustix/libc wrappers without allocation or locks) on data moved in before the fork,
    // and writes one byte to a pipe on failure; all of that is async-signal-safe.
    unsafe {
        command.pre_exec(move || plan.apply());
    }
    let spawned = match confinement.oom_score_adj {
        Some(adj) => with_oom_score_adj(adj, || command.spawn())?,
        None => command.spawn(),
    };
    drop(command);
    drop(report_write);
    match spawned {
        Ok(child) => Ok(child.id()),
        Err(source) => {
            let mut byte = [0u8; 1];
            let step = match std::fs::File::from(report_read).read(&mut byte) {
                Ok(1) => ChildStep::from_byte(byte[0]).unwrap_or(ChildStep::Exec),
                _ => ChildStep::Exec,
            };
            Err(ProcessError::Child {
                step,
                program,
                source,
            })
        }
    }
}

fn parent_err(syscall: &'static str, errno: Errno) -> ProcessError {
    ProcessError::Syscall {
        syscall,
        source: errno.into(),
    }
}

impl ChildPlan {
    /// Runs in the child: the numbered steps of the module docs.
    fn apply(&self) -> std::io::Result<()> {
        let step = |step: ChildStep, result: Result<(), Errno>| self.check(step, result);
        if let Some(ns) = self.mount_ns {
            // SAFETY: the descriptor is open: the parent holds it until `spawn` returns.
            let ns = unsafe { BorrowedFd::borrow_raw(ns) };
            step(
                ChildStep::MountNamespace,
                rustix::thread::move_into_link_name_space(
                    ns,
                    Some(rustix::thread::LinkNameSpaceType::Mount),
                ),
            )?;
        }
        step(ChildStep::Setsid, rustix::process::setsid().map(drop))?;
        if self.controlling_tty {
            // SAFETY: fd 0 is open in the child: std dup2'd the PTY slave onto it.
            let stdin = unsafe { BorrowedFd::borrow_raw(0) };
            step(
                ChildStep::ControllingTty,
                rustix::process::ioctl_tiocsctty(stdin),
            )?;
        }
        step(ChildStep::CloseFds, cloexec_from(3))?;
        if self.drop_capabilities {
            step(ChildStep::BoundingSet, empty_bounding_set())?;
            step(
                ChildStep::AmbientCaps,
                rustix::thread::clear_ambient_capability_set(),
            )?;
        }
        if let Some((uid, gid, groups)) = &self.identity {
            if let Some(groups) = groups {
                step(
                    ChildStep::Setgroups,
                    rustix::thread::set_thread_groups(groups),
                )?;
            }
            step(
                ChildStep::Setresgid,
                rustix::thread::set_thread_res_gid(*gid, *gid, *gid),
            )?;
            step(
                ChildStep::Setresuid,
                rustix::thread::set_thread_res_uid(*uid, *uid, *uid),
            )?;
        }
        step(
            ChildStep::Chdir,
            rustix::process::chdir(self.cwd.as_c_str()),
        )?;
        if self.drop_capabilities {
            let empty = CapabilitySets {
                effective: CapabilitySet::empty(),
                permitted: CapabilitySet::empty(),
                inheritable: CapabilitySet::empty(),
            };
            step(
                ChildStep::Capset,
                rustix::thread::set_capabilities(None, empty),
            )?;
        }
        if self.withhold_setfcap {
            step(ChildStep::BoundingSet, withhold(CapabilitySet::SETFCAP))?;
        }
        if self.no_new_privs {
            step(
                ChildStep::NoNewPrivs,
                rustix::thread::set_no_new_privs(true),
            )?;
        }
        if let Some(program) = &self.seccomp {
            step(ChildStep::Seccomp, install_seccomp(program))?;
        }
        Ok(())
    }

    /// On failure, reports the step to the parent and converts the errno.
    fn check(&self, step: ChildStep, result: Result<(), Errno>) -> std::io::Result<()> {
        result.map_err(|errno| {
            let byte = [step as u8];
            // SAFETY: `report` is the write end of a pipe owned by the parent and inherited by
            // this child; write(2) is async-signal-safe. A short write only loses the step name.
            let _ = unsafe { libc::write(self.report, byte.as_ptr().cast(), 1) };
            std::io::Error::from_raw_os_error(errno.raw_os_error())
        })
    }
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
static OWN_OOM_SCORE_ADJ: OnceLock<OwnedFd> = OnceLock::new();

/// Opens the caller's `/proc/self/oom_score_adj` for writing and keeps it for [`spawn`]. Call it
/// once, while the process is dumpable: a non-dumpable process's `/proc` files belong to a root
/// the sandbox may not map, so it could not open its own file later. The guest's PID 1 calls it
/// during setup, before any sandbox process exists.
pub fn hold_own_oom_score_adj() -> std::io::Result<()> {
    let fd = rustix::fs::open(
        c"/proc/self/oom_score_adj",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let _ = OWN_OOM_SCORE_ADJ.set(fd);
    Ok(())
}

/// Runs `spawn_child` with this process's `oom_score_adj` raised to `adj`, so the child inherits
/// `adj` from its first instruction (no program can fork before it is set), then restores the
/// previous value (allowed without privilege: it is not below the kernel's per-process minimum,
/// which the previous value respects).
fn with_oom_score_adj<T>(adj: u16, spawn_child: impl FnOnce() -> T) -> Result<T, ProcessError> {
    let err = |e: Errno| ProcessError::Syscall {
        syscall: "write(/proc/self/oom_score_adj)",
        source: e.into(),
    };
    let fd = OWN_OOM_SCORE_ADJ.get().ok_or(ProcessError::Syscall {
        syscall: "open(/proc/self/oom_score_adj)",
        source: std::io::Error::from_raw_os_error(libc::EBADF),
    })?;
    let mut buf = [0u8; 16];
    let n = rustix::io::pread(fd, &mut buf, 0).map_err(err)?;
    let previous = buf[..n].to_vec();
    rustix::io::pwrite(fd, adj.to_string().as_bytes(), 0).map_err(err)?;
    let result = spawn_child();
    rustix::io::pwrite(fd, &previous, 0).map_err(err)?;
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

/// Drops every capability the kernel knows from the bounding set; stops at the first number
/// the kernel rejects as invalid (past `cap_last_cap`).
fn empty_bounding_set() -> Result<(), Errno> {
    for cap in 0..64u32 {
        let set = CapabilitySet::from_bits_retain(1u64 << cap);
        match rustix::thread::capability_is_in_bounding_set(set) {
            Ok(false) => continue,
            Ok(true) => rustix::thread::remove_capability_from_bounding_set(set)?,
            Err(Errno::INVAL) => return Ok(()),
            Err(errno) => return Err(errno),
        }
    }
    Ok(())
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

    fn run(
        argv: &[&str],
        identity: Identity,
        confinement: &Confinement,
    ) -> Result<(i32, String), ProcessError> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let spec = SpawnSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/".into(),
            stdio: [null.into(), rustix::io::dup(&write).unwrap(), write],
            controlling_tty: false,
            identity,
        };
        let pid = spawn(spec, confinement)?;
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
        let (_read, write) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let spec = SpawnSpec {
            argv: vec!["true".into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/nonexistent/airlock-cwd".into(),
            stdio: [
                rustix::io::dup(&write).unwrap(),
                rustix::io::dup(&write).unwrap(),
                write,
            ],
            controlling_tty: false,
            identity: Identity::Inherit,
        };
        match spawn(spec, &spec_cwd).unwrap_err() {
            ProcessError::Child { step, source, .. } => {
                assert_eq!(step, ChildStep::Chdir);
                assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
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
}
