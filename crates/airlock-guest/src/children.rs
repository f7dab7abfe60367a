//! The table of processes the guest started, and the reaper.
//!
//! Invariants:
//! - A process is registered *while the table lock is held across its spawn*
//!   ([`Children::spawn_registered`]), and the reaper takes the same lock before it looks a
//!   reaped pid up, so an exit can never be reaped before its watcher exists.
//! - No `wait` runs while a spawn is in flight (same lock), see [`Children::reap`].
//! - Every zombie is reaped, registered or not (orphans re-parented to PID 1 included):
//!   [`Children::reap`] loops `waitpid(-1, WNOHANG)` until nothing is left.
//! - Each registered process leads its own process group (it called `setsid`), so signals
//!   are forwarded to `-pid` and reach everything it started in that group.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, MutexGuard};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{
    kill_process_group, pidfd_open, wait, waitid, Pid, PidfdFlags, Signal, WaitId, WaitIdOptions,
    WaitOptions,
};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReport {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// Delivered to the exec stream that started a process.
#[derive(Debug)]
pub struct ExitWatch {
    /// Receives the report once.
    pub report: Receiver<ExitReport>,
    /// Becomes readable (hang-up) when the report has been sent, so it can sit in a `poll`
    /// set next to the process's output.
    pub wake: OwnedFd,
    /// The process's pidfd (none where the kernel has no `pidfd_open`): readable as soon as
    /// it exited, before the reaper ran, so its stream learns the status without waiting for
    /// PID 1's main thread (see [`ExitWatch::try_report`]).
    pub pidfd: Option<OwnedFd>,
}

impl ExitWatch {
    /// What becomes readable when the process ended: its pidfd, else the reaper's wake-up.
    pub fn exit_fd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_ref().unwrap_or(&self.wake).as_fd()
    }

    /// Blocks until the process ended and returns its report (`None`: the reaper is gone).
    pub fn wait(&self) -> Option<ExitReport> {
        let fd = self.exit_fd();
        loop {
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, None) {
                Err(Errno::INTR) => continue,
                Ok(_) | Err(_) => break,
            }
        }
        self.try_report().or_else(|| self.report.recv().ok())
    }

    /// The report once the process has ended, without blocking: the reaper's, or else the
    /// status read through the pidfd *without* reaping (`WNOWAIT`; the reaper still reaps it
    /// and stays the only one that does). `None` while it runs.
    pub fn try_report(&self) -> Option<ExitReport> {
        if let Ok(report) = self.report.try_recv() {
            return Some(report);
        }
        let pidfd = self.pidfd.as_ref()?;
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
        match waitid(WaitId::PidFd(pidfd.as_fd()), options) {
            Ok(Some(status)) => match (status.exit_status(), status.terminating_signal()) {
                (Some(code), _) => Some(ExitReport::Code(code)),
                (None, Some(signal)) => Some(ExitReport::Signal(signal)),
                (None, None) => None,
            },
            Ok(None) => None,
            // Reaped meanwhile (ECHILD): the reaper is sending its report under its lock.
            Err(_) => self.report.recv().ok(),
        }
    }
}

struct Entry {
    report: Sender<ExitReport>,
    /// Dropping the write end wakes the watcher's `poll`.
    _wake: OwnedFd,
}

/// The guest's process table.
#[derive(Default)]
pub struct Children {
    table: Mutex<HashMap<i32, Entry>>,
}

