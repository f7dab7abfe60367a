//! Runs a fixed list of syscalls under a seccomp filter in a throw-away child and reports what
//! the kernel answered to each. This is how tests (and anyone auditing the filter) verify the
//! compiled BPF program against the real kernel rather than against the rule table.
//!
//! The child installs the filter exactly as sandbox processes get it (`no_new_privs`, then
//! `seccomp(SECCOMP_SET_MODE_FILTER)`), then issues each attempt with arguments chosen so that,
//! *without* the filter, the kernel would answer differently from the filter's `EPERM`/`ENOSYS`
//! (success or `EINVAL`/`ENOTTY`/`EFAULT`). The same invariants as `sys::probe` apply: only raw
//! syscalls after `fork`.
#![allow(unsafe_code)]

use seccompiler::BpfProgramRef;

use super::probe::{errno, run_in_child, ProbeError, REPORT_LEN, UNSET};

/// One syscall attempted under the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyscallAttempt {
    /// What was attempted, e.g. `ioctl(TIOCSTI)`.
    pub name: &'static str,
    /// `Ok(return value)` or `Err(errno)`.
    pub result: Result<i64, i32>,
}

/// The attempts, in report order. Arguments are deliberately harmless or invalid: the point is
/// the errno the filter produces before the kernel looks at them.
pub const ATTEMPTS: &[&str] = &[
    "getpid",
    "keyctl(KEYCTL_GET_KEYRING_ID)",
    "add_key",
    "bpf(invalid command)",
    "perf_event_open(NULL)",
    "unshare(CLONE_NEWUSER)",
    "clone3",
    "ioctl(TIOCSTI)",
    "ioctl(TIOCSTI with high bits set)",
    "ioctl(TIOCLINUX)",
    "ioctl(TIOCSETD)",
    "mount",
    "umount2",
    "userfaultfd",
    "open_by_handle_at",
    "io_uring_setup",
    "personality(ADDR_NO_RANDOMIZE)",
    "personality(query)",
    "x32 getpid",
    "fchmodat(04755)",
    "fchmod(02755)",
    "openat(O_CREAT, 04755)",
    "openat(O_RDONLY, stray mode 04755)",
    "open(O_RDONLY, stray mode 06755)",
    "openat2",
    "socket(AF_VSOCK)",
    "socketpair(AF_ALG)",
    "socket(AF_INET)",
];

/// Installs `program` in a child and runs every entry of [`ATTEMPTS`].
///
/// Returns `Err(ProbeError::ChildSignaled)` when the filter killed the child.
pub fn syscalls_under_filter(
    program: BpfProgramRef<'_>,
) -> Result<Vec<SyscallAttempt>, ProbeError> {
    syscalls_in_child(Some(program))
}

/// The same attempts without any filter, to show what the kernel answers on its own.
pub fn syscalls_unfiltered() -> Result<Vec<SyscallAttempt>, ProbeError> {
    syscalls_in_child(None)
}

fn syscalls_in_child(
    program: Option<BpfProgramRef<'_>>,
) -> Result<Vec<SyscallAttempt>, ProbeError> {
    const { assert!(ATTEMPTS.len() * 2 < REPORT_LEN) };
    let report = run_in_child(|report| {
        if let Some(program) = program {
            if seccompiler::apply_filter(program).is_err() {
                report[0] = 1;
                return;
            }
        }
        report[0] = 0;
        for (i, rc) in attempt_all().into_iter().enumerate() {
            let (value, err) = match rc {
                Ok(v) => (v as i32, 0),
                Err(e) => (UNSET, e),
            };
            report[1 + 2 * i] = value;
            report[2 + 2 * i] = err;
        }
    })?;
    if report[0] != 0 {
        return Err(ProbeError::Setup {
            call: "seccomp(SECCOMP_SET_MODE_FILTER)",
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    Ok(ATTEMPTS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let err = report[2 + 2 * i];
            let result = if err == 0 {
                Ok(i64::from(report[1 + 2 * i]))
            } else {
                Err(err)
            };
            SyscallAttempt { name, result }
        })
        .collect())
}

fn res(rc: libc::c_long) -> Result<i64, i32> {
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc)
    }
}

/// A call that may return a descriptor: closes it and reports success as `Ok(0)`.
///
/// # Safety
/// `rc` is the return value of a call that returns a new descriptor on success.
unsafe fn close_ok(rc: libc::c_long) -> Result<i64, i32> {
    let r = res(rc);
    if let Ok(fd) = r {
        // SAFETY: the descriptor was just returned to this process and nothing else uses it.
        unsafe { libc::close(fd as libc::c_int) };
        return Ok(0);
    }
    r
}

