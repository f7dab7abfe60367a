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
//! The janitor is a `clone(CLONE_VM)` of a possibly multi-threaded process, on a stack of its
//! own: it shares airlock's memory instead of copying it (a `fork` copied every page table of
//! the 10 MB CLI, and cost each page airlock wrote afterwards a copy-on-write fault; the
//! janitor's exit then tore that copy down: measured, the largest part of a millisecond of CPU
//! per `run`). So it runs only raw syscalls (`rustix`, which never touches `errno`: the
//! janitor runs on airlock's thread-local storage) on data prepared before the clone and never
//! freed (leaked: it outlives airlock's own use of its memory), no allocation, no locks. The
//! memory stays mapped while the janitor runs, even after airlock has exited or was killed:
//! the address space lives as long as a process uses it. It closes every descriptor but its
//! pipe (its descriptor table is its own), so it holds nothing of airlock's (sockets, locks,
//! terminals), and its own session keeps terminal signals (Ctrl+C, SIGHUP) from reaching it.
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

impl Janitor {
    /// For a caller that removed the cgroup itself: the janitor has nothing left to do, so it
    /// is SIGKILLed instead of being woken to find every directory gone (its opens and
    /// `rmdir`s of the cgroup tree), then reaped like [`Janitor::release`] reaps it.
    pub fn dismiss(self, wait: Duration) -> bool {
        // SAFETY: kill(2) of our own child, not reaped yet (`release` below reaps it): its pid
        // cannot have been reused.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        self.release(wait)
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
    let stack = Stack::new()?;
    // Never freed: the janitor reads them after this process has let go of everything else
    // (or is gone). A few hundred bytes and one stack mapping per sandbox of a `run`.
    let context: &'static JanitorContext = Box::leak(Box::new(JanitorContext {
        pipe: reader.as_raw_fd(),
        targets: Box::leak(targets.into_boxed_slice()),
        grace_ns,
    }));
    // SAFETY: `janitor_entry` only reads `context` (leaked, so valid for the rest of the
    // address space's life) and runs on `stack` (leaked likewise), issuing raw syscalls that
    // neither allocate nor touch thread-local state, and ends in `_exit`. No CLONE_FILES,
    // CLONE_SIGHAND or CLONE_THREAD: its descriptors, dispositions and process are its own.
    let pid = unsafe {
        libc::clone(
            janitor_entry,
            stack.top(),
            libc::CLONE_VM | libc::SIGCHLD,
            context as *const JanitorContext as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    drop(reader);
    Ok(Janitor {
        pipe: Some(writer),
        pid,
    })
}

/// What the janitor reads: prepared before the clone, never freed.
struct JanitorContext {
    pipe: libc::c_int,
    targets: &'static [Target],
    grace_ns: i64,
}

/// The janitor's stack: an anonymous mapping with a guard page below it, never unmapped (the
/// janitor may run after airlock is gone).
struct Stack {
    base: *mut u8,
}

/// Plenty for the janitor's frames (two 4 KiB buffers at most); pages it never touches cost
/// nothing.
const STACK_SIZE: usize = 256 * 1024;
const GUARD_SIZE: usize = 4096;

impl Stack {
    fn new() -> std::io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK_SIZE + GUARD_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the lowest page of the mapping made above becomes the guard.
        if unsafe { libc::mprotect(base, GUARD_SIZE, libc::PROT_NONE) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self { base: base.cast() })
    }

    /// The initial stack pointer (the stack grows down from the end of the mapping).
    fn top(&self) -> *mut libc::c_void {
        self.base.wrapping_add(STACK_SIZE + GUARD_SIZE).cast()
    }
}

extern "C" fn janitor_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leaked `JanitorContext` passed by `spawn`.
    let context = unsafe { &*(arg as *const JanitorContext) };
    janitor_main(context.pipe, context.targets, context.grace_ns)
}

/// Monotonic time in nanoseconds (the vDSO's `clock_gettime`, which writes no `errno` when it
/// succeeds, and it cannot fail for this clock).
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
    let ts = rustix::thread::Timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    };
    let _ = rustix::thread::nanosleep(&ts);
}

