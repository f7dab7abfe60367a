//! One running (or exited) session: its PTY, its process, its screen model and its clients.
//!
//! Invariants:
//! - Only the output thread ([`pump`]) feeds the screen model, and it updates the model and
//!   takes the list of clients to send a chunk to under the same lock an attaching client
//!   takes to compute its redraw and register. So every client sees exactly the redraw of the
//!   model up to some chunk, then every later chunk, in order, nothing twice.
//! - Output is never written to a client's socket under the lock: each client has a bounded
//!   queue ([`CLIENT_QUEUE`] chunks) drained by its own writer thread. A full queue holds the
//!   output thread back (the session's program then blocks on its terminal, as with a slow
//!   real terminal) for at most [`SLOW_CLIENT_LIMIT`]; a client still full after that is
//!   detached, so one stuck client cannot freeze the session for the others.
//! - The PTY takes the smallest window of the attached clients (rows and columns separately,
//!   like tmux); with no client attached it keeps its last size.
//! - The exit status stays until the session is removed; the master stays open until then, so
//!   the model and the last screen remain.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_protocol::session::{SessionRefusal, SessionSpec};
use airlock_protocol::{
    ErrorCode, ExecRequest, ExecUser, RemoteError, SessionCommand, SessionErrorCode, SessionInfo,
    SessionState, TtyRequest, WindowSize,
};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{kill_process_group, Pid, Signal};

use super::screen::{Screen, SCROLLBACK_LINES};
use crate::children::{Children, ExitReport, ExitWatch};
use crate::exec::{self, Process, Shared, DRAIN_GRACE};
use crate::pty;

/// Chunks queued for one client.
pub const CLIENT_QUEUE: usize = 64;
/// How long a full client queue may hold the session's output back.
pub const SLOW_CLIENT_LIMIT: Duration = Duration::from_secs(5);
/// Largest chunk read from the PTY at once.
const READ_CHUNK: usize = 16 * 1024;
/// How long `kill` waits after `SIGHUP` before `SIGKILL`, and after `SIGKILL`.
const HANGUP_GRACE: Duration = Duration::from_secs(2);
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What a client's writer thread sends.
pub enum Outgoing {
    /// Terminal bytes (the redraw, then live output).
    Output(Vec<u8>),
    /// The session's process ended; the stream closes after this.
    Ended(SessionInfo),
    /// The client detached; the stream closes after this.
    Detached,
    /// The client sent something invalid; the stream closes after this.
    Error(RemoteError),
}

struct Client {
    size: WindowSize,
    queue: SyncSender<Outgoing>,
}

struct State {
    screen: Screen,
    clients: BTreeMap<u64, Client>,
    next_client: u64,
    exit: Option<SessionState>,
    size: WindowSize,
}

/// A session PID 1 owns.
pub struct Session {
    name: String,
    command: Vec<String>,
    pid: u32,
    started: u64,
    master: OwnedFd,
    input: SyncSender<Vec<u8>>,
    state: Mutex<State>,
    ended: Condvar,
}

fn refusal(code: SessionErrorCode, message: impl Into<String>) -> SessionRefusal {
    SessionRefusal::new(code, message)
}

/// The exec layer's typed spawn failure as a session refusal.
fn spawn_refusal(err: RemoteError) -> SessionRefusal {
    let code = match err.code {
        ErrorCode::CommandNotFound => SessionErrorCode::CommandNotFound,
        ErrorCode::PermissionDenied => SessionErrorCode::PermissionDenied,
        ErrorCode::SpawnFailed => SessionErrorCode::SpawnFailed,
        ErrorCode::BadRequest => SessionErrorCode::BadRequest,
        ErrorCode::RootNotAllowed
        | ErrorCode::VersionMismatch
        | ErrorCode::AuthFailed
        | ErrorCode::UnexpectedMessage
        | ErrorCode::Internal
        // Transfer and forward codes (v3) never answer a spawn.
        | ErrorCode::NotFound
        | ErrorCode::AlreadyExists
        | ErrorCode::BadPath
        | ErrorCode::Io
        | ErrorCode::Corrupt
        | ErrorCode::ConnectionRefused => SessionErrorCode::Internal,
    };
    refusal(code, err.message)
}

/// `[shell, "-l"]` for the first executable of `preferred`, `/bin/bash`, `/bin/sh`.
pub fn login_shell(preferred: Option<&str>) -> Vec<String> {
    let executable = |path: &&str| {
        path.starts_with('/') && rustix::fs::access(*path, rustix::fs::Access::EXEC_OK).is_ok()
    };
    let shell = preferred
        .into_iter()
        .chain(["/bin/bash", "/bin/sh"])
        .find(executable)
        .unwrap_or("/bin/sh");
    vec![shell.to_owned(), "-l".to_owned()]
}

