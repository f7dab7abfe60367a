//! Streaming one command of `run`, `exec` or `up` through a sandbox's control channel, with
//! the host terminal in raw mode for `-t`.
//!
//! The stream is opened over the control socket (`SCM_RIGHTS`) and authenticated with the
//! per-epoch key. SIGINT, SIGTERM and SIGHUP sent to airlock are forwarded to the command's
//! process group (a dedicated thread `sigwait`s them; they are blocked in every other thread;
//! for a command without stdin or terminal, that thread starts once the request is sent);
//! with `-t` the host terminal is in raw mode (restored on every exit path by a guard) and
//! SIGWINCH becomes a window-size message.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;

use airlock_protocol::{
    ClientError, ErrorCode, ExecClient, ExecRequest, Key, TtyRequest, WindowSize,
};
use nix::sys::signal::{SigSet, Signal};

use crate::escape::escape_untrusted;
use crate::terminal::window_size;

/// The PTY request for `-t`: the host terminal's size and `TERM`.
pub fn tty_request() -> TtyRequest {
    TtyRequest {
        size: window_size().unwrap_or(WindowSize { rows: 24, cols: 80 }),
        term: std::env::var(airlock_config::env_vars::TERM)
            .unwrap_or_else(|_| "xterm-256color".to_owned()),
    }
}

/// Puts the terminal on stdin in raw mode until dropped.
struct RawMode {
    saved: rustix::termios::Termios,
}

impl RawMode {
    fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let saved = rustix::termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(stdin.as_fd(), rustix::termios::OptionalActions::Now, &raw)
            .ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin().as_fd(),
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

/// Runs `request` over an already opened stream to the guest (authenticated here with `key`);
/// shared by `run` and `exec`. Returns the shell-convention status: 127 and 126 (with the
/// guest's message on stderr) for a command that is missing or not executable, 128 + SIGPIPE
/// when the reader of the output went away.
pub fn run_stream(
    stream: std::os::unix::net::UnixStream,
    key: &Key,
    request: &ExecRequest,
    interactive: bool,
) -> Result<i32, ClientError> {
    // With stdin or a terminal, the relay starts before the stdin pump thread, which must
    // inherit the blocked mask. Without either, no other thread comes before it: it starts once
    // the request is out ([`forward_signals`]), so its creation (a clone and the new thread's
    // set-up, ~0.1 ms here) overlaps with the guest starting the command instead of delaying
    // the handshake. Until then a signal acts as it does before the stream is opened.
    if interactive || request.tty.is_some() {
        relay();
    }
    if let Some(sig) = held_signal() {
        // Interrupted while the sandbox started: the command is not run; the status is the
        // one it would have had (128 + N), and the caller tears the sandbox down as usual.
        return Ok(128 + sig as i32);
    }
    // Without -i the command gets an immediately closed stdin: `stdin_closed` goes out with
    // the request itself (no pump thread).
    let stdin: Option<Box<dyn std::io::Read + Send>> = if interactive || request.tty.is_some() {
        Some(Box::new(std::io::stdin()))
    } else {
        None
    };
    let _raw = request.tty.as_ref().and_then(|_| RawMode::enter());
    // The request goes out with the handshake (one round trip fewer than asking first).
    let client = ExecClient::request(stream, key, request, stdin)?;
    forward_signals(client.controller(), request.tty.is_some());
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    let result = client.finish(&mut stdout, &mut stderr);
    let _ = stdout.flush();
    match result {
        Ok(status) => Ok(status.shell_code()),
        Err(ClientError::Remote(e)) => match e.code {
            ErrorCode::CommandNotFound => {
                eprintln!("airlock: {}", escape_untrusted(&e.message));
                Ok(127)
            }
            ErrorCode::PermissionDenied => {
                eprintln!("airlock: {}", escape_untrusted(&e.message));
                Ok(126)
            }
            ErrorCode::RootNotAllowed
            | ErrorCode::VersionMismatch
            | ErrorCode::AuthFailed
            | ErrorCode::BadRequest
            | ErrorCode::SpawnFailed
            | ErrorCode::UnexpectedMessage
            | ErrorCode::Internal
            | ErrorCode::NotFound
            | ErrorCode::AlreadyExists
            | ErrorCode::BadPath
            | ErrorCode::Io
            | ErrorCode::Corrupt
            | ErrorCode::ConnectionRefused => Err(ClientError::Remote(e)),
        },
        // The reader of our output went away (`airlock run -- yes | head`): end quietly, as a
        // shell pipeline member would, with 128 + SIGPIPE.
        Err(ClientError::Output { source, .. })
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            Ok(128 + libc_sigpipe())
        }
        Err(e) => Err(e),
    }
}

