//! The egress proxy of `airlock run`, started on the first connection (socket activation, B3).
//!
//! Most commands a `run` executes make no request: starting the proxy child for each of them
//! cost an exec of the airlock binary, its configuration and secret load and ~1 ms of CPU.
//! Instead the owner binds the sandbox's sockets itself before the sandbox starts (`proxy.sock`
//! and one `port-N.sock` per host port, 0600, in the egress directory bound into the sandbox),
//! and a watcher thread waits for the first connection on any of them. Only then does it start
//! the proxy child, which receives the bound listeners as descriptors 3, 4, … (named, in order,
//! by its arguments, see [`super::child`]) and serves them with the policy and audit log in force, as a
//! proxy started at once would. The connection that woke the watcher waits in the listen
//! backlog until the child accepts it; nothing is relayed or decided by the owner.
//!
//! Invariants: the proxy child joins the sandbox's cgroup before its exec (as the init stage
//! does); the run's state directory (its audit log) exists before the child starts; when the
//! child cannot start, the owner's listeners are closed, so the waiting connection and every
//! later one are refused (the sandbox is offline, a warning says why) rather than left hanging;
//! the watcher thread lives until [`LazyProxy::stop`], because the child's
//! `PR_SET_PDEATHSIG` is bound to the thread that spawned it.

use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::thread::JoinHandle;

use airlock_linux::cgroup::JoinFds;

use super::supervisor::ProxySupervisor;
use crate::error::HostError;
use crate::lifecycle::backend::with_socket_path;
use crate::wire::EgressStart;

/// Called in the watcher thread right before the proxy child is spawned (the run creates its
/// state directory there, so a run whose command makes no request writes none).
pub type BeforeStart = Box<dyn FnOnce() -> Result<(), HostError> + Send>;

/// Where the watcher reports a proxy that could not start (the text after `airlock: warning: `).
pub type Warn = fn(&str);

/// A proxy that starts on the first connection; see the module docs.
pub struct LazyProxy {
    /// Closing it wakes the watcher, which then ends the child (if any) and returns.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<bool>>,
}

impl LazyProxy {
    /// Binds `sockets` (file names) in `start.dir` and starts the watcher thread. `join`: the
    /// sandbox's cgroup, which the child joins before its exec.
    pub fn start(
        start: EgressStart,
        sockets: &[String],
        join: Option<JoinFds>,
        before: BeforeStart,
        warn: Warn,
    ) -> Result<LazyProxy, HostError> {
        let listeners = sockets
            .iter()
            .map(|name| Ok((name.clone(), bind(&start.dir.join(name))?)))
            .collect::<Result<Vec<_>, HostError>>()?;
        let (stop_r, stop_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| HostError::internal("egress.start", format!("pipe: {e}")))?;
        let watcher = Watcher {
            start,
            listeners,
            join,
            stop: stop_r,
            warn,
        };
        let thread = std::thread::Builder::new()
            .name("egress-watch".to_owned())
            // It polls and spawns one child: a small stack is plenty.
            .stack_size(256 * 1024)
            .spawn(move || watcher.run(before))
            .map_err(|e| HostError::internal("egress.start", format!("thread: {e}")))?;
        Ok(LazyProxy {
            stop: Some(stop_w),
            thread: Some(thread),
        })
    }

    /// Tells the watcher to end the child (SIGKILL) without waiting for it.
    pub fn begin_stop(&mut self) {
        drop(self.stop.take());
    }

    /// Ends the child (if one started) and waits until it is reaped; returns whether a proxy
    /// child was started during the run.
    pub fn stop(mut self) -> bool {
        self.finish()
    }

    fn finish(&mut self) -> bool {
        drop(self.stop.take());
        self.thread
            .take()
            .map(|t| t.join().unwrap_or(false))
            .unwrap_or(false)
    }
}

impl Drop for LazyProxy {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What the watcher thread owns.
struct Watcher {
    start: EgressStart,
    listeners: Vec<(String, UnixListener)>,
    join: Option<JoinFds>,
    stop: OwnedFd,
    warn: Warn,
}

impl Watcher {
    /// Waits for a connection or the stop; returns whether a child was started.
    fn run(self, before: BeforeStart) -> bool {
        if !wait_readable(&self.listeners, &self.stop) {
            return false;
        }
        let Watcher {
            start,
            listeners,
            join,
            stop,
            warn,
        } = self;
        let started = before().map_err(|e| e.message.clone()).and_then(|()| {
            let fds: Vec<(String, OwnedFd)> = listeners
                .into_iter()
                .map(|(name, l)| (name, OwnedFd::from(l)))
                .collect();
            let mut sup = ProxySupervisor::launch_inherited(start, &fds, join.as_ref())
                .map_err(|e| e.to_string())?;
            // The child holds the listeners now: ours close, so a child that dies leaves the
            // sockets refusing instead of queueing connections nobody accepts.
            drop(fds);
            sup.wait_ready().map_err(|e| e.to_string())?;
            Ok(sup)
        });
        match started {
            Ok(mut sup) => {
                wait_readable(&[], &stop);
                sup.begin_stop();
                drop(sup);
                true
            }
            Err(message) => {
                warn(&format!(
                    "the egress proxy could not start, the sandbox is offline: {message}"
                ));
                true
            }
        }
    }
}

/// Blocks until one of `listeners` has a connection waiting (`true`) or `stop` is closed
/// (`false`).
fn wait_readable(listeners: &[(String, UnixListener)], stop: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    loop {
        let mut fds: Vec<PollFd<'_>> = listeners
            .iter()
            .map(|(_, l)| PollFd::new(l, PollFlags::IN))
            .collect();
        fds.push(PollFd::new(stop, PollFlags::IN));
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            // Nothing sensible is left to wait for: treat as stop.
            Err(_) => return false,
        }
        let (last, rest) = fds.split_last().expect("the stop descriptor is polled");
        if !last.revents().is_empty() {
            return false;
        }
        if rest.iter().any(|f| !f.revents().is_empty()) {
            return true;
        }
    }
}

/// Binds a fresh socket at `path` (0600); a stale one is replaced.
pub(crate) fn bind(path: &Path) -> Result<UnixListener, HostError> {
    let _ = std::fs::remove_file(path);
    let fail = |e: std::io::Error| {
        HostError::internal(
            "egress.start",
            format!("cannot listen on {}: {e}", path.display()),
        )
    };
    let listener = with_socket_path(path, |p| UnixListener::bind(p)).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(listener)
}

/// The socket files of the sandbox's relays, in the order the child receives them.
pub fn socket_names(spec: &airlock_linux::spec::SandboxSpec) -> Vec<String> {
    spec.egress
        .as_ref()
        .map(|e| e.relays.iter().map(|r| r.socket.clone()).collect())
        .unwrap_or_default()
}