/// Child side. Never returns. Raw syscalls only (see the module docs).
fn janitor_main(pipe: libc::c_int, targets: &[Target], grace_ns: i64) -> ! {
    let _ = rustix::process::setsid();
    // Everything but the pipe (which may itself be descriptor 0 if airlock ran without stdin).
    // SAFETY: close_range on this process's own descriptor table (not shared: no CLONE_FILES);
    // nothing in the janitor uses the descriptors it closes. It cannot fail for these
    // arguments, so the C library writes no `errno`.
    unsafe {
        if pipe > 0 {
            libc::syscall(libc::SYS_close_range, 0, pipe as libc::c_uint - 1, 0);
        }
        libc::syscall(
            libc::SYS_close_range,
            pipe as libc::c_uint + 1,
            libc::c_uint::MAX,
            0,
        );
    }
    // SAFETY: `pipe` is the read end this janitor owns (kept open by the close_range above).
    let pipe = unsafe { std::os::fd::BorrowedFd::borrow_raw(pipe) };
    let mut byte = [0u8; 1];
    // Until EOF (or any other error): retried only when a signal interrupted the read.
    while let Err(rustix::io::Errno::INTR) = rustix::io::read(pipe, &mut byte) {}
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
    let rmdir = |dir: &CString| {
        rustix::fs::unlinkat(
            rustix::fs::CWD,
            dir.as_c_str(),
            rustix::fs::AtFlags::REMOVEDIR,
        )
    };
    for t in targets {
        while let Err(rustix::io::Errno::BUSY) = rmdir(&t.dir) {
            if monotonic_ns() >= deadline {
                break;
            }
            sleep_ms(10);
        }
        // Fails harmlessly while other sandboxes use the parent.
        let _ = rmdir(&t.parent);
    }
    // SAFETY: ends the janitor (exit_group, which cannot fail) without running any of the
    // parent's atexit handlers on the shared memory.
    unsafe { libc::_exit(0) }
}

/// Calls `f` for every pid in a `cgroup.procs` file, parsing in a fixed buffer.
fn for_each_pid(procs: &CString, mut f: impl FnMut(u32)) {
    use rustix::fs::{Mode, OFlags};
    let Ok(fd) = rustix::fs::open(
        procs.as_c_str(),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let mut buf = [0u8; 4096];
    let mut current: Option<u32> = None;
    loop {
        let n = match rustix::io::read(&fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
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
    let mut batch: [(i32, Option<OwnedFd>); KILL_BATCH] = [const { (0, None) }; KILL_BATCH];
    let (mut n, mut listed) = (0usize, 0usize);
    for_each_pid(procs, |pid| {
        listed += 1;
        if n < KILL_BATCH {
            let opened = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
            });
            if let Some(fd) = opened {
                batch[n] = (pid as i32, Some(fd));
                n += 1;
            }
        }
    });
    if n == 0 {
        // Nothing to signal (an empty cgroup, the usual case at the end of a run): no second
        // read of `cgroup.procs`.
        return listed;
    }
    let opened = &mut batch[..n];
    opened.sort_unstable_by_key(|&(p, _)| p);
    for_each_pid(procs, |pid| {
        if let Ok(i) = opened.binary_search_by_key(&(pid as i32), |&(p, _)| p) {
            if let Some(fd) = &opened[i].1 {
                let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
            }
        }
    });
    // The pidfds close as `batch` goes out of scope.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `kcmp(KCMP_VM)`: 0 when both processes use one address space.
    fn share_address_space(a: libc::pid_t, b: libc::pid_t) -> std::io::Result<bool> {
        const KCMP_VM: libc::c_long = 1;
        // SAFETY: kcmp only compares kernel objects of the two processes.
        let rc = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_VM, 0, 0) };
        match rc {
            0 => Ok(true),
            rc if rc > 0 => Ok(false),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    #[test]
    fn the_janitor_shares_airlocks_address_space_instead_of_copying_it() {
        // Directories that are no cgroups: the janitor finds nothing to kill or remove.
        let tmp = tempfile::tempdir().unwrap();
        let janitor = spawn(&[tmp.path().join("none")], Duration::from_millis(100)).unwrap();
        let shared = share_address_space(std::process::id() as libc::pid_t, janitor.pid);
        assert!(
            janitor.release(Duration::from_secs(5)),
            "the janitor did not exit"
        );
        match shared {
            Ok(shared) => assert!(shared, "the janitor has a copy of airlock's memory (fork)"),
            Err(e) => match e.raw_os_error() {
                // A kernel without kcmp (CONFIG_KCMP off): nothing to compare with.
                Some(libc::ENOSYS) => eprintln!("skipped: kcmp is not available ({e})"),
                _ => panic!("kcmp failed: {e}"),
            },
        }
    }
}
