//! Session messages (protocol version 2, PRODUCT S1–S3).
//!
//! A session is a named PTY inside the sandbox, owned by the guest's PID 1, so it outlives
//! every client. All session traffic travels inside one control-message variant,
//! [`crate::Message::Session`], carrying a [`SessionMessage`]; the exec messages are untouched.
//!
//! A stream that starts with a session request after the handshake serves exactly that one
//! request:
//! - `attach` → `opened`, then `stdout` frames (first the redraw: bounded scrollback, then the
//!   current screen with colours, cursor and input modes), then live output. The host sends
//!   `stdin` frames, `resize` (the v1 message) and finally `detach`, answered by `detached`.
//!   When the session's process ends every attached client gets `ended` and the stream closes.
//!   A stream that simply closes (a killed client, a closed terminal) is a detach: the
//!   session keeps running, unlike an exec, whose process is hung up.
//! - `ensure` → `opened` (a running session of that name exists afterwards).
//! - `list` → `listing`.
//! - `kill` → `info` with the final state; the session is removed.
//!
//! A refusal is `refused` with a typed [`SessionErrorCode`]; the stream ends after it. Generic
//! protocol failures (a malformed or out-of-order message) stay [`crate::Message::Error`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::WindowSize;

/// The version that introduced sessions.
pub const SESSIONS_SINCE: u32 = 2;
/// The longest session name.
pub const MAX_NAME_LEN: usize = 64;
/// The name of the session `up` and a bare `attach` use.
pub const DEFAULT_SESSION: &str = "main";

/// One session message (host → guest requests, guest → host replies).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    content = "body",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum SessionMessage {
    /// Host → guest: attach to a session, creating it first when `create` is given and no
    /// running session has that name.
    Attach(AttachRequest),
    /// Host → guest: make sure a running session exists (create it, or replace an exited one).
    Ensure(EnsureRequest),
    /// Host → guest: list every session.
    List,
    /// Host → guest: end a session's processes and remove it (also an exited one).
    Kill {
        /// The session.
        name: String,
    },
    /// Host → guest, while attached: leave the session running and end this stream.
    Detach,
    /// Guest → host: the session exists (reply to `attach` and `ensure`).
    Opened(Opened),
    /// Guest → host: a session's state (reply to `kill`: its final state).
    Info(SessionInfo),
    /// Guest → host: every session, ordered by name (reply to `list`).
    Listing {
        /// The sessions.
        sessions: Vec<SessionInfo>,
    },
    /// Guest → host, while attached: the session's process ended; the stream closes.
    Ended(SessionInfo),
    /// Guest → host: the detach is done; the stream closes.
    Detached,
    /// Guest → host: the request was refused; the stream closes.
    Refused(SessionRefusal),
}

impl SessionMessage {
    /// A short name for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Attach(_) => "session_attach",
            Self::Ensure(_) => "session_ensure",
            Self::List => "session_list",
            Self::Kill { .. } => "session_kill",
            Self::Detach => "session_detach",
            Self::Opened(_) => "session_opened",
            Self::Info(_) => "session_info",
            Self::Listing { .. } => "session_listing",
            Self::Ended(_) => "session_ended",
            Self::Detached => "session_detached",
            Self::Refused(_) => "session_refused",
        }
    }
}

/// What runs in a new session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionCommand {
    /// The sandbox user's login shell: `preferred` when it is executable in the sandbox, else
    /// `/bin/bash`, else `/bin/sh`, started as a login shell (`-l`).
    LoginShell {
        /// E.g. the host user's `$SHELL`.
        preferred: Option<String>,
    },
    /// This program and arguments (`argv[0]` looked up in `PATH`).
    Argv {
        /// Program and arguments.
        argv: Vec<String>,
    },
}

/// How to create a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// What to run.
    pub command: SessionCommand,
    /// Variables added on top of the guest's base environment.
    pub env: BTreeMap<String, String>,
    /// Working directory; `None` is the sandbox user's home.
    pub cwd: Option<String>,
    /// `TERM` for the session's processes.
    pub term: String,
}

/// `attach`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachRequest {
    /// The session.
    pub name: String,
    /// This client's window.
    pub size: WindowSize,
    /// Create (or replace an exited session) with this when no running one has the name;
    /// `None` attaches only to an existing session (an exited one shows its last screen).
    pub create: Option<SessionSpec>,
}

/// `ensure`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnsureRequest {
    /// The session.
    pub name: String,
    /// The terminal size a new session starts with.
    pub size: WindowSize,
    /// How to create it.
    pub spec: SessionSpec,
}

/// Reply to `attach` / `ensure`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Opened {
    /// The session now.
    pub session: SessionInfo,
    /// Whether this request started its process.
    pub created: bool,
    /// The state of the exited session this request replaced, if any.
    pub replaced: Option<SessionState>,
}

/// A session as `airlock sessions` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInfo {
    /// Its name.
    pub name: String,
    /// What it runs.
    pub command: Vec<String>,
    /// Running or how it ended.
    pub state: SessionState,
    /// Clients attached now.
    pub clients: u32,
    /// When its process started (seconds since the Unix epoch).
    pub started: u64,
    /// Its process id inside the sandbox (meaningful only within the epoch).
    pub pid: u32,
    /// Its terminal size (the smallest attached window).
    pub size: WindowSize,
}

/// Running, or how the session's process ended (kept until the session is removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionState {
    /// The process runs.
    Running,
    /// It exited with `code`.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// It was killed by `signal`.
    Signaled {
        /// The signal number.
        signal: i32,
    },
}

impl SessionState {
    /// `running`, `exited 3`, `killed by signal 9`.
    pub fn describe(self) -> String {
        match self {
            Self::Running => "running".to_owned(),
            Self::Exited { code } => format!("exited {code}"),
            Self::Signaled { signal } => format!("killed by signal {signal}"),
        }
    }
}

