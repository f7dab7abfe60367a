//! The owner's side of the proxy child (see [`super::child`]): spawn, wait for `ready`, reload,
//! restart when it died, stop.
//!
//! Invariants: a child that does not answer within [`ANSWER_TIMEOUT`] counts as failed (the
//! owner never hangs on it); dropping the supervisor kills and reaps the child, so no proxy
//! outlives its sandbox; a restart always loads the configuration in force at that moment.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::wire::{EgressStart, ProxyAnswer, PROXY_RELOAD, PROXY_VERB};

/// How long the child may take to answer `ready` or a reload.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// Why the proxy child could not be started or reloaded.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The child could not be spawned or talked to.
    #[error("cannot run the egress proxy ({what}): {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The child answered with an error.
    #[error("the egress proxy refused: {0}")]
    Refused(String),
    /// The child did not answer in time or closed its output.
    #[error("the egress proxy did not answer ({0})")]
    Silent(&'static str),
    /// The child's answer is not one of the protocol's, or not the one expected now.
    #[error("the egress proxy answered {answer:?} to {what}")]
    Unexpected { what: &'static str, answer: String },
}

/// A running proxy child.
pub struct ProxySupervisor {
    start: EgressStart,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// How many times the child was restarted after it died.
    pub restarts: u32,
    /// Failed restart attempts since the last success.
    pub failed_restarts: u32,
}

impl std::fmt::Debug for ProxySupervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxySupervisor")
            .field("pid", &self.child.id())
            .field("restarts", &self.restarts)
            .finish_non_exhaustive()
    }
}

impl ProxySupervisor {
    /// Spawns the child and waits until it serves (`ready`).
    pub fn spawn(start: EgressStart) -> Result<ProxySupervisor, SupervisorError> {
        let mut sup = ProxySupervisor::launch(start)?;
        sup.wait_ready()?;
        Ok(sup)
    }

    /// Spawns the child without waiting; [`wait_ready`](Self::wait_ready) before relying on it
    /// (lets the owner start the sandbox meanwhile: the guest reaches the socket only when a
    /// sandbox process connects).
    pub fn launch(start: EgressStart) -> Result<ProxySupervisor, SupervisorError> {
        ProxySupervisor::launch_inherited(start, &[], None)
    }

    /// [`launch`](Self::launch) for socket activation (`super::lazy`): the child receives
    /// `listeners` (sockets the owner bound in the egress directory) as descriptors 3, 4, …
    /// and their file names as its arguments after the directory, in the same order, and
    /// serves them instead of binding its own; with `join`, it joins the sandbox's cgroup
    /// before its exec. A child restarted by [`restart_if_dead`](Self::restart_if_dead) binds
    /// its own sockets again.
    pub fn launch_inherited(
        start: EgressStart,
        listeners: &[(String, std::os::fd::OwnedFd)],
        join: Option<&airlock_linux::cgroup::JoinFds>,
    ) -> Result<ProxySupervisor, SupervisorError> {
        let (child, stdin, stdout) = spawn_child(&start, listeners, join)?;
        Ok(ProxySupervisor {
            start,
            child,
            stdin,
            stdout: BufReader::new(stdout),
            restarts: 0,
            failed_restarts: 0,
        })
    }

    /// Waits for the child's `ready` (once, after [`launch`](Self::launch)).
    pub fn wait_ready(&mut self) -> Result<(), SupervisorError> {
        match self.read_answer("ready")? {
            ProxyAnswer::Ready => Ok(()),
            ProxyAnswer::Error { message } => Err(SupervisorError::Refused(message)),
            other @ ProxyAnswer::Ok => Err(SupervisorError::Unexpected {
                what: "the start request",
                answer: format!("{other:?}"),
            }),
        }
    }

    /// Sends the child SIGKILL without waiting for it: its exit then overlaps whatever the owner
    /// does next; dropping the supervisor reaps it (and kills it again, harmlessly).
    pub fn begin_stop(&mut self) {
        let _ = self.child.kill();
    }

