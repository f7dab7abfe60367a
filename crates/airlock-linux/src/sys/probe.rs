//! Host probes that must run in a throw-away child process.
//!
//! `doctor` asks the kernel, as the invoking user, whether it will let airlock build a sandbox:
//! create a user namespace, mount tmpfs and overlayfs inside one, and install a seccomp filter.
//! Each of those changes the calling process irreversibly (namespaces, filters, `no_new_privs`),
//! so every probe runs in a `fork`ed child that reports back through a pipe and then `_exit`s.
//!
//! Invariants:
//! - The child runs only async-signal-safe code: the caller may be multi-threaded (the test
//!   harness, the CLI), so after `fork` the child must not allocate or take locks. Every path,
//!   map line and mount option is built as a `CString` *before* `fork`; the child only issues raw
//!   syscalls through `libc` and writes a fixed-size `[i32; REPORT_LEN]` report.
//! - The child never returns into the caller's code: it always ends in `_exit`.
//! - Nothing a probe does is visible outside the child: namespaces die with it, and the tmpfs it
//!   mounts lives in its private mount namespace.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use seccompiler::BpfProgramRef;

/// Number of `i32` slots in a child's report.
pub(super) const REPORT_LEN: usize = 64;
/// Slot 0 of the report: `STATUS_OK` or the index (1-based) of the step that failed.
const STATUS_OK: i32 = 0;
/// Marks a report slot the child never filled.
pub(super) const UNSET: i32 = i32::MIN;

/// What went wrong while running a probe itself (not what the probe found out).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{call} failed while preparing a probe: {source}")]
    Setup {
        call: &'static str,
        source: std::io::Error,
    },
    #[error("probe argument {what} contains a NUL byte")]
    NulInArgument { what: &'static str },
    #[error("probe child was killed by signal {signal}")]
    ChildSignaled { signal: i32 },
    #[error("probe child exited with status {status} without a complete report")]
    ChildSilent { status: i32 },
}

/// A step inside the probe child that the kernel refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepFailure {
    /// The syscall and its interesting argument, e.g. `unshare(CLONE_NEWUSER)`.
    pub step: &'static str,
    /// The `errno` the kernel returned.
    pub errno: i32,
}

impl std::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let err = std::io::Error::from_raw_os_error(self.errno);
        write!(f, "{} failed: {err}", self.step)
    }
}

/// Outcome of a probe: `Ok(())` when every step succeeded, else the first refused step.
pub type ProbeOutcome = Result<(), StepFailure>;

/// Forks, runs `body` in the child with a zeroed report, sends the report back, reaps the child.
///
/// `body` must be async-signal-safe (see the module invariants); every caller is in this file.
pub(super) fn run_in_child<F: FnOnce(&mut [i32; REPORT_LEN])>(
    body: F,
) -> Result<[i32; REPORT_LEN], ProbeError> {
    let (reader, writer) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| {
            ProbeError::Setup {
                call: "pipe2",
                source: e.into(),
            }
        })?;
    // SAFETY: the child only runs `body` (async-signal-safe by contract), `write` and `_exit`;
    // it never returns into Rust code that could observe the copied address space.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(ProbeError::Setup {
            call: "fork",
            source: std::io::Error::last_os_error(),
        });
    }
    if pid == 0 {
        // SAFETY: alarm only arms a timer; SIGALRM's default action ends a probe that hangs,
        // which the parent reports as `ChildSignaled` instead of waiting forever.
        unsafe { libc::alarm(10) };
        let mut report = [UNSET; REPORT_LEN];
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut report)));
        let code = if outcome.is_ok() { 0 } else { 127 };
        // SAFETY: `report` is a live stack array of exactly the length passed; `writer` is open.
        unsafe {
            libc::write(
                writer.as_raw_fd(),
                report.as_ptr().cast(),
                std::mem::size_of_val(&report),
            );
            libc::_exit(code)
        }
    }
    drop(writer);
    let report = read_report(reader);
    let status = wait_for(pid)?;
    match report {
        Some(report) => Ok(report),
        None => Err(ProbeError::ChildSilent { status }),
    }
}

