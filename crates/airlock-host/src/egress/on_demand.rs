//! The egress proxy of a persistent sandbox, started by its keeper on the first connection
//! (socket activation, issue 13: an idle sandbox that made no request runs no proxy).
//!
//! The keeper binds the sandbox's sockets itself before the sandbox starts (`proxy.sock` and
//! one `port-N.sock` per host port, 0600, in the egress directory bound into the sandbox) and
//! keeps them for the sandbox's life. Its serve loop polls them only while no proxy child runs
//! ([`OnDemand::wanted`]); the first connection on any of them — a sandbox process talking to
//! the proxy, or the guest's PID 1 opening its handoff channel for the first connection to
//! `127.0.0.1:3128` — makes the keeper start the child ([`OnDemand::launch`]), which receives
//! copies of the listeners as descriptors 3, 4, … (see [`super::child`]), loads the policy and
//! secrets in force and accepts the waiting connection. Nothing is accepted, relayed or
//! decided by the keeper.
//!
//! While the child runs, the keeper polls its pidfd instead. When it exits (a crash, the OOM
//! killer, a reload whose change only a start applies, a kill), the keeper reaps it and waits
//! for the next connection, which starts a fresh child with the configuration in force then.
//! Because the keeper holds the listeners, the sockets never vanish: a connection made while
//! no child runs waits in the listen backlog instead of being refused.
//!
//! Invariants:
//! - the child joins the sandbox's cgroup before its exec and is spawned by the keeper's main
//!   thread (its `PR_SET_PDEATHSIG` follows the spawning thread), so it never outlives the
//!   sandbox's owner;
//! - at most one start per [`MIN_START_INTERVAL`]: a child that cannot start or dies at once
//!   cannot make the keeper fork in a loop (connections wait meanwhile);
//! - a start that fails closes and re-binds the listeners, so every connection waiting for it
//!   is reset (fail closed, promptly) rather than left hanging; the next connection tries again.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::supervisor::{ProxySupervisor, SupervisorError};
use crate::error::HostError;
use crate::run::limits::RunCgroup;
use crate::wire::EgressStart;

/// The running proxy child, shared by the keeper's main thread (start, reap) and the threads
/// answering reload requests.
pub type SharedProxy = Arc<Mutex<Option<ProxySupervisor>>>;

/// The shortest time between two starts of the child.
pub const MIN_START_INTERVAL: Duration = Duration::from_secs(1);

/// How often the keeper looks at a child whose pidfd could not be opened.
const FALLBACK_CHECK: Duration = Duration::from_millis(500);

/// The keeper's side of an on-demand proxy; see the module docs.
pub struct OnDemand {
    start: EgressStart,
    listeners: Vec<(String, OwnedFd)>,
    child: Child,
    last_start: Option<Instant>,
    /// Children started so far.
    pub starts: u32,
}

/// What the keeper knows of the current child.
enum Child {
    None,
    /// Running; its pidfd becomes readable when it exits (`None`: no pidfd, checked by time).
    Running(Option<OwnedFd>),
}