fn libc_sigpipe() -> i32 {
    Signal::SIGPIPE as i32
}

/// Where caught signals go: the command, once it exists.
struct Relay {
    controller: Option<airlock_protocol::ExecController>,
    tty: bool,
    /// A terminating signal that came before the command existed.
    pending: Option<Signal>,
    terminations: u32,
}

static RELAY: std::sync::OnceLock<std::sync::Arc<std::sync::Mutex<Relay>>> =
    std::sync::OnceLock::new();

/// Blocks SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGWINCH in this thread (call it from the main
/// thread before any other thread starts, so every later thread inherits the mask; children
/// start with an empty mask) and takes them in one thread from then on. A terminating signal
/// goes to the command's process group once it runs (one that came earlier is held and sent
/// as soon as it does); the second one becomes SIGKILL for that group, or, while there is no
/// command yet, ends airlock at once (exit 130; the sandbox dies with it). SIGWINCH resizes a
/// PTY. Idempotent.
pub fn catch_signals() {
    relay();
}

fn relay() -> std::sync::Arc<std::sync::Mutex<Relay>> {
    RELAY
        .get_or_init(|| {
            let relay = std::sync::Arc::new(std::sync::Mutex::new(Relay {
                controller: None,
                tty: false,
                pending: None,
                terminations: 0,
            }));
            let mut set = SigSet::empty();
            for s in [
                Signal::SIGINT,
                Signal::SIGTERM,
                Signal::SIGHUP,
                Signal::SIGQUIT,
                Signal::SIGWINCH,
            ] {
                set.add(s);
            }
            if set.thread_block().is_ok() {
                let taken = std::sync::Arc::clone(&relay);
                std::thread::spawn(move || take_signals(&set, &taken));
            }
            relay
        })
        .clone()
}

fn take_signals(set: &SigSet, relay: &std::sync::Mutex<Relay>) {
    loop {
        let Ok(sig) = set.wait() else { return };
        let mut r = relay.lock().unwrap_or_else(|p| p.into_inner());
        if sig == Signal::SIGWINCH {
            if let (Some(c), true, Some(size)) = (&r.controller, r.tty, window_size()) {
                let _ = c.resize(size);
            }
            continue;
        }
        // A second Ctrl+C (or TERM/HUP/QUIT) means "stop now", even for a command that
        // handles or ignores the first: its process group is killed.
        r.terminations += 1;
        let sig = if r.terminations > 1 {
            Signal::SIGKILL
        } else {
            sig
        };
        match &r.controller {
            Some(c) => {
                let _ = c.signal(sig as i32);
            }
            None if r.terminations > 1 => std::process::exit(130),
            None => r.pending = Some(sig),
        }
    }
}

/// The terminating signal that came while the sandbox started (see [`catch_signals`]), if one
/// did: then the command must not be requested at all.
fn held_signal() -> Option<Signal> {
    // No relay yet means nothing was caught (`exec` without stdin or a terminal starts it later).
    let relay = RELAY.get()?;
    let mut r = relay.lock().unwrap_or_else(|p| p.into_inner());
    r.pending.take()
}

/// Points the caught signals at the command `controller` requested. A terminating signal that
/// came while the request was on its way (after [`held_signal`]) goes to the command now: a
/// signal never precedes the request on the stream.
fn forward_signals(controller: airlock_protocol::ExecController, tty: bool) {
    let relay = relay();
    let mut r = relay.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(sig) = r.pending.take() {
        let _ = controller.signal(sig as i32);
    }
    r.controller = Some(controller);
    r.tty = tty;
}
