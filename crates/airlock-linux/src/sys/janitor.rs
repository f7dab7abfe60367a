//! The cgroup janitor: a forked, `setsid` process that outlives airlock just long enough to
//! remove a sandbox's cgroups, so nothing is left behind even when airlock is SIGKILLed.
//!
//! Protocol: airlock keeps the write end of a pipe (close-on-exec, never written to); the
//! janitor blocks reading the other end. The kernel closes the write end when airlock exits for
//! any reason, or airlock drops it on purpose ([`Janitor::release`]). On EOF the janitor:
//! 1. SIGKILLs every process listed in each directory's `cgroup.procs` (through a pidfd opened
//!    first and used only if the pid is *still* listed, so a recycled pid is never signalled),
//!    repeating until the cgroup is empty or the grace period ends;
//! 2. `rmdir`s each directory (retrying `EBUSY` until the deadline), then the `airlock`
//!    parents, which only succeeds when no other sandbox uses them;
//! 3. `_exit`s.
//!
//! The janitor is a `fork` of a possibly multi-threaded process, so after `fork` it runs only
//! raw syscalls on buffers prepared before (no allocation, no locks). It closes every
//! descriptor but its pipe, so it holds nothing of airlock's (sockets, locks, terminals) and
//! its own session keeps terminal signals (Ctrl+C, SIGHUP) from reaching it.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Handle held by airlock; dropping it (or airlock dying) starts the cleanup.
#[derive(Debug)]
pub struct Janitor {
    pipe: Option<OwnedFd>,
    pid: libc::pid_t,
}

impl Janitor {
    /// The janitor's pid.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Closes the pipe (the janitor then cleans up whatever is left) and reaps the janitor,
    /// waiting at most `wait`. Returns whether it exited in time.
    ///
    /// Waits on a pidfd, so it returns as soon as the janitor exits (no polling interval).
    pub fn release(mut self, wait: Duration) -> bool {
        self.pipe.take();
        if let Some(pidfd) = crate::pidfd::open(self.pid) {
            crate::pidfd::wait_exit(&pidfd, wait);
        }
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; `pid` is our child.
        let rc = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        rc == self.pid
    }
}

/// Paths the janitor works on, as C strings prepared before `fork`.
struct Target {
    dir: CString,
    procs: CString,
    parent: CString,
}

