//! Serving one exec stream.
//!
//! Order of operations on a stream:
//! 1. handshake (guest side: nonce out, sent by PID 1 before this thread exists; proof in,
//!    verified before anything else is read);
//! 2. exactly one `exec`, or one session request (v2), served by [`crate::session::serve`],
//!    or one `push`, `pull` or `forward` (v3), served by `crate::transfer`; anything else
//!    first is refused with `unexpected_message`;
//! 3. the process is spawned through `airlock_linux::sys::process` and registered with the
//!    reaper under one lock; `started { pid }` is sent;
//! 4. two activities run until the process ends: this thread reads host input (`stdin`,
//!    `stdin_closed`, `resize`, `signal`), and an output thread forwards the process's output
//!    and, once the process exited (seen on its pidfd, status read without reaping it; the
//!    reaper's report where there is no pidfd) and the output reached EOF (or [`DRAIN_GRACE`]
//!    passed, for background processes that keep the descriptors open), sends `exited` /
//!    `signaled` and shuts the stream down.
//!
//! Stdin is written by its own thread (started with the first bytes, so a command whose stdin
//! is closed at once costs none) through a bounded queue ([`STDIN_QUEUE`] chunks), so a
//! process that is slow to read its input does not block `resize` or `signal`. Known limit:
//! the stream has no per-channel flow control, so once that queue is full (a process that
//! never reads while the host keeps sending) later control messages wait behind the stdin
//! bytes until the process reads or exits. A host that disappears mid-run hangs the process
//! up (`SIGHUP` to its group), as a closed terminal would.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use airlock_linux::sys::process::{self, ChildStep, Identity, ProcessError, SpawnSpec};
use airlock_protocol::{
    read_packet, write_packet, ErrorCode, ExecRequest, ExecUser, GuestChallenge, Message, Packet,
    RemoteError,
};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{kill_process_group, Pid, Signal};

use crate::children::{Children, ExitReport, ExitWatch};
use crate::options::GuestOptions;
use crate::pty;

/// How long output is still forwarded after the process exited while something else keeps
/// its stdout/stderr open.
pub const DRAIN_GRACE: Duration = Duration::from_millis(250);
/// Largest chunk read from the process's output (well under the frame limit).
const CHUNK: usize = 64 * 1024;
/// Stdin chunks queued for a process that is not reading.
pub const STDIN_QUEUE: usize = 64;
/// `PATH` when neither the base environment nor the request sets one.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// State shared by every stream of one guest.
pub struct Shared {
    /// The guest's configuration.
    pub opts: GuestOptions,
    /// The process table.
    pub children: Children,
    /// The persistent sessions (S1).
    pub sessions: crate::session::Sessions,
    /// Whether `setgroups(2)` is permitted in this user namespace.
    pub setgroups_allowed: bool,
}

pub(crate) type Writer = Arc<Mutex<UnixStream>>;

pub(crate) fn send(writer: &Writer, packet: &Packet) -> bool {
    let mut stream = writer
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    write_packet(&mut *stream, packet).is_ok()
}

pub(crate) fn send_error(writer: &Writer, code: ErrorCode, message: impl Into<String>) {
    send(
        writer,
        &Packet::Control(Message::Error(RemoteError::new(code, message))),
    );
}

/// The guest's ends of a process's stdio.
pub(crate) struct Ends {
    /// Where stdin bytes go: the pipe's write end, or the PTY master.
    pub(crate) stdin: OwnedFd,
    /// Output descriptors and the frame kind each one feeds.
    pub(crate) outputs: Vec<(OwnedFd, Output)>,
    /// The PTY master, for `resize` (PTY mode only).
    pub(crate) master: Option<OwnedFd>,
}

/// A started process.
pub(crate) struct Process {
    pub(crate) pid: u32,
    pub(crate) ends: Ends,
    pub(crate) watch: ExitWatch,
}

/// What the input loop controls.
struct Input {
    pid: u32,
    /// Set by the output thread once it knows the process ended, before it says so to the
    /// host: from then on the group belongs to what the process left running in the
    /// background, which outlives it (the leader may still be unreaped: the exit is read from
    /// its pidfd before the reaper runs, so "registered" alone does not mean "running").
    ended: Arc<AtomicBool>,
    master: Option<OwnedFd>,
    stdin: Stdin,
}

/// The process's stdin as the input loop sees it. The writer thread starts with the first
/// `stdin` bytes: a command whose stdin is closed at once (`exec` without `-i`) costs none.
enum Stdin {
    /// Not written to yet: the guest's end, held open.
    Unopened(OwnedFd),
    /// Bytes go through the writer thread's queue.
    Queue(SyncSender<Vec<u8>>),
    /// Closed (dropping the end or the queue closed the process's stdin).
    Closed,
}