impl Children {
    fn lock(&self) -> MutexGuard<'_, HashMap<i32, Entry>> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `spawn` (which returns the new pid) with the table locked, and registers the pid.
    pub fn spawn_registered<E>(
        &self,
        spawn: impl FnOnce() -> Result<u32, E>,
    ) -> Result<Result<(u32, ExitWatch), E>, Errno> {
        let (wake_read, wake_write) = pipe_with(PipeFlags::CLOEXEC)?;
        let mut table = self.lock();
        let pid = match spawn() {
            Ok(pid) => pid,
            Err(err) => return Ok(Err(err)),
        };
        // Still under the lock: the reaper cannot have taken `pid` yet, so it is our child.
        let pidfd = Pid::from_raw(pid as i32).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        let (tx, rx) = channel();
        table.insert(
            pid as i32,
            Entry {
                report: tx,
                _wake: wake_write,
            },
        );
        Ok(Ok((
            pid,
            ExitWatch {
                report: rx,
                wake: wake_read,
                pidfd,
            },
        )))
    }

    /// Reaps every child that has exited and reports those that were registered.
    ///
    /// The table lock is held across `wait` as well: `process::spawn` reaps a child whose
    /// `execve` failed by its pid, and would lose its status if the reaper took it first.
    /// Spawns hold the same lock, so the reaper never waits while a spawn is in flight.
    pub fn reap(&self) {
        let mut table = self.lock();
        loop {
            // `wait` is waitpid(-1): any child. (`waitpid(None)` would be pid 0: own group only.)
            match wait(WaitOptions::NOHANG) {
                Ok(Some((pid, status))) => {
                    let report = match (status.exit_status(), status.terminating_signal()) {
                        (Some(code), _) => ExitReport::Code(code),
                        (None, Some(signal)) => ExitReport::Signal(signal),
                        // Stopped/continued are not requested (no WUNTRACED/WCONTINUED).
                        (None, None) => continue,
                    };
                    if let Some(entry) = table.remove(&pid.as_raw_nonzero().get()) {
                        let _receiver_gone = entry.report.send(report);
                    }
                }
                Ok(None) | Err(Errno::CHILD) => return,
                Err(Errno::INTR) => continue,
                Err(_) => return,
            }
        }
    }

    /// Sends `signal` to the process group of every registered process.
    pub fn signal_all(&self, signal: Signal) {
        for &pid in self.lock().keys() {
            if let Some(pid) = Pid::from_raw(pid) {
                // A group that already left is fine: there is nothing to signal.
                let _ = kill_process_group(pid, signal);
            }
        }
    }

    /// Whether `pid` is registered and not yet reaped.
    pub fn is_running(&self, pid: u32) -> bool {
        self.lock().contains_key(&(pid as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn spawn_sh(children: &Children, script: &str) -> (u32, ExitWatch) {
        children
            .spawn_registered(|| {
                Command::new("sh")
                    .args(["-c", script])
                    .spawn()
                    .map(|child| child.id())
            })
            .unwrap()
            .unwrap()
    }

    #[test]
    fn an_exit_is_seen_on_the_pidfd_before_the_reaper_ran_and_the_reaper_still_reaps_it() {
        let children = Children::default();
        let (pid, watch) = spawn_sh(&children, "exit 7");
        assert!(watch.pidfd.is_some(), "this kernel has pidfd_open");
        // No reaper runs here: the status comes from the pidfd alone.
        assert_eq!(watch.wait(), Some(ExitReport::Code(7)));
        // Read without reaping: still a zombie the reaper owns.
        assert!(children.is_running(pid));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        assert!(stat
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('Z'));
        children.reap();
        assert!(!children.is_running(pid));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_signal_death_is_reported_as_the_signal_from_the_pidfd() {
        let children = Children::default();
        let (_pid, watch) = spawn_sh(&children, "kill -KILL $$");
        assert_eq!(watch.wait(), Some(ExitReport::Signal(libc::SIGKILL)));
        children.reap();
    }

    #[test]
    fn an_exit_the_reaper_took_first_is_still_reported() {
        let children = Children::default();
        let (_pid, watch) = spawn_sh(&children, "exit 3");
        // Wait until it is a zombie, then let the reaper take it before anyone looks.
        let fd = watch.exit_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        poll(&mut fds, None).unwrap();
        children.reap();
        assert_eq!(watch.try_report(), Some(ExitReport::Code(3)));
    }
}