fn cpath(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// Starts a janitor for `dirs`; it gives up `grace` after airlock's end.
pub fn spawn(dirs: &[PathBuf], grace: Duration) -> std::io::Result<Janitor> {
    let targets = dirs
        .iter()
        .map(|d| {
            Ok(Target {
                dir: cpath(d)?,
                procs: cpath(&d.join("cgroup.procs"))?,
                parent: cpath(d.parent().unwrap_or(d))?,
            })
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let grace_ns = grace.as_nanos().min(i64::MAX as u128) as i64;
    // SAFETY: the child only runs `janitor_main`, which issues raw syscalls on memory prepared
    // before the fork and ends in `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        janitor_main(reader.as_raw_fd(), &targets, grace_ns);
    }
    drop(reader);
    Ok(Janitor {
        pipe: Some(writer),
        pid,
    })
}

fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn sleep_ms(ms: i64) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    };
    // SAFETY: `ts` is a valid timespec; the remainder pointer may be null.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// Child side. Never returns.
fn janitor_main(pipe: libc::c_int, targets: &[Target], grace_ns: i64) -> ! {
    // SAFETY: (this block) raw syscalls on valid descriptors and stack buffers.
    unsafe {
        libc::setsid();
        // Everything but the pipe (which may itself be descriptor 0 if airlock ran without stdin).
        if pipe > 0 {
            libc::syscall(libc::SYS_close_range, 0, pipe as libc::c_uint - 1, 0);
        }
        libc::syscall(
            libc::SYS_close_range,
            pipe as libc::c_uint + 1,
            libc::c_uint::MAX,
            0,
        );
        let mut byte = 0u8;
        loop {
            let n = libc::read(pipe, (&mut byte as *mut u8).cast(), 1);
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
    }
    let deadline = monotonic_ns() + grace_ns;
    loop {
        let mut any = false;
        for t in targets {
            any |= kill_round(&t.procs) > 0;
        }
        if !any || monotonic_ns() >= deadline {
            break;
        }
        sleep_ms(10);
    }
    for t in targets {
        loop {
            // SAFETY: valid C string path.
            let rc = unsafe { libc::rmdir(t.dir.as_ptr()) };
            // SAFETY: reads this thread's errno.
            let busy = rc < 0 && unsafe { *libc::__errno_location() } == libc::EBUSY;
            if !busy || monotonic_ns() >= deadline {
                break;
            }
            sleep_ms(10);
        }
        // SAFETY: valid C string path; fails harmlessly while other sandboxes use the parent.
        unsafe { libc::rmdir(t.parent.as_ptr()) };
    }
    // SAFETY: terminates the janitor without running any of the parent's atexit handlers.
    unsafe { libc::_exit(0) }
}

/// Calls `f` for every pid in a `cgroup.procs` file, parsing in a fixed buffer.
fn for_each_pid(procs: &CString, mut f: impl FnMut(u32)) {
    // SAFETY: valid C string path.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    let mut current: Option<u32> = None;
    loop {
        // SAFETY: `buf` is a live stack buffer of the given length; `fd` is open.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        for &b in &buf[..n as usize] {
            if b.is_ascii_digit() {
                current = Some(
                    current
                        .unwrap_or(0)
                        .saturating_mul(10)
                        .saturating_add(u32::from(b - b'0')),
                );
            } else if let Some(pid) = current.take() {
                f(pid);
            }
        }
    }
    if let Some(pid) = current {
        f(pid);
    }
    // SAFETY: `fd` is open and closed once.
    unsafe { libc::close(fd) };
}

/// Processes handled per round of [`kill_round`]: bounds the pidfds open at once (well below
/// the usual 1024-descriptor soft limit) and the stack used.
const KILL_BATCH: usize = 256;

/// One round of SIGKILLs for the members listed in `procs`; returns how many were listed.
///
/// Reads the list, opens a pidfd for (up to [`KILL_BATCH`] of) them, reads the list again and
/// signals through the pidfds of those still listed. A pid that exited and was reused between the
/// two reads is not listed any more (or its pidfd refers to the exited process), so nothing
/// outside the cgroup is ever signalled. Two reads per round keep a cgroup of thousands of
/// processes (a fork bomb at `pids.max`) linear to clean up. Allocation-free (janitor-safe).
fn kill_round(procs: &CString) -> usize {
    let mut batch = [(0i32, -1i32); KILL_BATCH];
    let (mut n, mut listed) = (0usize, 0usize);
    for_each_pid(procs, |pid| {
        listed += 1;
        if n < KILL_BATCH {
            // SAFETY: pidfd_open takes a pid and flags.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
            if fd >= 0 {
                batch[n] = (pid as i32, fd as i32);
                n += 1;
            }
        }
    });
    let opened = &mut batch[..n];
    opened.sort_unstable();
    for_each_pid(procs, |pid| {
        if let Ok(i) = opened.binary_search_by_key(&(pid as i32), |&(p, _)| p) {
            if opened[i].1 >= 0 {
                // SAFETY: the descriptor is a pidfd we own; a null siginfo is allowed.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        opened[i].1,
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
            }
        }
    });
    for &(_, fd) in opened.iter() {
        // SAFETY: each pidfd was opened above and is closed exactly once.
        unsafe { libc::close(fd) };
    }
    listed
}

/// One round of pidfd-checked SIGKILLs for the members of the cgroup `dir` (see
/// [`kill_round`]); returns how many processes were listed. For `Cgroup::destroy`.
pub fn kill_members(dir: &Path) -> usize {
    match cpath(&dir.join("cgroup.procs")) {
        Ok(procs) => kill_round(&procs),
        Err(_) => 0,
    }
}