impl Stdin {
    fn write(&mut self, data: Vec<u8>) {
        let tx = match std::mem::replace(self, Stdin::Closed) {
            Stdin::Unopened(fd) => spawn_stdin_writer(fd),
            Stdin::Queue(tx) => tx,
            Stdin::Closed => return,
        };
        let _ = tx.send(data);
        *self = Stdin::Queue(tx);
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Output {
    Stdout,
    Stderr,
}

/// Serves one stream, whose `guest_hello` went out as `challenge`, until its process has
/// ended or the stream failed.
pub fn serve(mut stream: UnixStream, challenge: GuestChallenge, shared: &Shared) {
    let Ok(version) = challenge.verify(&mut stream, &shared.opts.key) else {
        return; // the handshake already told the peer why
    };
    let Ok(writer) = stream.try_clone() else {
        return;
    };
    let writer: Writer = Arc::new(Mutex::new(writer));
    let request = match read_packet(&mut stream) {
        Ok(Some(Packet::Control(Message::Exec(request)))) => request,
        Ok(Some(Packet::Control(message @ Message::Session(_)))) if message.since() > version => {
            return send_error(
                &writer,
                ErrorCode::UnexpectedMessage,
                format!("{} needs a newer protocol", message.name()),
            )
        }
        Ok(Some(Packet::Control(Message::Session(request)))) => {
            return crate::session::serve(stream, &writer, shared, request)
        }
        Ok(Some(Packet::Control(
            message @ (Message::Push(_) | Message::Pull(_) | Message::Forward(_)),
        ))) if message.since() <= version => {
            drop(writer);
            return crate::transfer::serve(stream, shared, message);
        }
        Ok(None) => return,
        Ok(Some(other)) => {
            return send_error(
                &writer,
                ErrorCode::UnexpectedMessage,
                format!("expected exec, received {}", other.name()),
            )
        }
        Err(err) => return send_error(&writer, ErrorCode::BadRequest, err.to_string()),
    };
    let process = match start(shared, &request) {
        Ok(process) => process,
        Err(err) => return send_error(&writer, err.code, err.message),
    };
    let pid = process.pid;
    send(&writer, &Packet::Control(Message::Started { pid }));
    let Process { ends, watch, .. } = process;
    let output_writer = Arc::clone(&writer);
    let outputs = ends.outputs;
    let ended = Arc::new(AtomicBool::new(false));
    let output_ended = Arc::clone(&ended);
    let output = thread::spawn(move || pump_output(outputs, watch, &output_writer, &output_ended));
    let input = Input {
        pid,
        ended,
        master: ends.master,
        stdin: Stdin::Unopened(ends.stdin),
    };
    read_input(&mut stream, &writer, shared, version, input);
    let _ = output.join();
}

/// Spawns the process `request` describes, or says why not.
pub(crate) fn start(shared: &Shared, request: &ExecRequest) -> Result<Process, RemoteError> {
    request
        .validate()
        .map_err(|e| RemoteError::new(ErrorCode::BadRequest, e.to_string()))?;
    let opts = &shared.opts;
    let (identity, confinement, home, name) = match request.user {
        ExecUser::Sandbox => {
            let user = &opts.sandbox_user;
            let identity = identity(shared, user.uid, user.gid);
            (
                identity,
                &opts.confinement,
                user.home.as_str(),
                user.name.as_str(),
            )
        }
        ExecUser::Root if opts.root_allowed => (
            identity(shared, 0, 0),
            &opts.root_confinement,
            "/root",
            "root",
        ),
        ExecUser::Root => {
            return Err(RemoteError::new(
                ErrorCode::RootNotAllowed,
                "this sandbox does not provide a root identity (see `airlock doctor`)",
            ))
        }
    };
    let env = environment(opts, request, home, name);
    let cwd = match &request.cwd {
        Some(cwd) => cwd.clone(),
        None if std::path::Path::new(home).is_dir() => home.to_string(),
        None => "/".to_string(),
    };
    let internal = |e: &dyn std::fmt::Display| RemoteError::new(ErrorCode::Internal, e.to_string());
    let (stdio, ends) = match &request.tty {
        Some(tty) => pty_stdio(tty.size).map_err(|e| internal(&e))?,
        None => pipe_stdio().map_err(|e| internal(&e))?,
    };
    let spec = SpawnSpec {
        argv: request.argv.clone(),
        env,
        cwd,
        stdio,
        controlling_tty: request.tty.is_some(),
        identity,
    };
    let spawned = shared
        .children
        .spawn_registered(|| process::spawn(spec, confinement))
        .map_err(|e| internal(&e))?;
    let (pid, watch) = spawned.map_err(|e| spawn_error(&e))?;
    Ok(Process { pid, ends, watch })
}

/// The identity switch for `uid`/`gid`. An unprivileged guest that already *is* that
/// identity (a runtime without a user namespace, or the test harness run by an ordinary user)
/// cannot call `setgroups` and has nothing to switch, so it keeps its own identity; a guest
/// running as root always switches, with an empty supplementary group list where allowed.
fn identity(shared: &Shared, uid: u32, gid: u32) -> Identity {
    let (my_uid, my_gid) = (rustix::process::getuid(), rustix::process::getgid());
    if !my_uid.is_root() && my_uid.as_raw() == uid && my_gid.as_raw() == gid {
        return Identity::Inherit;
    }
    let groups = shared.setgroups_allowed.then(Vec::new);
    Identity::Switch { uid, gid, groups }
}

/// The environment: identity defaults, then the base environment, then the request, then
/// `TERM` for a terminal. Later entries win.
fn environment(
    opts: &GuestOptions,
    request: &ExecRequest,
    home: &str,
    name: &str,
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert(airlock_env::PATH.into(), DEFAULT_PATH.into());
    env.insert(airlock_env::HOME.into(), home.into());
    env.insert(airlock_env::USER.into(), name.into());
    env.insert(airlock_env::LOGNAME.into(), name.into());
    env.extend(opts.env_base.iter().cloned());
    env.extend(request.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(tty) = &request.tty {
        env.insert(airlock_env::TERM.into(), tty.term.clone());
    }
    env.into_iter().collect()
}

/// A spawn failure as a typed wire error (the CLI maps not-found to 127, denied to 126).
fn spawn_error(err: &ProcessError) -> RemoteError {
    let code = match err {
        ProcessError::Child {
            step: ChildStep::Exec,
            source,
            ..
        } => match source.raw_os_error() {
            Some(libc::ENOENT) => ErrorCode::CommandNotFound,
            Some(libc::EACCES) => ErrorCode::PermissionDenied,
            _ => ErrorCode::SpawnFailed,
        },
        ProcessError::Child { .. } => ErrorCode::SpawnFailed,
        ProcessError::Nul { .. } | ProcessError::EmptyArgv => ErrorCode::BadRequest,
        ProcessError::Syscall { .. } => ErrorCode::Internal,
    };
    RemoteError::new(code, err.to_string())
}

fn pipe_stdio() -> Result<([OwnedFd; 3], Ends), Errno> {
    let (in_read, in_write) = pipe_with(PipeFlags::CLOEXEC)?;
    let (out_read, out_write) = pipe_with(PipeFlags::CLOEXEC)?;
    let (err_read, err_write) = pipe_with(PipeFlags::CLOEXEC)?;
    let outputs = vec![(out_read, Output::Stdout), (err_read, Output::Stderr)];
    Ok((
        [in_read, out_write, err_write],
        Ends {
            stdin: in_write,
            outputs,
            master: None,
        },
    ))
}

fn pty_stdio(size: airlock_protocol::WindowSize) -> Result<([OwnedFd; 3], Ends), PtyStdioError> {
    let pty = pty::open_pty(size)?;
    let dup = |fd: &OwnedFd| rustix::io::fcntl_dupfd_cloexec(fd, 0);
    let stdio = [dup(&pty.slave)?, dup(&pty.slave)?, pty.slave];
    let ends = Ends {
        stdin: dup(&pty.master)?,
        outputs: vec![(dup(&pty.master)?, Output::Stdout)],
        master: Some(pty.master),
    };
    Ok((stdio, ends))
}

#[derive(Debug, thiserror::Error)]
enum PtyStdioError {
    #[error(transparent)]
    Pty(#[from] pty::PtyError),
    #[error("duplicating a terminal descriptor failed: {0}")]
    Dup(#[from] Errno),
}

/// Writes queued stdin chunks to `fd`; dropping the sender closes the process's stdin.
pub(crate) fn spawn_stdin_writer(fd: OwnedFd) -> SyncSender<Vec<u8>> {
    let (tx, rx): (SyncSender<Vec<u8>>, Receiver<Vec<u8>>) = sync_channel(STDIN_QUEUE);
    thread::spawn(move || {
        let mut open = true;
        for chunk in rx {
            let mut rest = chunk.as_slice();
            while open && !rest.is_empty() {
                match rustix::io::write(&fd, rest) {
                    Ok(n) => rest = &rest[n..],
                    Err(Errno::INTR) => continue,
                    // The process closed its stdin (EPIPE) or the terminal went away: the rest
                    // is discarded, but the queue is still drained so the reader never blocks.
                    Err(_) => open = false,
                }
            }
        }
    });
    tx
}

/// Reads host input until the stream ends. Returns when the host is gone or the output
/// thread shut the stream down after the exit status.
fn read_input(
    stream: &mut UnixStream,
    writer: &Writer,
    shared: &Shared,
    version: u32,
    input: Input,
) {
    let Input {
        pid,
        ended,
        master,
        mut stdin,
    } = input;
    let pty_mode = master.is_some();
    let group = Pid::from_raw(pid as i32);
    let signal_group = |signal: Signal| {
        if let Some(group) = group {
            if !ended.load(Ordering::SeqCst) && shared.children.is_running(pid) {
                let _ = kill_process_group(group, signal);
            }
        }
    };
    loop {
        let packet = match read_packet(stream) {
            Ok(Some(packet)) => packet,
            // The host is gone (or we shut the stream down after the exit): hang up.
            Ok(None) => return signal_group(Signal::HUP),
            Err(err) => {
                send_error(writer, ErrorCode::BadRequest, err.to_string());
                return signal_group(Signal::KILL);
            }
        };
        match packet {
            Packet::Stdin(data) if !matches!(stdin, Stdin::Closed) => stdin.write(data),
            Packet::Control(Message::StdinClosed) if !pty_mode => stdin = Stdin::Closed,
            // A terminal has no end of input; the process ends on its own or by signal.
            Packet::Control(Message::StdinClosed) => {}
            Packet::Control(Message::Resize(size)) => {
                if let Some(master) = &master {
                    let _ = pty::resize(master, size);
                }
            }
            Packet::Control(Message::Signal { signal }) => match Signal::from_named_raw(signal) {
                Some(signal) => signal_group(signal),
                None => send_error(
                    writer,
                    ErrorCode::BadRequest,
                    format!("unknown signal {signal}"),
                ),
            },
            Packet::Control(message) if message.since() > version => {
                send_error(
                    writer,
                    ErrorCode::UnexpectedMessage,
                    format!("{} needs a newer protocol", message.name()),
                );
                return signal_group(Signal::KILL);
            }
            other => {
                send_error(
                    writer,
                    ErrorCode::UnexpectedMessage,
                    format!("{} is not valid while a process runs", other.name()),
                );
                return signal_group(Signal::KILL);
            }
        }
    }
}

/// Forwards output until the process ended and its output is drained, then reports the exit.
fn pump_output(
    mut open: Vec<(OwnedFd, Output)>,
    watch: ExitWatch,
    writer: &Writer,
    ended: &AtomicBool,
) {
    let mut buf = vec![0u8; CHUNK];
    let mut report: Option<ExitReport> = None;
    let mut deadline: Option<Instant> = None;
    loop {
        if open.is_empty() && report.is_none() {
            report = watch.wait();
            break;
        }
        if open.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let wake_index = open.len();
        let mut fds: Vec<PollFd<'_>> = open
            .iter()
            .map(|(fd, _)| PollFd::new(fd, PollFlags::IN))
            .collect();
        let exit_fd = watch.exit_fd();
        if report.is_none() {
            fds.push(PollFd::new(&exit_fd, PollFlags::IN));
        }
        let timeout = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            }
        });
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => break,
        }
        let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
        drop(fds);
        if ready.get(wake_index).copied().unwrap_or(false) {
            report = watch.try_report().or_else(|| watch.report.recv().ok());
            deadline = Some(Instant::now() + DRAIN_GRACE);
        }
        let mut closed = Vec::new();
        for (index, (fd, kind)) in open.iter().enumerate() {
            if !ready[index] {
                continue;
            }
            match rustix::io::read(fd, &mut buf) {
                Ok(0) => closed.push(index),
                Ok(n) => {
                    let data = buf[..n].to_vec();
                    let packet = match kind {
                        Output::Stdout => Packet::Stdout(data),
                        Output::Stderr => Packet::Stderr(data),
                    };
                    send(writer, &packet);
                }
                Err(Errno::INTR) | Err(Errno::AGAIN) => {}
                // EIO: every holder of the PTY slave closed it.
                Err(_) => closed.push(index),
            }
        }
        for index in closed.into_iter().rev() {
            open.remove(index);
        }
    }
    if report.is_some() {
        ended.store(true, Ordering::SeqCst);
    }
    let message = match report {
        Some(ExitReport::Code(code)) => Message::Exited { code },
        Some(ExitReport::Signal(signal)) => Message::Signaled { signal },
        None => Message::Error(RemoteError::new(
            ErrorCode::Internal,
            "the exit status was lost",
        )),
    };
    send(writer, &Packet::Control(message));
    let stream = writer
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = stream.shutdown(std::net::Shutdown::Both);
}