/// Sends `item`, waiting while the queue is full, for at most [`SLOW_CLIENT_LIMIT`].
fn deliver(queue: &SyncSender<Outgoing>, item: Outgoing) -> bool {
    let deadline = Instant::now() + SLOW_CLIENT_LIMIT;
    let mut item = item;
    loop {
        match queue.try_send(item) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                item = back;
                thread::sleep(Duration::from_millis(2));
            }
            Err(TrySendError::Full(_)) => return false,
        }
    }
}

impl Session {
    /// Starts `spec` on a new PTY of `size` as the sandbox user.
    pub fn spawn(
        shared: &Shared,
        name: &str,
        spec: &SessionSpec,
        size: WindowSize,
    ) -> Result<Arc<Session>, SessionRefusal> {
        let argv = match &spec.command {
            SessionCommand::LoginShell { preferred } => login_shell(preferred.as_deref()),
            SessionCommand::Argv { argv } => argv.clone(),
        };
        let request = ExecRequest {
            argv: argv.clone(),
            env: spec.env.clone(),
            cwd: spec.cwd.clone(),
            user: ExecUser::Sandbox,
            tty: Some(TtyRequest {
                size,
                term: spec.term.clone(),
            }),
        };
        let Process { pid, ends, watch } = exec::start(shared, &request).map_err(spawn_refusal)?;
        let internal = |what: &str| refusal(SessionErrorCode::Internal, what);
        let (Some(master), Some((reader, _))) = (ends.master, ends.outputs.into_iter().next())
        else {
            return Err(internal("the session's terminal was not created"));
        };
        let session = Arc::new(Session {
            name: name.to_owned(),
            command: argv,
            pid,
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            master,
            input: exec::spawn_stdin_writer(ends.stdin),
            state: Mutex::new(State {
                screen: Screen::new(size, SCROLLBACK_LINES),
                clients: BTreeMap::new(),
                next_client: 0,
                exit: None,
                size,
            }),
            ended: Condvar::new(),
        });
        let for_pump = Arc::clone(&session);
        let pumped = thread::Builder::new()
            .name(format!("session-{name}"))
            .spawn(move || pump(&for_pump, &reader, &watch));
        if pumped.is_err() {
            session.signal(&shared.children, Signal::KILL);
            return Err(internal("no thread could be started for the session"));
        }
        Ok(session)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn info_of(&self, state: &State) -> SessionInfo {
        SessionInfo {
            name: self.name.clone(),
            command: self.command.clone(),
            state: state.exit.unwrap_or(SessionState::Running),
            clients: u32::try_from(state.clients.len()).unwrap_or(u32::MAX),
            started: self.started,
            pid: self.pid,
            size: state.size,
        }
    }

    /// The session as listings show it.
    pub fn info(&self) -> SessionInfo {
        self.info_of(&self.lock())
    }

    /// Whether its process still runs.
    pub fn is_running(&self) -> bool {
        self.lock().exit.is_none()
    }

    /// Queues the redraw for a new client and registers it. `Ok(None)`: the session already
    /// ended; the queue then holds the last screen and `Ended`, and nothing is registered.
    pub fn attach(
        &self,
        size: WindowSize,
        queue: SyncSender<Outgoing>,
    ) -> Result<Option<u64>, SessionRefusal> {
        let mut state = self.lock();
        if state.exit.is_none() && state.clients.len() >= airlock_protocol::session::MAX_CLIENTS {
            return Err(refusal(
                SessionErrorCode::LimitReached,
                format!(
                    "session {} already has {} clients attached",
                    self.name,
                    state.clients.len()
                ),
            ));
        }
        // The queue is new and empty: these cannot block.
        let _ = queue.try_send(Outgoing::Output(state.screen.redraw()));
        if state.exit.is_some() {
            let _ = queue.try_send(Outgoing::Ended(self.info_of(&state)));
            return Ok(None);
        }
        let id = state.next_client;
        state.next_client += 1;
        state.clients.insert(id, Client { size, queue });
        self.fit(&mut state);
        Ok(Some(id))
    }

    /// Removes a client, sending it `last` first (ordered after its pending output).
    pub fn detach(&self, id: u64, last: Option<Outgoing>) {
        let client = {
            let mut state = self.lock();
            let client = state.clients.remove(&id);
            self.fit(&mut state);
            client
        };
        if let (Some(client), Some(last)) = (client, last) {
            deliver(&client.queue, last);
        }
    }

    /// A client's window changed.
    pub fn resize(&self, id: u64, size: WindowSize) {
        let mut state = self.lock();
        if let Some(client) = state.clients.get_mut(&id) {
            client.size = size;
            self.fit(&mut state);
        }
    }

    /// Sizes the PTY and the model to the smallest attached window.
    fn fit(&self, state: &mut State) {
        let Some(rows) = state.clients.values().map(|c| c.size.rows).min() else {
            return;
        };
        let cols = state
            .clients
            .values()
            .map(|c| c.size.cols)
            .min()
            .unwrap_or(rows);
        let size = WindowSize {
            rows: rows.max(1),
            cols: cols.max(1),
        };
        if size == state.size {
            return;
        }
        state.size = size;
        state.screen.resize(size);
        if state.exit.is_none() {
            // The foreground process group gets SIGWINCH and redraws.
            let _ = pty::resize(&self.master, size);
        }
    }

    /// Keys typed by a client (queued; a session that does not read holds back only this).
    pub fn input(&self, data: Vec<u8>) {
        let _ = self.input.send(data);
    }

    fn signal(&self, children: &Children, signal: Signal) {
        // Only while the process is ours and unreaped: a reaped pid may be reused.
        if let Some(group) = Pid::from_raw(self.pid as i32) {
            if children.is_running(self.pid) {
                let _ = kill_process_group(group, signal);
            }
        }
    }

    /// Hangs the session up (`SIGHUP` to its process group), then kills it if it lingers;
    /// returns its final state.
    pub fn terminate(&self, children: &Children) -> SessionInfo {
        for (signal, grace) in [(Signal::HUP, HANGUP_GRACE), (Signal::KILL, KILL_GRACE)] {
            let state = self.lock();
            if state.exit.is_some() {
                break;
            }
            self.signal(children, signal);
            let (state, _) = self
                .ended
                .wait_timeout_while(state, grace, |s| s.exit.is_none())
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.exit.is_some() {
                break;
            }
        }
        self.info()
    }

    /// A chunk of the PTY's output: into the model, then to every client.
    fn output(&self, data: &[u8]) {
        let queues: Vec<(u64, SyncSender<Outgoing>)> = {
            let mut state = self.lock();
            state.screen.process(data);
            state
                .clients
                .iter()
                .map(|(id, client)| (*id, client.queue.clone()))
                .collect()
        };
        let slow: Vec<u64> = queues
            .into_iter()
            .filter(|(_, queue)| !deliver(queue, Outgoing::Output(data.to_vec())))
            .map(|(id, _)| id)
            .collect();
        for id in slow {
            self.detach(id, None);
        }
    }

    /// The process ended: keep the status, tell every client, wake `terminate`.
    fn finish(&self, report: Option<ExitReport>) {
        let (info, clients) = {
            let mut state = self.lock();
            state.exit = Some(match report {
                Some(ExitReport::Code(code)) => SessionState::Exited { code },
                Some(ExitReport::Signal(signal)) => SessionState::Signaled { signal },
                // The reaper always reports a registered child; should it not, the session
                // still has to read as ended, with a status no process returns.
                None => SessionState::Exited { code: -1 },
            });
            let clients = std::mem::take(&mut state.clients);
            (self.info_of(&state), clients)
        };
        self.ended.notify_all();
        for client in clients.into_values() {
            deliver(&client.queue, Outgoing::Ended(info.clone()));
        }
    }
}

fn timespec(left: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(left.subsec_nanos()),
    }
}

