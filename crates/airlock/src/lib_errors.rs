//! How the terminal client's (`airlock-term`) failures become [`HostError`]s. Every other
//! library error is classified by airlock-host (`airlock_host::error` and its `From` impls),
//! so a verb and the host report the same failure the same way; these have no host side.

use airlock_host::{ErrorKind, HostError};
use airlock_term::attach::AttachError;
use airlock_term::secret_input::SecretInputError;
use airlock_term::terminal::TerminalError;

/// Attaching to session `name` failed.
pub fn attach_error(e: AttachError, name: &str) -> HostError {
    match e {
        AttachError::Session(e) => airlock_host::sessions::session_error(e, name),
        AttachError::Terminal(e @ TerminalError::NotATerminal) => HostError::usage(e.to_string())
            .with_hint("run it from a terminal (`up --no-attach` creates without attaching)"),
        AttachError::Terminal(e @ TerminalError::Termios(_)) => {
            HostError::internal("attach.terminal", e.to_string())
        }
    }
}

/// Reading a secret's value failed.
pub fn secret_input_error(e: SecretInputError) -> HostError {
    let (kind, code, hint) = match &e {
        SecretInputError::TooLong => (
            ErrorKind::Usage,
            "secret.too_long",
            "pipe the value itself, not a file that contains more",
        ),
        SecretInputError::Empty { .. } => (
            ErrorKind::Usage,
            "secret.bad_value",
            "pipe or type the value itself, on one line",
        ),
        SecretInputError::NotUtf8 => (
            ErrorKind::Usage,
            "secret.bad_value",
            "secrets go into HTTP headers, so they must be text",
        ),
        SecretInputError::Stdin(_) => (
            ErrorKind::Failed,
            "secret.stdin",
            "pipe the value in, e.g. `printf %s \"$TOKEN\" | airlock secret set NAME --host HOST`",
        ),
        SecretInputError::Terminal(_) => (
            ErrorKind::Failed,
            "secret.terminal",
            "pipe the value in instead of typing it",
        ),
    };
    HostError::new(kind, code, e.to_string()).with_hint(hint)
}
