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
use std::time::{Duration, Instant};

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
        let pid = rustix::process::Pid::from_raw(self.pid);
        let pidfd = pid.and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        if let Some(pidfd) = &pidfd {
            let deadline = Instant::now() + wait;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let timeout = rustix::event::Timespec {
                    tv_sec: left.as_secs() as i64,
                    tv_nsec: i64::from(left.subsec_nanos()),
                };
                let mut fds = [rustix::event::PollFd::new(
                    pidfd,
                    rustix::event::PollFlags::IN,
                )];
                match rustix::event::poll(&mut fds, Some(&timeout)) {
                    Err(rustix::io::Errno::INTR) => continue,
                    Ok(_) | Err(_) => break,
                }
            }
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
            for_each_pid(&t.procs, |pid| {
                any = true;
                kill_checked(pid, &t.procs);
            });
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

/// SIGKILLs `pid` through a pidfd, only if it is still listed in `procs` after the pidfd was
/// opened (so the pidfd cannot refer to an unrelated process that reused the pid).
fn kill_checked(pid: u32, procs: &CString) {
    // SAFETY: pidfd_open takes a pid and flags.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return;
    }
    let mut listed = false;
    for_each_pid(procs, |p| listed |= p == pid);
    if listed {
        // SAFETY: `pidfd` is a pidfd we own; null siginfo is allowed.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd as libc::c_int,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
    }
    // SAFETY: `pidfd` is open and closed once.
    unsafe { libc::close(pidfd as libc::c_int) };
}

/// SIGKILLs `pid` if it is still a member of the cgroup `dir` (pidfd-checked as above).
/// For use outside the janitor (`Cgroup::destroy`).
pub fn kill_if_member(pid: u32, dir: &Path) {
    if let Ok(procs) = cpath(&dir.join("cgroup.procs")) {
        kill_checked(pid, &procs);
    }
}