/// The session's output thread: PTY → model and clients until the process ended and the PTY
/// is drained (or [`DRAIN_GRACE`] passed, for background processes keeping it open).
fn pump(session: &Session, reader: &OwnedFd, watch: &ExitWatch) {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut report: Option<ExitReport> = None;
    let mut deadline: Option<Instant> = None;
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|left| left.is_zero()) {
            break;
        }
        let mut fds = vec![PollFd::new(reader, PollFlags::IN)];
        if report.is_none() {
            fds.push(PollFd::new(&watch.wake, PollFlags::IN));
        }
        match poll(&mut fds, left.map(timespec).as_ref()) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => break,
        }
        let output_ready = !fds[0].revents().is_empty();
        let exited = fds.get(1).is_some_and(|fd| !fd.revents().is_empty());
        drop(fds);
        if exited {
            report = watch.report.recv().ok();
            deadline = Some(Instant::now() + DRAIN_GRACE);
        }
        if output_ready {
            match rustix::io::read(reader, &mut buf) {
                Ok(0) => break,
                Ok(n) => session.output(&buf[..n]),
                Err(Errno::INTR | Errno::AGAIN) => {}
                // EIO: every holder of the PTY's other side closed it.
                Err(_) => break,
            }
        }
    }
    let report = report.or_else(|| watch.report.recv().ok());
    session.finish(report);
}
