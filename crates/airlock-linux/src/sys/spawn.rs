//! Starting a helper process without copying airlock's address space: `clone(CLONE_VM |
//! CLONE_VFORK)` on a stack of its own, then `execve` (what `posix_spawn` does).
//!
//! `std::process::Command` forks as soon as a `pre_exec` hook is set (the cgroup join and the
//! placed descriptors need one): the kernel copies every page table of airlock (a 10 MB binary,
//! its heap, its threads' stacks), the child tears that copy down again at its `execve`, and
//! airlock takes a copy-on-write fault on each page it writes afterwards. Measured with
//! `perf record` over `airlock run -- true`, that was about a millisecond of CPU per run, part of
//! it on the critical path (the init stage cannot start before its exec has dropped the copy).
//!
//! The child shares airlock's memory until its `execve`, and airlock's calling thread is
//! suspended until then (`CLONE_VFORK`). So the child runs only async-signal-safe calls on data
//! prepared before the clone and writes nothing of the parent's but its scratch slots and the
//! one error slot. It starts with every signal blocked, so no handler of airlock's can run on the
//! shared memory; its signal dispositions are its own (no `CLONE_SIGHAND`): it resets every
//! caught signal and SIGPIPE (ignored by Rust programs) to the default, then empties its mask,
//! so the new program starts as `std::process::Command` would start it.

use std::ffi::{CStr, CString};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

/// What to start. Every descriptor of the parent not listed in `fds` must be close-on-exec
/// (Rust's std opens every descriptor with `O_CLOEXEC`).
#[derive(Debug)]
pub struct SpawnRequest<'a> {
    /// The program to execute, and its arguments (`argv[0]` included). The environment is empty.
    pub exe: &'a CStr,
    pub argv: &'a [&'a CStr],
    /// Descriptors the child writes `0` to before its exec (a cgroup's join files, see
    /// `cgroup::JoinFds`): a failed write fails the spawn, so the child never runs outside its
    /// cgroup. Written before `fds` are placed, which may reuse their numbers.
    pub join: &'a [RawFd],
    /// `(source, target)`: the child gets `source` at number `target`, without `FD_CLOEXEC`.
    /// Targets must be distinct; 0, 1 and 2 are allowed (standard streams).
    pub fds: &'a [(RawFd, RawFd)],
    /// `setpgid(0, 0)` in the child, before its exec (so no signal to airlock's process group
    /// reaches it from the moment it runs the new program).
    pub new_process_group: bool,
}

/// A started child (not reaped on drop, like `std::process::Child`).
#[derive(Debug)]
pub struct Spawned {
    pid: libc::pid_t,
    status: Option<i32>,
}

/// Which step of the child failed (kept with the errno, for the error message).
const STEPS: [&str; 6] = [
    "",
    "the cgroup join",
    "setpgid",
    "placing descriptors",
    "resetting the signals",
    "execve",
];

/// Everything the child reads, prepared by the parent; `failed` is the only thing it writes.
struct ChildContext {
    exe: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    join: *const RawFd,
    join_len: usize,
    /// `(source, target)` pairs, and the same number of scratch slots for the first pass.
    fds: *const (RawFd, RawFd),
    fds_len: usize,
    scratch: *mut RawFd,
    /// Above every target: the first pass moves each source here, so that no `dup2` of the
    /// second pass clobbers a source sitting on another pair's target number.
    high: RawFd,
    new_process_group: bool,
    /// `step << 16 | errno` of the first failure, 0 when the child reached its exec.
    failed: AtomicI32,
}

/// The child's stack: it runs its setup steps (a few frames of raw syscalls) and `execve`.
const STACK_SIZE: usize = 64 * 1024;