    /// The child's host pid (to move it into the sandbox's cgroup).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the child is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Asks the child to load the current policy and secrets.
    pub fn reload(&mut self) -> Result<(), SupervisorError> {
        self.stdin
            .write_all(format!("{PROXY_RELOAD}\n").as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(|source| SupervisorError::Io {
                what: "sending a reload",
                source,
            })?;
        match self.read_answer("reload") {
            Ok(ProxyAnswer::Ok) => Ok(()),
            Ok(ProxyAnswer::Error { message }) => Err(SupervisorError::Refused(message)),
            Ok(other @ ProxyAnswer::Ready) => Err(SupervisorError::Unexpected {
                what: "a reload",
                answer: format!("{other:?}"),
            }),
            Err(e) => {
                // Wedged or gone: end it, so the owner's supervision starts a fresh one with the
                // configuration in force (the sandbox is offline until then).
                let _ = self.child.kill();
                Err(e)
            }
        }
    }

    /// When the child has exited, starts a new one (with the configuration in force now).
    /// `Ok(false)`: it is alive, nothing done.
    pub fn restart_if_dead(&mut self) -> Result<bool, SupervisorError> {
        if self.is_alive() {
            return Ok(false);
        }
        let fresh = match ProxySupervisor::spawn(self.start.clone()) {
            Ok(fresh) => fresh,
            Err(e) => {
                self.failed_restarts += 1;
                return Err(e);
            }
        };
        let old = std::mem::replace(self, fresh);
        self.restarts = old.restarts + 1;
        Ok(true)
    }

    fn read_answer(&mut self, what: &'static str) -> Result<ProxyAnswer, SupervisorError> {
        if self.stdout.buffer().is_empty() {
            let fd = self.stdout.get_ref().as_fd();
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: ANSWER_TIMEOUT.as_secs() as i64,
                tv_nsec: 0,
            };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) => return Err(SupervisorError::Silent(what)),
                Ok(_) => {}
                Err(e) => {
                    return Err(SupervisorError::Io {
                        what: "waiting for an answer",
                        source: e.into(),
                    })
                }
            }
        }
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err(SupervisorError::Silent(what)),
            Ok(_) => {
                serde_json::from_str(line.trim_end()).map_err(|_| SupervisorError::Unexpected {
                    what,
                    answer: line.trim_end().to_owned(),
                })
            }
            Err(source) => Err(SupervisorError::Io {
                what: "reading an answer",
                source,
            }),
        }
    }
}

impl Drop for ProxySupervisor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_child(
    start: &EgressStart,
    listeners: &[(String, std::os::fd::OwnedFd)],
    join: Option<&airlock_linux::cgroup::JoinFds>,
) -> Result<(Child, ChildStdin, ChildStdout), SupervisorError> {
    use std::os::unix::process::CommandExt;
    let io = |what| move |source| SupervisorError::Io { what, source };
    // Its own process group: a Ctrl+C meant for `run`'s command must not take the sandbox
    // offline. It ends with its owner (PDEATHSIG, stdin EOF) or when the owner kills it.
    let mut cmd = Command::new(PathBuf::from("/proc/self/exe"));
    cmd.process_group(0)
        .arg(PROXY_VERB)
        .arg(&start.dir)
        .args(listeners.iter().map(|(name, _)| name))
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let placed: Vec<(&std::os::fd::OwnedFd, std::os::fd::RawFd)> = listeners
        .iter()
        .zip(super::child::FIRST_LISTENER_FD..)
        .map(|((_, fd), target)| (fd, target))
        .collect();
    // The join first: placing the listeners may reuse the numbers of the join files.
    if let Some(join) = join {
        airlock_linux::sys::fd::join_before_exec(&mut cmd, join.raw());
    }
    if !placed.is_empty() {
        airlock_linux::sys::fd::place_fds(&mut cmd, &placed);
    }
    let mut child = cmd.spawn().map_err(io("spawning"))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = serde_json::to_vec(start).map_err(|e| SupervisorError::Io {
        what: "encoding the start request",
        source: std::io::Error::other(e),
    })?;
    line.push(b'\n');
    if let Err(source) = stdin.write_all(&line).and_then(|()| stdin.flush()) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(SupervisorError::Io {
            what: "sending the start request",
            source,
        });
    }
    Ok((child, stdin, stdout))
}