fn read_report(reader: OwnedFd) -> Option<[i32; REPORT_LEN]> {
    let mut bytes = Vec::with_capacity(REPORT_LEN * 4);
    std::fs::File::from(reader).read_to_end(&mut bytes).ok()?;
    if bytes.len() != REPORT_LEN * 4 {
        return None;
    }
    let mut report = [UNSET; REPORT_LEN];
    for (slot, chunk) in report.iter_mut().zip(bytes.chunks_exact(4)) {
        *slot = i32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    Some(report)
}

/// Reaps `pid`; returns its exit status or the signal that killed it as an error.
fn wait_for(pid: libc::pid_t) -> Result<i32, ProbeError> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; `pid` is our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(ProbeError::Setup {
                call: "waitpid",
                source: err,
            });
        }
    }
    if libc::WIFSIGNALED(status) {
        return Err(ProbeError::ChildSignaled {
            signal: libc::WTERMSIG(status),
        });
    }
    Ok(libc::WEXITSTATUS(status))
}

fn cstring(what: &'static str, bytes: impl Into<Vec<u8>>) -> Result<CString, ProbeError> {
    CString::new(bytes).map_err(|_| ProbeError::NulInArgument { what })
}

/// Returns the `errno` of the last failed call (async-signal-safe: reads the thread's errno).
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Id-map files written in a fresh user namespace: `0 <outer> 1` for the caller's own ids.
struct IdMaps {
    setgroups: CString,
    uid_map: CString,
    gid_map: CString,
    uid_line: CString,
    gid_line: CString,
}

impl IdMaps {
    fn for_self() -> Result<Self, ProbeError> {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        Ok(Self {
            setgroups: cstring("path", "/proc/self/setgroups")?,
            uid_map: cstring("path", "/proc/self/uid_map")?,
            gid_map: cstring("path", "/proc/self/gid_map")?,
            uid_line: cstring("uid map", format!("0 {uid} 1\n"))?,
            gid_line: cstring("gid map", format!("0 {gid} 1\n"))?,
        })
    }

    /// Child-side: writes `deny` to setgroups, then the uid and gid maps. Returns the failed step.
    fn write(&self) -> ProbeOutcome {
        write_file(&self.setgroups, b"deny", "write /proc/self/setgroups")?;
        write_file(
            &self.uid_map,
            self.uid_line.as_bytes(),
            "write /proc/self/uid_map",
        )?;
        write_file(
            &self.gid_map,
            self.gid_line.as_bytes(),
            "write /proc/self/gid_map",
        )
    }
}

/// Child-side, async-signal-safe: open, write all of `data`, close.
fn write_file(path: &CString, data: &[u8], step: &'static str) -> ProbeOutcome {
    // SAFETY: `path` is a valid NUL-terminated string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(StepFailure {
            step,
            errno: errno(),
        });
    }
    // SAFETY: `data` is a live slice of the given length; `fd` is open.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let result = if n == data.len() as isize {
        Ok(())
    } else {
        Err(StepFailure {
            step,
            errno: errno(),
        })
    };
    // SAFETY: `fd` was opened above and is closed exactly once.
    unsafe { libc::close(fd) };
    result
}

/// Child-side: `rc < 0` becomes a `StepFailure` for `step`.
fn check(rc: libc::c_long, step: &'static str) -> ProbeOutcome {
    if rc < 0 {
        Err(StepFailure {
            step,
            errno: errno(),
        })
    } else {
        Ok(())
    }
}

/// Steps of the probes, indexed by the report's slot 0 (1-based).
const STEPS: &[&str] = &[
    "unshare(CLONE_NEWUSER)",
    "write /proc/self/setgroups",
    "write /proc/self/uid_map",
    "write /proc/self/gid_map",
    "unshare(CLONE_NEWUSER|CLONE_NEWNS)",
    "mount(/, MS_REC|MS_PRIVATE)",
    "mount(tmpfs)",
    "mkdir(overlay layer)",
    "mount(overlay)",
    "create a file through overlay",
    "open a system file for writing through overlay",
    "install seccomp filter",
];

fn step_index(step: &'static str) -> i32 {
    STEPS
        .iter()
        .position(|s| *s == step)
        .map_or(-1, |i| i as i32 + 1)
}

