//! Attaching the host terminal to a session over an open stream (PRODUCT S2), used by the
//! `attach` and `up` verbs.
//!
//! Order of operations: handshake (a guest without sessions is refused) → `attach` with this
//! terminal's size (the guest creates the session when `create` is given) → raw mode and the
//! signal thread (SIGWINCH → resize; SIGTERM/SIGHUP/SIGINT/SIGQUIT → restore and exit) →
//! stream until the detach key, the session's end or an error → restore the terminal → one
//! line saying how it ended and how to come back. Everything printed by airlock goes to
//! stderr; stdout carries only the session's own output.

use std::io::{self, Write};
use std::os::unix::net::UnixStream;

use airlock_protocol::{
    AttachEnd, AttachRequest, DetachKey, Key, SessionClient, SessionClientError, SessionSpec,
    SessionState, WindowSize, DEFAULT_SESSION,
};

use crate::escape::escape_untrusted;
use crate::terminal::{self, ScreenTracker, Terminal, TerminalError, Tracked};

/// What to attach to and how.
#[derive(Debug, Clone)]
pub struct AttachPlan {
    /// The session.
    pub name: String,
    /// Create it (or replace an exited one) with this when no running session has the name.
    pub create: Option<SessionSpec>,
    /// The detach key sequence.
    pub detach: DetachKey,
    /// The command that comes back, for the line printed after a detach
    /// (e.g. `airlock attach`).
    pub reattach: String,
}

impl AttachPlan {
    /// The plan for `session`, created with `create` when absent. `sandbox` is the `--name`
    /// given, repeated in the line that says how to come back.
    pub fn new(
        session: &str,
        create: Option<SessionSpec>,
        detach: DetachKey,
        sandbox: Option<&str>,
    ) -> AttachPlan {
        let mut reattach = "airlock attach".to_owned();
        if session != DEFAULT_SESSION {
            reattach.push(' ');
            reattach.push_str(session);
        }
        if let Some(sandbox) = sandbox {
            reattach.push_str(" --name ");
            reattach.push_str(sandbox);
        }
        AttachPlan {
            name: session.to_owned(),
            create,
            detach,
            reattach,
        }
    }
}

/// Why an attachment failed.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The session request or the stream failed (refused by the guest, channel closed, …).
    #[error(transparent)]
    Session(#[from] SessionClientError),
    /// The host terminal could not be put in raw mode.
    #[error(transparent)]
    Terminal(#[from] TerminalError),
}

/// Attaches the terminal; returns the exit status for the CLI: 0 after a detach, the session's
/// own status (128+N for signal N) when it ended while attached.
pub fn attach_terminal(
    stream: UnixStream,
    key: &Key,
    plan: &AttachPlan,
) -> Result<i32, AttachError> {
    let size = terminal::window_size().unwrap_or(WindowSize { rows: 24, cols: 80 });
    let attached = SessionClient::connect(stream, key).and_then(|client| {
        client.attach(AttachRequest {
            name: plan.name.clone(),
            size,
            create: plan.create.clone(),
        })
    })?;
    let name = escape_untrusted(&plan.name).into_owned();
    if let Some(previous) = attached.opened().replaced {
        eprintln!(
            "airlock: session {name} had {}; started it again",
            previous.describe()
        );
    }
    let tracker = ScreenTracker::default();
    let terminal = Terminal::raw(&tracker)?;
    terminal::watch_signals(&terminal, attached.controller());
    let mut output = Tracked {
        inner: io::stdout(),
        tracker,
    };
    let end = attached.run(Box::new(io::stdin()), &mut output, plan.detach.clone());
    let _ = output.flush();
    drop(terminal);
    match end {
        Ok(AttachEnd::Detached) => {
            eprintln!(
                "\r\nairlock: detached from session {name} (it keeps running); `{}` returns to it",
                plan.reattach
            );
            Ok(0)
        }
        Ok(AttachEnd::Ended(info)) => {
            eprintln!(
                "\r\nairlock: session {name} {}",
                match info.state {
                    SessionState::Running => "ended".to_owned(),
                    other => other.describe(),
                }
            );
            Ok(match info.state {
                SessionState::Running => 0,
                SessionState::Exited { code } => code,
                SessionState::Signaled { signal } => 128 + signal,
            })
        }
        Err(e) => Err(AttachError::Session(e)),
    }
}