/// `open(path, O_RDONLY | O_CLOEXEC)` with `mode` in the mode register; `openat` where there is
/// no `open` (aarch64).
///
/// # Safety
/// `path` points to a NUL-terminated string.
unsafe fn open_rdonly_with_stray_mode(
    path: *const libc::c_char,
    mode: libc::c_long,
) -> Result<i64, i32> {
    let flags = libc::O_RDONLY | libc::O_CLOEXEC;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a raw open of a valid path; the descriptor is closed by `close_ok`.
    let rc = unsafe { libc::syscall(libc::SYS_open, path, flags, mode) };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    let rc = unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) };
    // SAFETY: `rc` is the result of an open.
    unsafe { close_ok(rc) }
}

/// Child-side: every attempt in [`ATTEMPTS`] order. Allocation-free (fixed-size array).
fn attempt_all() -> [Result<i64, i32>; ATTEMPTS.len()] {
    const TIOCSTI_HIGH: u64 = libc::TIOCSTI | (1 << 32);
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
    const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
    // A path whose parent does not exist: without the filter these calls fail with ENOENT.
    const MISSING: &[u8] = b"/nonexistent-airlock-dir/file\0";
    let missing = MISSING.as_ptr().cast::<libc::c_char>();
    // A directory every process can open read-only: the opens that only read succeed.
    let root = c"/".as_ptr();
    let mut pair = [0 as libc::c_int; 2];
    let byte: u8 = b'x';
    let bp = &byte as *const u8;
    let null = std::ptr::null::<libc::c_void>();
    // SAFETY: (for every call below) raw syscalls with integer arguments, null pointers or a
    // pointer to the live local `byte`; none of them can corrupt this process's memory.
    unsafe {
        [
            res(libc::syscall(libc::SYS_getpid)),
            res(libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_GET_KEYRING_ID,
                KEY_SPEC_SESSION_KEYRING,
                0,
            )),
            res(libc::syscall(libc::SYS_add_key, null, null, null, 0, 0)),
            res(libc::syscall(libc::SYS_bpf, -1 as libc::c_long, null, 0)),
            res(libc::syscall(libc::SYS_perf_event_open, null, 0, -1, -1, 0)),
            res(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER)),
            res(libc::syscall(libc::SYS_clone3, null, 0)),
            res(libc::syscall(libc::SYS_ioctl, -1, libc::TIOCSTI, bp)),
            res(libc::syscall(libc::SYS_ioctl, -1, TIOCSTI_HIGH, bp)),
            res(libc::syscall(libc::SYS_ioctl, -1, libc::TIOCLINUX, bp)),
            res(libc::syscall(libc::SYS_ioctl, -1, libc::TIOCSETD, bp)),
            res(libc::syscall(libc::SYS_mount, null, null, null, 0, null)),
            res(libc::syscall(libc::SYS_umount2, null, 0)),
            res(libc::syscall(libc::SYS_userfaultfd, 0)),
            res(libc::syscall(libc::SYS_open_by_handle_at, -1, null, 0)),
            res(libc::syscall(libc::SYS_io_uring_setup, 0, null)),
            res(libc::syscall(libc::SYS_personality, ADDR_NO_RANDOMIZE)),
            res(libc::syscall(
                libc::SYS_personality,
                0xffff_ffff as libc::c_ulong,
            )),
            res(libc::syscall(libc::SYS_getpid | X32_SYSCALL_BIT)),
            res(libc::syscall(
                libc::SYS_fchmodat,
                libc::AT_FDCWD,
                missing,
                0o4755,
                0,
            )),
            res(libc::syscall(libc::SYS_fchmod, -1, 0o2755)),
            res(libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                missing,
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o4755,
            )),
            // The mode register of an open that creates nothing is ignored by the kernel and
            // may hold anything (jemalloc leaves it unset): the filter must not judge it.
            close_ok(libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                root,
                libc::O_RDONLY | libc::O_CLOEXEC,
                0o4755,
            )),
            open_rdonly_with_stray_mode(root, 0o6755),
            res(libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                missing,
                null,
                0,
            )),
            close_ok(libc::syscall(
                libc::SYS_socket,
                libc::AF_VSOCK,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
            )),
            res(libc::syscall(
                libc::SYS_socketpair,
                libc::AF_ALG,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )),
            close_ok(libc::syscall(
                libc::SYS_socket,
                libc::AF_INET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                0,
            )),
        ]
    }
}