fn encode(outcome: ProbeOutcome, report: &mut [i32; REPORT_LEN]) {
    match outcome {
        Ok(()) => report[0] = STATUS_OK,
        Err(failure) => {
            report[0] = step_index(failure.step);
            report[1] = failure.errno;
        }
    }
}

fn decode(report: &[i32; REPORT_LEN]) -> ProbeOutcome {
    if report[0] == STATUS_OK {
        return Ok(());
    }
    let step = usize::try_from(report[0] - 1)
        .ok()
        .and_then(|i| STEPS.get(i))
        .copied();
    Err(StepFailure {
        step: step.unwrap_or("unknown step"),
        errno: report[1],
    })
}

/// Can the invoking user create a user namespace and map its own ids into it?
pub fn user_namespace() -> Result<ProbeOutcome, ProbeError> {
    let maps = IdMaps::for_self()?;
    let report = run_in_child(|report| {
        let outcome = (|| {
            // SAFETY: plain syscall with a flag argument.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
            check(rc.into(), "unshare(CLONE_NEWUSER)")?;
            maps.write()
        })();
        encode(outcome, report);
    })?;
    Ok(decode(&report))
}

/// Paths and options for the overlay probe, prepared before `fork`.
struct OverlayPlan {
    root: CString,
    layers: [CString; 4],
    merged_file: CString,
    options: CString,
    system_options: CString,
    system_file: CString,
    tmpfs: CString,
    overlay: CString,
    slash: CString,
}

impl OverlayPlan {
    fn new(scratch: &Path) -> Result<Self, ProbeError> {
        let s = scratch.to_string_lossy();
        let p = |what, suffix: &str| cstring(what, format!("{s}{suffix}"));
        Ok(Self {
            root: p("scratch dir", "")?,
            layers: [
                p("lower", "/l")?,
                p("upper", "/u")?,
                p("work", "/w")?,
                p("merged", "/m")?,
            ],
            merged_file: p("merged file", "/m/probe")?,
            options: cstring(
                "options",
                format!("lowerdir={s}/l,upperdir={s}/u,workdir={s}/w"),
            )?,
            system_options: cstring(
                "options",
                format!("lowerdir=/etc,upperdir={s}/su,workdir={s}/sw"),
            )?,
            system_file: p("system file", "/sm/passwd")?,
            tmpfs: cstring("fstype", "tmpfs")?,
            overlay: cstring("fstype", "overlay")?,
            slash: cstring("path", "/")?,
        })
    }
}

/// Result of the overlay probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverlayProbe {
    /// Mount namespace, tmpfs and a writable overlay inside a user namespace.
    pub overlay: ProbeOutcome,
    /// Whether in-sandbox root may open a host system file (`/etc/passwd`, via an overlay whose
    /// lower layer is the host's `/etc`) for writing; copy-up lands in a tmpfs, never on the host.
    /// `None` when the overlay step itself failed.
    pub system_files_writable: Option<ProbeOutcome>,
}

/// Mounts tmpfs and overlayfs in a new user + mount namespace; `scratch` must be an empty
/// directory the caller owns (it only serves as a mount point inside the child's namespace).
pub fn overlay_in_user_namespace(scratch: &Path) -> Result<OverlayProbe, ProbeError> {
    let maps = IdMaps::for_self()?;
    let plan = OverlayPlan::new(scratch)?;
    let system_layers = [
        cstring("upper", format!("{}/su", scratch.display()))?,
        cstring("work", format!("{}/sw", scratch.display()))?,
        cstring("merged", format!("{}/sm", scratch.display()))?,
    ];
    let report = run_in_child(|report| {
        let outcome = overlay_steps(&maps, &plan);
        encode(outcome, report);
        if outcome.is_ok() {
            let system = system_file_steps(&plan, &system_layers);
            match system {
                Ok(()) => report[2] = STATUS_OK,
                Err(failure) => {
                    report[2] = step_index(failure.step);
                    report[3] = failure.errno;
                }
            }
        }
    })?;
    let overlay = decode(&report);
    let system_files_writable = overlay.is_ok().then(|| {
        let sub = [report[2], report[3]];
        let mut r = [UNSET; REPORT_LEN];
        r[0] = sub[0];
        r[1] = sub[1];
        decode(&r)
    });
    Ok(OverlayProbe {
        overlay,
        system_files_writable,
    })
}