/// What the serve loop should wait for on the proxy's behalf.
pub enum Wanted<'a> {
    /// A connection on any of these listeners (no child runs).
    Connection(Vec<BorrowedFd<'a>>),
    /// The child's exit (its pidfd).
    Exit(BorrowedFd<'a>),
    /// Nothing before this much time passed (the start interval, or a child without pidfd).
    Pause(Duration),
}

impl OnDemand {
    /// Binds `sockets` (file names) in `start.dir`; no child is started.
    pub fn bind(start: EgressStart, sockets: &[String]) -> Result<OnDemand, HostError> {
        let listeners = bind_all(&start, sockets)?;
        Ok(OnDemand {
            start,
            listeners,
            child: Child::None,
            last_start: None,
            starts: 0,
        })
    }

    /// What to poll now (see [`Wanted`]).
    pub fn wanted(&self) -> Wanted<'_> {
        match &self.child {
            Child::Running(Some(pidfd)) => Wanted::Exit(pidfd.as_fd()),
            Child::Running(None) => Wanted::Pause(FALLBACK_CHECK),
            Child::None => match self.pause_left() {
                Some(left) => Wanted::Pause(left),
                None => Wanted::Connection(self.listeners.iter().map(|(_, l)| l.as_fd()).collect()),
            },
        }
    }

    fn pause_left(&self) -> Option<Duration> {
        let since = self.last_start?.elapsed();
        MIN_START_INTERVAL
            .checked_sub(since)
            .filter(|left| !left.is_zero())
    }

    /// Whether a child is running.
    pub fn is_running(&self) -> bool {
        matches!(self.child, Child::Running(_))
    }

    /// Called after a poll: `ready` is whether what [`wanted`](Self::wanted) returned became
    /// readable. Reaps an exited child, or starts one for a waiting connection.
    pub fn step(&mut self, ready: bool, slot: &SharedProxy, cgroup: &RunCgroup) {
        match &self.child {
            Child::Running(pidfd) => {
                if ready || pidfd.is_none() {
                    self.reap_if_exited(slot);
                }
            }
            Child::None if ready && self.pause_left().is_none() => self.launch(slot, cgroup),
            Child::None => {}
        }
    }

    /// Reaps the child when it has exited.
    fn reap_if_exited(&mut self, slot: &SharedProxy) {
        // A reload thread may hold the lock while it talks to the child: when the child is
        // gone it sees end of file at once and lets go.
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        let exited = slot.as_mut().is_none_or(|sup| !sup.is_alive());
        if exited {
            // Dropping the supervisor reaps the child.
            drop(slot.take());
            self.child = Child::None;
            eprintln!(
                "airlock keeper: the egress proxy exited; the next connection starts it again"
            );
        }
    }

    /// Starts the child for the connection waiting on one of the listeners.
    fn launch(&mut self, slot: &SharedProxy, cgroup: &RunCgroup) {
        self.last_start = Some(Instant::now());
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        match self.spawn(cgroup) {
            Ok(sup) => {
                let pidfd = airlock_linux::pidfd::open(sup.pid() as i32);
                *slot = Some(sup);
                self.child = Child::Running(pidfd);
                self.starts += 1;
            }
            Err(e) => {
                eprintln!(
                    "airlock keeper: the egress proxy could not start ({e}); the connections \
                     waiting for it are closed and the next one tries again"
                );
                self.reset_listeners();
            }
        }
    }

    fn spawn(&self, cgroup: &RunCgroup) -> Result<ProxySupervisor, SupervisorError> {
        let io = |what| move |e: std::io::Error| SupervisorError::Io { what, source: e };
        let fds = self
            .listeners
            .iter()
            .map(|(name, fd)| Ok((name.clone(), fd.try_clone()?)))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(io("duplicating the listeners"))?;
        let join = cgroup
            .join_fds()
            .map_err(|e| io("opening the cgroup's join files")(std::io::Error::other(e)))?;
        let mut sup = ProxySupervisor::launch_inherited(self.start.clone(), &fds, join.as_ref())?;
        drop(fds);
        sup.wait_ready()?;
        Ok(sup)
    }

    /// Closes the listeners (resetting every connection in their backlog) and binds fresh ones
    /// at the same paths; on failure the sockets stay closed (the sandbox is offline).
    fn reset_listeners(&mut self) {
        let names: Vec<String> = self.listeners.drain(..).map(|(n, _)| n).collect();
        match bind_all(&self.start, &names) {
            Ok(fresh) => self.listeners = fresh,
            Err(e) => eprintln!(
                "airlock keeper: cannot listen again for the egress proxy, the sandbox is \
                 offline: {e}"
            ),
        }
    }
}

fn bind_all(start: &EgressStart, sockets: &[String]) -> Result<Vec<(String, OwnedFd)>, HostError> {
    sockets
        .iter()
        .map(|name| {
            let listener = super::lazy::bind(&start.dir.join(name))?;
            Ok((name.clone(), OwnedFd::from(listener)))
        })
        .collect()
}