/// Starts `req` (see the module docs). Fails with the child's own error when it could not join,
/// place its descriptors or execute the program; the child is then already reaped.
pub fn spawn(req: &SpawnRequest<'_>) -> std::io::Result<Spawned> {
    let mut argv: Vec<*const libc::c_char> = req.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let mut scratch: Vec<RawFd> = vec![-1; req.fds.len()];
    let high = req.fds.iter().map(|p| p.1).max().unwrap_or(2).max(2) + 1;
    let ctx = ChildContext {
        exe: req.exe.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        join: req.join.as_ptr(),
        join_len: req.join.len(),
        fds: req.fds.as_ptr(),
        fds_len: req.fds.len(),
        scratch: scratch.as_mut_ptr(),
        high,
        new_process_group: req.new_process_group,
        failed: AtomicI32::new(0),
    };
    // SAFETY: `child_main` only reads `ctx` (and the slices and strings it points to, all alive
    // in this frame until the clone returns: CLONE_VFORK suspends this thread until the child
    // has exec'd or exited) and writes its own scratch slots and `failed`.
    let pid = unsafe {
        clone_vfork(
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            child_main,
            &ctx as *const ChildContext as *mut libc::c_void,
        )
    }?;
    let mut child = Spawned { pid, status: None };
    let failed = ctx.failed.load(Ordering::Acquire);
    if failed != 0 {
        let _ = child.wait();
        let step = STEPS.get((failed >> 16) as usize).copied().unwrap_or("");
        let errno = std::io::Error::from_raw_os_error(failed & 0xffff);
        return Err(std::io::Error::new(
            errno.kind(),
            format!("{step} in the child failed: {errno}"),
        ));
    }
    Ok(child)
}

/// Clones a child that runs `child_main(arg)` on a stack of its own and returns its pid once it
/// has exec'd or exited. Every signal is blocked across the clone, so the child starts with
/// the full mask and no handler of the caller's can run in it before it has reset its
/// dispositions (its own: no `CLONE_SIGHAND`).
///
/// # Safety
/// `flags` must hold `CLONE_VFORK` (the stack and `arg` live only until this returns) and not
/// `CLONE_SIGHAND`, `CLONE_THREAD` or `CLONE_FILES`. With `CLONE_VM` the child shares the
/// caller's memory: `child_main` may then only make async-signal-safe calls, allocate nothing,
/// take no lock and write nothing of the caller's but what `arg` sets aside for it.
pub(crate) unsafe fn clone_vfork(
    flags: libc::c_int,
    child_main: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> std::io::Result<libc::pid_t> {
    // Not initialised (the child writes before it reads, like any stack): zeroing it would
    // fault in all its pages, of which the child touches a few at the top.
    let mut stack: Vec<u8> = Vec::with_capacity(STACK_SIZE);
    // The stack grows down from its (16-byte aligned) end.
    let top = (stack.as_mut_ptr() as usize + STACK_SIZE) & !15;
    let mut all: libc::sigset_t = unsafe_zeroed_sigset();
    let mut old: libc::sigset_t = unsafe_zeroed_sigset();
    // SAFETY: both sets are valid, initialised `sigset_t` values owned by this frame.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: the caller keeps `arg` valid and `child_main` within the rules above; the child
    // runs on `stack`, which outlives it (CLONE_VFORK suspends this thread until its exec or
    // exit).
    let pid = unsafe { libc::clone(child_main, top as *mut libc::c_void, flags, arg) };
    let clone_error = std::io::Error::last_os_error();
    // SAFETY: `old` is the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    Ok(pid)
}

pub(crate) fn unsafe_zeroed_sigset() -> libc::sigset_t {
    // SAFETY: `sigset_t` is a plain bit array; all-zero is the empty set.
    unsafe { std::mem::zeroed() }
}

/// The child, between the clone and its exec: async-signal-safe calls only, no allocation.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildContext`, alive until this child execs or exits.
    let ctx = unsafe { &*(arg as *const ChildContext) };
    let fail_with = |step: i32, errno: i32| -> ! {
        ctx.failed
            .store((step << 16) | (errno & 0xffff).max(1), Ordering::Release);
        // SAFETY: _exit ends only this child; no atexit handler runs on the shared memory.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: reading errno of this thread slot (the parent's thread, suspended meanwhile).
    let fail = |step: i32| -> ! { fail_with(step, unsafe { *libc::__errno_location() }) };
    // SAFETY: the slices were built by the parent from live slices of these lengths.
    let (join, fds, scratch) = unsafe {
        (
            std::slice::from_raw_parts(ctx.join, ctx.join_len),
            std::slice::from_raw_parts(ctx.fds, ctx.fds_len),
            std::slice::from_raw_parts_mut(ctx.scratch, ctx.fds_len),
        )
    };
    for &fd in join {
        // SAFETY: write(2) of one static byte to an inherited descriptor.
        match unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } {
            1 => {}
            rc if rc < 0 => fail(1),
            _ => fail_with(1, libc::EIO),
        }
    }
    // SAFETY: setpgid on this process.
    if ctx.new_process_group && unsafe { libc::setpgid(0, 0) } != 0 {
        fail(2);
    }
    for (slot, &(src, _)) in scratch.iter_mut().zip(fds) {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an inherited descriptor.
        *slot = unsafe { libc::fcntl(src, libc::F_DUPFD_CLOEXEC, ctx.high) };
        if *slot < 0 {
            fail(3);
        }
    }
    for (&tmp, &(_, target)) in scratch.iter().zip(fds) {
        // dup2 clears FD_CLOEXEC on the new descriptor; the scratch copies close at exec.
        // SAFETY: dup2 between descriptors of this process (its own table: no CLONE_FILES).
        if unsafe { libc::dup2(tmp, target) } < 0 {
            fail(3);
        }
    }
    // Signals as `posix_spawn` leaves them: every caught signal back to its default (the
    // dispositions are this child's own: no CLONE_SIGHAND), SIGPIPE too, then the empty mask.
    // From here a signal can only act by its default action, never run a handler of airlock's.
    // SAFETY: sigaction/sigprocmask on this process with valid, zero-initialised structures;
    // failures on the numbers the C library reserves are expected and ignored.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..=libc::SIGRTMAX() {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if (caught || sig == libc::SIGPIPE)
                && libc::sigaction(sig, &dfl, std::ptr::null_mut()) != 0
            {
                fail(4);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
            fail(4);
        }
    }
    // SAFETY: NULL-terminated argv/envp of C strings prepared by the parent.
    unsafe { libc::execve(ctx.exe, ctx.argv, ctx.envp) };
    fail(5)
}

