//! File-descriptor hygiene (PRODUCT I7): nothing the host process holds may reach the sandbox.
//!
//! - [`close_all_from`] closes every descriptor at or above a number, used by the init stage
//!   right after it starts, so descriptors leaked into airlock by whoever launched it (a shell,
//!   an IDE, a test harness) are gone before any namespace exists.
//! - [`place_fds`] arranges for a spawned child to receive exactly the listed descriptors at
//!   fixed numbers; everything else the parent holds is close-on-exec (Rust's std opens every
//!   descriptor with `O_CLOEXEC`) or closed by the child itself with [`close_all_from`].

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Closes every descriptor `>= first`. Uses `close_range(2)` (Linux 5.9+).
pub fn close_all_from(first: u32) -> std::io::Result<()> {
    // SAFETY: close_range only closes descriptors of this process; callers own every fd above
    // `first` by contract (they are called at a point where nothing else uses them).
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes `cmd`'s child receive each `(fd, target)` at descriptor number `target` (without
/// `FD_CLOEXEC`). Targets must be distinct and `>= 3`. The `OwnedFd`s stay with the caller and
/// must outlive the spawn.
pub fn place_fds(cmd: &mut Command, fds: &[(&OwnedFd, RawFd)]) {
    let pairs: Vec<(RawFd, RawFd)> = fds.iter().map(|(f, t)| (f.as_raw_fd(), *t)).collect();
    // Two passes: first move every source above all targets, so a source that happens to sit on
    // another pair's target number is not clobbered by that pair's dup2.
    let high = pairs.iter().map(|p| p.1).max().unwrap_or(2) + 1;
    // SAFETY: the closure runs in the forked child before execve and only calls the
    // async-signal-safe functions fcntl and dup2 on descriptors inherited from the parent.
    unsafe {
        cmd.pre_exec(move || {
            let mut moved = Vec::with_capacity(pairs.len());
            for &(src, target) in &pairs {
                let tmp = libc::fcntl(src, libc::F_DUPFD_CLOEXEC, high);
                if tmp < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                moved.push((tmp, target));
            }
            for &(tmp, target) in &moved {
                // dup2 clears FD_CLOEXEC on the new descriptor.
                if libc::dup2(tmp, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Claims a descriptor the host placed at a fixed number for this process (the init stage's
/// protocol descriptors, see `bootstrap.rs`).
///
/// Contract: called at most once per number, and only for numbers the host placed, so the
/// returned `OwnedFd` is the only owner.
pub fn take_inherited(fd: RawFd) -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: per the contract above, `fd` is open (placed by the host before execve) and no
    // other owner of that number exists in this process.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Makes `cmd`'s child move itself into a cgroup before its `execve`, by writing `0` to each of
/// `fds` (the cgroup's join files, opened by the parent: see `cgroup::JoinFds`). The child is
/// single-threaded after the fork, so on v1 (`tasks`) the whole process moves without the
/// kernel's threadgroup lock. A failed write fails the spawn with that error: the child never
/// runs outside its cgroup. The descriptors must stay open until the spawn returns, and this
/// hook must be registered before [`place_fds`], which may reuse their numbers in the child.
pub fn join_before_exec(cmd: &mut Command, fds: Vec<RawFd>) {
    // SAFETY: the closure runs in the forked child before execve and only calls the
    // async-signal-safe write(2) ([`join_cgroup`] allocates nothing) on descriptors inherited
    // from the parent, which keeps them open until the spawn returns.
    unsafe {
        cmd.pre_exec(move || join_cgroup(fds.iter().map(|&fd| BorrowedFd::borrow_raw(fd))));
    }
}

/// Moves the calling process, which must be single-threaded, into a cgroup: writes `0` to each
/// of its join files (`cgroup::JoinFds`: v1 `tasks`, v2 `cgroup.procs`; on v1 the whole process
/// moves without the kernel's threadgroup lock). Allocates nothing, so a forked child may call
/// it before its `execve` ([`join_before_exec`]); the init stage calls it after its own.
pub fn join_cgroup<'a>(fds: impl IntoIterator<Item = BorrowedFd<'a>>) -> std::io::Result<()> {
    for fd in fds {
        match rustix::io::write(fd, b"0") {
            Ok(1) => {}
            // No allocation: a short write is an I/O error.
            Ok(_) => return Err(std::io::Error::from_raw_os_error(libc::EIO)),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads a small `/proc` (or other pseudo-) file whole. Such a file reports size 0, so
/// `fs::read_to_string` probes it with a 32-byte read and doubles its buffer from there (seven
/// `read`s for a 1.5 KiB `/proc/self/mountinfo`, each a `seq_file` pass); a buffer of 8 KiB
/// takes the text in one `read` and sees the end with the next.
pub fn read_pseudo_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(8192);
    std::fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pseudo_files_are_read_whole_beyond_the_first_buffer() {
        let mountinfo = super::read_pseudo_file("/proc/self/mountinfo".as_ref()).unwrap();
        assert!(mountinfo.ends_with('\n') && mountinfo.contains(" / / "));
        let dir = tempfile::tempdir().unwrap();
        let long = "0123456789abcdef\n".repeat(2000);
        std::fs::write(dir.path().join("long"), &long).unwrap();
        assert_eq!(
            super::read_pseudo_file(&dir.path().join("long")).unwrap(),
            long
        );
    }
}
