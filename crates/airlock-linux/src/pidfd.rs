//! Process file descriptors: open one for a pid, wait with a deadline for its process to exit.
//!
//! A pidfd names one process for its whole life: once opened, a recycled pid can never be
//! confused with it, so every "wait for it to exit" and "signal it" in airlock goes through
//! one. The descriptor becomes readable when the process has exited (zombie or reaped).

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

/// A pidfd for `pid`, or `None` when there is no such process (or `pid` is not positive).
pub fn open(pid: i32) -> Option<OwnedFd> {
    if pid <= 0 {
        return None;
    }
    Pid::from_raw(pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
}

/// Waits at most `limit` for the process behind `pidfd` to exit; whether it did. A signal
/// interrupting the wait resumes it with the time left; any other poll failure counts as
/// "not exited" (the caller then escalates or gives up, never assumes it is gone).
pub fn wait_exit(pidfd: impl AsFd, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) if !left.is_zero() => continue,
            Err(_) => return false,
        }
    }
}

/// Reaps the process behind `pidfd` if it has exited and is a child of this process (e.g.
/// re-parented here as a child subreaper); anything else (still running, not our child,
/// already reaped) is left as it is.
pub fn reap(pidfd: impl AsFd) {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let _ = waitid(
        WaitId::PidFd(pidfd.as_fd()),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_returns_once_the_process_exits_and_not_before() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let fd = open(child.id() as i32).expect("pidfd of a live child");
        assert!(
            !wait_exit(&fd, Duration::from_millis(20)),
            "sleep exited early"
        );
        let t = Instant::now();
        assert!(wait_exit(&fd, Duration::from_secs(10)));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "waited the whole limit"
        );
        child.wait().unwrap();
        assert!(
            wait_exit(&fd, Duration::ZERO),
            "a reaped process reads as exited"
        );
    }

    #[test]
    fn no_pidfd_for_a_pid_that_is_not_a_process() {
        assert!(open(0).is_none());
        assert!(open(-1).is_none());
    }
}