impl Spawned {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// The exit status (128+N for a signal) when the child has ended, without blocking.
    pub fn try_wait(&mut self) -> std::io::Result<Option<i32>> {
        if self.status.is_none() {
            self.reap(libc::WNOHANG)?;
        }
        Ok(self.status)
    }

    /// Blocks until the child has ended; its exit status (128+N for a signal).
    pub fn wait(&mut self) -> std::io::Result<i32> {
        while self.status.is_none() {
            self.reap(0)?;
        }
        Ok(self.status.unwrap_or_default())
    }

    /// SIGKILL, unless already reaped (an unreaped child's pid cannot have been reused).
    pub fn kill(&mut self) -> std::io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // SAFETY: kill(2) of our own unreaped child.
        match unsafe { libc::kill(self.pid, libc::SIGKILL) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    fn reap(&mut self, flags: libc::c_int) -> std::io::Result<()> {
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid out-pointer.
        let rc = unsafe { libc::waitpid(self.pid, &mut status, flags) };
        if rc == self.pid {
            self.status = Some(if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            });
            return Ok(());
        }
        match rc {
            0 => Ok(()),
            _ => {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => Ok(()),
                    _ => Err(e),
                }
            }
        }
    }
}

/// `path` as a C string (for [`SpawnRequest::exe`] and its arguments).
pub fn c_string(path: &std::path::Path) -> std::io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::{AsRawFd, OwnedFd};

    fn pipe() -> (OwnedFd, OwnedFd) {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap()
    }

    /// Runs `/bin/sh -c script` with its stdout on a pipe; returns its output and exit status.
    fn run_sh(script: &str, join: &[RawFd], extra: &[(RawFd, RawFd)]) -> (String, i32) {
        let (r, w) = pipe();
        let sh = CString::new("/bin/sh").unwrap();
        let (dash_c, body) = (CString::new("-c").unwrap(), CString::new(script).unwrap());
        let mut fds = vec![(w.as_raw_fd(), 1)];
        fds.extend_from_slice(extra);
        let mut child = spawn(&SpawnRequest {
            exe: &sh,
            argv: &[&sh, &dash_c, &body],
            join,
            fds: &fds,
            new_process_group: true,
        })
        .expect("spawn");
        drop(w);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        (out, child.wait().unwrap())
    }

    #[test]
    fn the_child_gets_exactly_the_placed_descriptors_and_an_empty_environment() {
        // Descriptors the parent holds (close-on-exec, as every descriptor of airlock) do not
        // arrive; the placed one arrives at its number. (Held at high numbers, so that the
        // child's own descriptors, such as `ls`'s directory, cannot be mistaken for them.)
        let high =
            |fd: OwnedFd| rustix::io::fcntl_dupfd_cloexec(&fd, 100).expect("F_DUPFD_CLOEXEC");
        let ((keep_r, keep_w), (other_r, other_w)) = (pipe(), pipe());
        let (keep_r, keep_w, other_r, other_w) =
            (high(keep_r), high(keep_w), high(other_r), high(other_w));
        let script = "ls /proc/self/fd | tr '\\n' ' '; echo; env | wc -l";
        let (out, status) = run_sh(script, &[], &[(keep_r.as_raw_fd(), 5)]);
        assert_eq!(status, 0, "{out}");
        let mut lines = out.lines();
        let fds: Vec<i32> = lines
            .next()
            .unwrap()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(fds.contains(&1) && fds.contains(&5), "{fds:?}");
        for held in [&keep_r, &keep_w, &other_r, &other_w] {
            let n = held.as_raw_fd();
            assert!(
                n == 5 || !fds.contains(&n),
                "descriptor {n} reached the child: {fds:?}"
            );
        }
        // `sh` itself sets PWD and perhaps SHLVL/OLDPWD; nothing of the test's environment.
        let vars: usize = lines.next().unwrap().trim().parse().unwrap();
        assert!(vars <= 3, "the child got an environment: {vars} variables");
    }

    #[test]
    fn the_child_starts_in_its_own_process_group_with_default_signals_and_an_empty_mask() {
        // Blocked and ignored in the parent, as `run` does with the terminal's signals.
        let mut set: libc::sigset_t = unsafe_zeroed_sigset();
        let mut old: libc::sigset_t = unsafe_zeroed_sigset();
        // SAFETY: valid sigsets owned by this frame; the mask is restored below.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        }
        let script = "read -r _ _ _ _ pgid _ < /proc/self/stat; echo $pgid $$; \
                      grep -E '^(SigBlk|SigIgn):' /proc/self/status";
        let (out, status) = run_sh(script, &[], &[]);
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        assert_eq!(status, 0, "{out}");
        let mut lines = out.lines();
        let ids: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            ids[0], ids[1],
            "the child is not the leader of its own group: {ids:?}"
        );
        for line in lines {
            let (name, mask) = line.split_once(':').unwrap();
            let mask = u64::from_str_radix(mask.trim(), 16).unwrap();
            match name {
                // SIGPIPE (13) is ignored by the Rust test harness; the child has it back.
                "SigIgn" => assert_eq!(mask & (1 << 12), 0, "SIGPIPE still ignored"),
                _ => assert_eq!(mask, 0, "the child started with blocked signals"),
            }
        }
    }

    #[test]
    fn the_child_joins_before_its_exec_and_a_failed_join_fails_the_spawn() {
        let (join_r, join_w) = pipe();
        let (out, status) = run_sh("echo ran", &[join_w.as_raw_fd()], &[]);
        assert_eq!((out.as_str(), status), ("ran\n", 0));
        drop(join_w);
        let mut joined = String::new();
        std::fs::File::from(join_r)
            .read_to_string(&mut joined)
            .unwrap();
        assert_eq!(joined, "0", "the child did not write its join byte");

        // A join file the child cannot write: the program never runs.
        let (read_end, _w) = pipe();
        let marker = tempfile::tempdir().unwrap();
        let ran = marker.path().join("ran");
        let sh = CString::new("/bin/sh").unwrap();
        let dash_c = CString::new("-c").unwrap();
        let body = CString::new(format!("touch {}", ran.display())).unwrap();
        let err = spawn(&SpawnRequest {
            exe: &sh,
            argv: &[&sh, &dash_c, &body],
            join: &[read_end.as_raw_fd()],
            fds: &[],
            new_process_group: false,
        })
        .expect_err("a failed join must fail the spawn");
        assert!(err.to_string().contains("cgroup join"), "{err}");
        assert!(!ran.exists(), "the program ran although its join failed");
    }

    #[test]
    fn a_program_that_cannot_be_executed_is_the_spawn_error() {
        let missing = CString::new("/nonexistent/airlock-spawn-test").unwrap();
        let err = spawn(&SpawnRequest {
            exe: &missing,
            argv: &[&missing],
            join: &[],
            fds: &[],
            new_process_group: false,
        })
        .expect_err("spawning a missing program must fail");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("execve"), "{err}");
    }
}