fn overlay_steps(maps: &IdMaps, plan: &OverlayPlan) -> ProbeOutcome {
    // SAFETY: plain syscall with flag arguments.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) };
    check(rc.into(), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")?;
    maps.write()?;
    let null = std::ptr::null();
    // SAFETY: valid C strings or null pointers, as mount(2) accepts for a propagation change.
    let rc = unsafe {
        libc::mount(
            null,
            plan.slash.as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            null.cast(),
        )
    };
    check(rc.into(), "mount(/, MS_REC|MS_PRIVATE)")?;
    // SAFETY: valid C strings; data is null.
    let rc = unsafe {
        libc::mount(
            plan.tmpfs.as_ptr(),
            plan.root.as_ptr(),
            plan.tmpfs.as_ptr(),
            0,
            null.cast(),
        )
    };
    check(rc.into(), "mount(tmpfs)")?;
    for layer in &plan.layers {
        // SAFETY: valid C string path.
        let rc = unsafe { libc::mkdir(layer.as_ptr(), 0o755) };
        check(rc.into(), "mkdir(overlay layer)")?;
    }
    // SAFETY: valid C strings; `options` is a NUL-terminated option string.
    let rc = unsafe {
        libc::mount(
            plan.overlay.as_ptr(),
            plan.layers[3].as_ptr(),
            plan.overlay.as_ptr(),
            0,
            plan.options.as_ptr().cast(),
        )
    };
    check(rc.into(), "mount(overlay)")?;
    // SAFETY: valid C string path; the returned fd is closed below.
    let fd = unsafe {
        libc::open(
            plan.merged_file.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        )
    };
    check(fd.into(), "create a file through overlay")?;
    // SAFETY: `fd` is open and closed exactly once.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Child-side: overlay with the host's `/etc` as lower layer, then open `passwd` for writing.
fn system_file_steps(plan: &OverlayPlan, layers: &[CString; 3]) -> ProbeOutcome {
    for layer in layers {
        // SAFETY: valid C string path.
        let rc = unsafe { libc::mkdir(layer.as_ptr(), 0o755) };
        check(rc.into(), "mkdir(overlay layer)")?;
    }
    // SAFETY: valid C strings; option string NUL-terminated.
    let rc = unsafe {
        libc::mount(
            plan.overlay.as_ptr(),
            layers[2].as_ptr(),
            plan.overlay.as_ptr(),
            0,
            plan.system_options.as_ptr().cast(),
        )
    };
    check(rc.into(), "mount(overlay)")?;
    // SAFETY: valid C string; O_WRONLY without O_TRUNC or O_CREAT changes no content, and the
    // copy-up it triggers lands in the child's private tmpfs.
    let fd = unsafe { libc::open(plan.system_file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    check(fd.into(), "open a system file for writing through overlay")?;
    // SAFETY: `fd` is open and closed exactly once.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Installs `program` (with `no_new_privs`) in a child and checks it survives `getpid`.
pub fn seccomp_filter(program: BpfProgramRef<'_>) -> Result<ProbeOutcome, ProbeError> {
    let report = run_in_child(|report| {
        let outcome = match seccompiler::apply_filter(program) {
            Ok(()) => Ok(()),
            Err(err) => Err(StepFailure {
                step: "install seccomp filter",
                errno: seccomp_errno(&err),
            }),
        };
        // SAFETY: getpid has no preconditions; a filter that killed us shows up as a signal.
        unsafe { libc::getpid() };
        encode(outcome, report);
    })?;
    Ok(decode(&report))
}

fn seccomp_errno(err: &seccompiler::Error) -> i32 {
    match err {
        seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => {
            e.raw_os_error().unwrap_or(0)
        }
        seccompiler::Error::EmptyFilter
        | seccompiler::Error::Backend(_)
        | seccompiler::Error::ThreadSync(_) => libc::EINVAL,
    }
}