/// Why a session request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionErrorCode {
    /// No session has that name.
    NoSuchSession,
    /// The name breaks the rules of [`validate_name`].
    InvalidName,
    /// The sandbox already has [`MAX_SESSIONS`] sessions, or the session [`MAX_CLIENTS`].
    LimitReached,
    /// The session's program was not found (`ENOENT`).
    CommandNotFound,
    /// The program or working directory is not accessible (`EACCES`).
    PermissionDenied,
    /// Any other failure to start the process.
    SpawnFailed,
    /// The request is malformed (NUL bytes, a relative working directory, an empty argv).
    BadRequest,
    /// The guest failed internally.
    Internal,
}

/// A typed refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[serde(deny_unknown_fields)]
#[error("{message}")]
pub struct SessionRefusal {
    /// What kind of failure.
    pub code: SessionErrorCode,
    /// One sentence for humans; untrusted text, escape before printing.
    pub message: String,
}

impl SessionRefusal {
    /// Builds a refusal.
    pub fn new(code: SessionErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Sessions one sandbox may hold at a time.
pub const MAX_SESSIONS: usize = 32;
/// Clients one session may have attached at a time.
pub const MAX_CLIENTS: usize = 16;

/// Why a session name is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty or longer than [`MAX_NAME_LEN`].
    #[error("session name {name:?} must be 1 to {MAX_NAME_LEN} characters long")]
    Length {
        /// The name.
        name: String,
    },
    /// A character outside `A-Z a-z 0-9 . _ -`, or a leading `.`/`-`.
    #[error(
        "session name {name:?} may only hold letters, digits, '.', '_' and '-', and must not start with '.' or '-'"
    )]
    Characters {
        /// The name.
        name: String,
    },
}

/// Session names: 1–64 of `A-Z a-z 0-9 . _ -`, not starting with `.` or `-` (so a name is
/// never an option, a hidden file or a path).
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(NameError::Length { name: name.into() });
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !name.chars().all(allowed) || name.starts_with(['.', '-']) {
        return Err(NameError::Characters { name: name.into() });
    }
    Ok(())
}

/// Why a [`SessionSpec`] is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `argv` is empty.
    #[error("the session's command is empty")]
    EmptyArgv,
    /// A string holds a NUL byte.
    #[error("{field} contains a NUL byte")]
    Nul {
        /// Which field.
        field: String,
    },
    /// An environment variable name is empty or holds `=`.
    #[error("invalid environment variable name {name:?}")]
    BadEnvName {
        /// The name.
        name: String,
    },
    /// The working directory is not absolute.
    #[error("working directory {cwd:?} is not an absolute path")]
    RelativeCwd {
        /// The path.
        cwd: String,
    },
}

impl SessionSpec {
    /// Checks everything `execve` would otherwise trip over.
    pub fn validate(&self) -> Result<(), SpecError> {
        let nul = |field: String, value: &str| match value.contains('\0') {
            true => Err(SpecError::Nul { field }),
            false => Ok(()),
        };
        match &self.command {
            SessionCommand::Argv { argv } if argv.is_empty() => return Err(SpecError::EmptyArgv),
            SessionCommand::Argv { argv } => {
                for (i, arg) in argv.iter().enumerate() {
                    nul(format!("argv[{i}]"), arg)?;
                }
            }
            SessionCommand::LoginShell { preferred } => {
                nul("shell".into(), preferred.as_deref().unwrap_or_default())?;
            }
        }
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') {
                return Err(SpecError::BadEnvName { name: name.clone() });
            }
            nul(format!("env[{name}]"), name)?;
            nul(format!("env[{name}]"), value)?;
        }
        if let Some(cwd) = &self.cwd {
            nul("cwd".into(), cwd)?;
            if !cwd.starts_with('/') {
                return Err(SpecError::RelativeCwd { cwd: cwd.clone() });
            }
        }
        nul("term".into(), &self.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SessionSpec {
        SessionSpec {
            command: SessionCommand::Argv {
                argv: vec!["sh".into()],
            },
            env: BTreeMap::new(),
            cwd: Some("/work".into()),
            term: "xterm".into(),
        }
    }

    #[test]
    fn session_names_that_could_be_options_or_paths_are_refused() {
        for bad in [
            "",
            "-rf",
            ".hidden",
            "a/b",
            "a b",
            "é",
            "x\u{1b}[2J",
            &"a".repeat(65),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["main", "a", "agent-2", "build_1.log", &"a".repeat(64)] {
            assert_eq!(validate_name(good), Ok(()), "{good:?} refused");
        }
    }

    #[test]
    fn specs_that_execve_cannot_take_are_refused() {
        let mut s = spec();
        s.command = SessionCommand::Argv { argv: vec![] };
        assert_eq!(s.validate(), Err(SpecError::EmptyArgv));
        let mut s = spec();
        s.env.insert("A=B".into(), "1".into());
        assert!(matches!(s.validate(), Err(SpecError::BadEnvName { .. })));
        let mut s = spec();
        s.cwd = Some("rel".into());
        assert!(matches!(s.validate(), Err(SpecError::RelativeCwd { .. })));
        let mut s = spec();
        s.term = "x\0".into();
        assert!(matches!(s.validate(), Err(SpecError::Nul { .. })));
        assert_eq!(spec().validate(), Ok(()));
    }

    #[test]
    fn session_states_describe_themselves_for_listings() {
        assert_eq!(SessionState::Running.describe(), "running");
        assert_eq!(SessionState::Exited { code: 3 }.describe(), "exited 3");
        assert_eq!(
            SessionState::Signaled { signal: 9 }.describe(),
            "killed by signal 9"
        );
    }
}
