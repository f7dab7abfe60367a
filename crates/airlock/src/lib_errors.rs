//! How the libraries' typed errors become [`CommandError`]s. The classification (kind, stable
//! code, message, next action) is airlock-host's (`airlock_host::error`), so a verb and the host
//! report the same failure the same way; only the binary's own [`CreateNewError`] is classified
//! here, with the terminal client's (`airlock-term`) failures, which have no host side.

use airlock_config::project::ProjectError;
use airlock_config::{ConfigErrors, RootsError};
use airlock_core::{
    AtomicWriteError, KnownRootsError, LockError, PrivateDirError, StateError, TrustError,
};
use airlock_host::HostError;
use airlock_protocol::{ClientError, ErrorCode};
use airlock_secrets::SecretError;
use airlock_term::attach::AttachError;
use airlock_term::escape_untrusted;
use airlock_term::secret_input::SecretInputError;
use airlock_term::terminal::TerminalError;

use crate::create_new::CreateNewError;
use crate::error::{CommandError, ErrorKind};

/// `From<$error> for CommandError` through the host's classification.
macro_rules! through_host {
    ($($error:ty),* $(,)?) => {
        $(impl From<$error> for CommandError {
            fn from(e: $error) -> Self {
                HostError::from(e).into()
            }
        })*
    };
}

through_host!(
    RootsError,
    ConfigErrors,
    AtomicWriteError,
    PrivateDirError,
    StateError,
    LockError,
    TrustError,
    ProjectError,
    KnownRootsError,
    SecretError,
);

impl From<CreateNewError> for CommandError {
    fn from(e: CreateNewError) -> Self {
        match &e {
            CreateNewError::Exists { .. } => CommandError::new(
                ErrorKind::Config,
                "file.exists",
                format!("{e}; airlock never overwrites it"),
            )
            .with_hint("edit the existing file, or move it away to start from the template"),
            CreateNewError::Create { .. } | CreateNewError::Write { .. } => {
                CommandError::internal("io.write", e.to_string())
                    .with_hint("check the permissions and free space of that directory")
            }
        }
    }
}

/// A command streamed by `run` or `exec` failed.
impl From<ClientError> for CommandError {
    fn from(e: ClientError) -> Self {
        let (kind, code) = match &e {
            ClientError::Remote(r) => match r.code {
                ErrorCode::RootNotAllowed => {
                    (ErrorKind::BackendUnavailable, "run.root_unavailable")
                }
                ErrorCode::BadRequest => (ErrorKind::Usage, "run.bad_request"),
                ErrorCode::CommandNotFound
                | ErrorCode::PermissionDenied
                | ErrorCode::SpawnFailed => (ErrorKind::Failed, "run.spawn"),
                // Transfer and forward codes (v3) never answer an exec.
                ErrorCode::VersionMismatch
                | ErrorCode::AuthFailed
                | ErrorCode::UnexpectedMessage
                | ErrorCode::Internal
                | ErrorCode::NotFound
                | ErrorCode::AlreadyExists
                | ErrorCode::BadPath
                | ErrorCode::Io
                | ErrorCode::Corrupt
                | ErrorCode::ConnectionRefused => (ErrorKind::Internal, "run.guest"),
            },
            ClientError::Request(_) => (ErrorKind::Usage, "run.bad_request"),
            ClientError::Handshake(_)
            | ClientError::Packet(_)
            | ClientError::Unexpected { .. }
            | ClientError::Closed
            | ClientError::Clone(_) => (ErrorKind::Internal, "run.channel"),
            ClientError::Output { .. } => (ErrorKind::Failed, "run.output"),
        };
        CommandError::new(kind, code, escape_untrusted(&e.to_string()))
            .with_hint("run `airlock doctor`; if it reports nothing, this is a bug in airlock")
    }
}

/// Attaching to session `name` failed.
pub fn attach_error(e: AttachError, name: &str) -> CommandError {
    match e {
        AttachError::Session(e) => airlock_host::sessions::session_error(e, name).into(),
        AttachError::Terminal(e @ TerminalError::NotATerminal) => {
            CommandError::usage(e.to_string())
                .with_hint("run it from a terminal (`up --no-attach` creates without attaching)")
        }
        AttachError::Terminal(e @ TerminalError::Termios(_)) => {
            CommandError::internal("attach.terminal", e.to_string())
        }
    }
}

impl From<SecretInputError> for CommandError {
    fn from(e: SecretInputError) -> Self {
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
        CommandError::new(kind, code, e.to_string()).with_hint(hint)
    }
}
