//! What Rust's runtime start does before `main`, for the `airlock` executable, which starts
//! without it (`#![no_main]`; see `crates/airlock/src/main.rs` for why).
//!
//! Rust's start (`std::rt::init`) does three things on Linux, then calls `main`:
//! 1. it opens `/dev/null` on each of the descriptors 0, 1 and 2 that is closed, so that no
//!    file opened later lands on a standard stream number by accident;
//! 2. it ignores SIGPIPE, so that a write to a closed pipe fails with `EPIPE` (which airlock
//!    reports, or, on a closed stdout, ends on quietly) instead of killing the process;
//! 3. it installs a SIGSEGV/SIGBUS handler on an alternate stack that prints "has overflowed its
//!    stack" for a hit on a thread's guard page; finding the main thread's guard makes glibc
//!    read and parse all of `/proc/self/maps` (`pthread_getattr_np`).
//!
//! [`as_rust_runtime_would`] does 1 and 2 exactly as the runtime does. 3 is left out: it costs
//! ~20 system calls and the `/proc/self/maps` read at every start, and only adds a message; a
//! stack overflow still hits the guard page and kills the process (SIGSEGV instead of the
//! message and SIGABRT).

/// Descriptors 0–2 opened on `/dev/null` when closed, and SIGPIPE ignored, as Rust's runtime
/// start leaves a process. Aborts (as the runtime does) when a closed standard descriptor cannot
/// be replaced.
pub fn as_rust_runtime_would() {
    sanitize_standard_fds();
    ignore_sigpipe();
}

fn sanitize_standard_fds() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    loop {
        // SAFETY: poll(2) on a valid array of three pollfd structures, no timeout.
        if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } != -1 {
            break;
        }
        match super::probe::errno() {
            libc::EINTR => continue,
            // poll refused (e.g. RLIMIT_NOFILE below 3): ask each descriptor instead.
            _ => {
                for fd in 0..3 {
                    // SAFETY: fcntl(F_GETFD) only reads this process's descriptor flags.
                    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
                        && super::probe::errno() == libc::EBADF
                    {
                        open_dev_null();
                    }
                }
                return;
            }
        }
    }
    for fd in fds {
        if fd.revents & libc::POLLNVAL != 0 {
            open_dev_null();
        }
    }
}

/// Opens `/dev/null`, which takes the lowest free number: the closed standard descriptor.
fn open_dev_null() {
    // SAFETY: open(2) of a NUL-terminated constant path; the descriptor is deliberately left
    // open (it becomes a standard stream for the life of the process).
    if unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } == -1 {
        std::process::abort();
    }
}

fn ignore_sigpipe() {
    // SAFETY: signal(2) setting SIGPIPE's disposition to SIG_IGN installs no handler code.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_closed_standard_descriptor_is_reopened_on_dev_null_and_sigpipe_is_ignored() {
        let dev_null = std::fs::metadata("/dev/null")
            .expect("stat /dev/null")
            .rdev();
        // In a child of its own (async-signal-safe calls only): stdin closed and SIGPIPE at its
        // default (the test harness's own start ignored it), the runtime's start redone, then
        // what descriptor 0 is and what SIGPIPE does.
        let report = super::super::probe::run_in_child(|report| {
            // SAFETY: close/fstat/sigaction on this child's own descriptor and signal table,
            // with zeroed out-structures.
            unsafe {
                libc::close(0);
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                as_rust_runtime_would();
                let mut st: libc::stat = std::mem::zeroed();
                report[0] = i32::from(libc::fstat(0, &mut st) == 0 && st.st_rdev == dev_null);
                let mut old: libc::sigaction = std::mem::zeroed();
                report[1] = i32::from(
                    libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
                        && old.sa_sigaction == libc::SIG_IGN,
                );
            }
        })
        .expect("child");
        assert_eq!(report[0], 1, "descriptor 0 is not /dev/null");
        assert_eq!(report[1], 1, "SIGPIPE is not ignored");
    }
}
