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
use std::os::fd::OwnedFd;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, MutexGuard};

use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{kill_process_group, wait, Pid, Signal, WaitOptions};

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
            },
        )))
    }

    /// Reaps every child that has exited and reports those that were registered.
    ///
    /// The table lock is held across `wait` as well: `std::process::Command::spawn` reaps a
    /// child whose `execve` failed by its pid, and would panic if the reaper took it first.
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
