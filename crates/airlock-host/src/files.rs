//! The host side of `airlock push` and `airlock pull` (PRODUCT F1–F6).
//!
//! Order of operations (the verb checked both paths while reading the command line, F5):
//! 1. [`ready`]: the sandbox must be `ready`; nothing is touched otherwise.
//! 2. [`writable_dirs`]: the host directories any recorded sandbox of this user can write
//!    (writable workspaces and mounts). The host path the user typed is resolved following
//!    links only outside them (`airlock_files::Resolver::host`).
//! 3. [`open_transfer`]: a new stream through the keeper to PID 1, authenticated with the
//!    epoch key, at protocol version 3 or later.
//! 4. The transfer itself (`airlock_files::push` / `pull`), then [`transfer_error`] classifies a
//!    failure. Every message can carry names the sandbox chose: the binary escapes them.

use std::path::PathBuf;

use airlock_core::names::SandboxName;
use airlock_core::records::SandboxRecord;
use airlock_files::{ResolveError, TransferError, Wire};
use airlock_protocol::ErrorCode;

use crate::error::{ErrorKind, HostError};
use crate::lifecycle::Host;
use crate::wire::{StartRequest, START_FILE};

/// The verbs that need a ready sandbox for files and ports; each names its own error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `airlock push`.
    Push,
    /// `airlock pull`.
    Pull,
    /// `airlock ports`.
    Ports,
}

impl Verb {
    fn not_ready_code(self) -> &'static str {
        match self {
            Verb::Push => "push.not_ready",
            Verb::Pull => "pull.not_ready",
            Verb::Ports => "ports.not_ready",
        }
    }
}

/// The record of `name` when it is ready; else exit 1 with the next action.
pub fn ready(host: &Host, name: &SandboxName, verb: Verb) -> Result<SandboxRecord, HostError> {
    crate::lifecycle::ready(host, name, verb.not_ready_code())
}

/// Host directories that some recorded sandbox of this user may write: links inside them are
/// never followed. A sandbox whose mappings cannot be read makes this fail (closed).
pub fn writable_dirs(host: &Host) -> Result<Vec<PathBuf>, HostError> {
    let names = host.stores.names().map_err(|e| {
        HostError::internal("files.state", format!("cannot list the sandboxes: {e}"))
    })?;
    let mut dirs = Vec::new();
    for name in names {
        let path = host.paths(&name).state_dir.join(START_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // A sandbox that never started (or was removed meanwhile) maps nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(unreadable(&path, &e.to_string())),
        };
        let start: StartRequest =
            serde_json::from_slice(&bytes).map_err(|e| unreadable(&path, &e.to_string()))?;
        dirs.extend(
            start
                .spec
                .workspaces
                .iter()
                .chain(start.spec.mounts.iter())
                .filter(|m| m.writable)
                .map(|m| m.host.clone()),
        );
    }
    Ok(dirs)
}

fn unreadable(path: &std::path::Path, why: &str) -> HostError {
    HostError::internal(
        "files.state",
        format!(
            "cannot read which host directories a sandbox can write ({}): {why}",
            path.display()
        ),
    )
    .with_hint("run `airlock clean`, or `airlock down --name NAME` for that sandbox")
}

/// Opens an authenticated transfer stream to the sandbox's PID 1.
pub fn open_transfer(host: &Host, record: &SandboxRecord) -> Result<Wire, HostError> {
    let (stream, key) = crate::lifecycle::open_stream(host, record)?;
    airlock_files::raise_open_files_limit();
    airlock_files::connect(stream, &key).map_err(|e| transfer_error(e, "files"))
}

/// The error of a transfer interrupted by Ctrl+C (exit 130): nothing was published.
pub fn interrupted(verb: &str) -> HostError {
    HostError::new(
        ErrorKind::Interrupted,
        "files.interrupted",
        format!("{verb} interrupted; nothing was published"),
    )
    .with_hint(format!("run `airlock {verb}` again"))
}

/// A host path that could not be resolved: exit 1 (the command line was fine).
pub fn resolve_error(e: &ResolveError) -> HostError {
    let code = match e {
        ResolveError::NotFound { .. } => "files.not_found",
        ResolveError::Exists { .. } => "files.exists",
        ResolveError::NotDirectory { .. }
        | ResolveError::LinkInWritable { .. }
        | ResolveError::TooManyLinks { .. }
        | ResolveError::Forbidden { .. } => "files.bad_path",
        ResolveError::Io { .. } => "files.io",
    };
    let hint = match e {
        ResolveError::Exists { .. } => {
            "pass --replace to swap it atomically, or name another destination"
        }
        ResolveError::LinkInWritable { .. } => {
            "the sandbox can plant links there; name the real directory instead"
        }
        ResolveError::NotFound { .. }
        | ResolveError::NotDirectory { .. }
        | ResolveError::TooManyLinks { .. }
        | ResolveError::Forbidden { .. }
        | ResolveError::Io { .. } => "check the host path",
    };
    HostError::new(ErrorKind::Failed, code, e.to_string()).with_hint(hint)
}

/// Classifies a failed transfer. Nothing was published in every case (the staged copy was
/// removed), and the message says so.
pub fn transfer_error(e: TransferError, verb: &'static str) -> HostError {
    let (kind, code, hint) = match &e {
        TransferError::Remote(remote) => match remote.code {
            ErrorCode::NotFound => (
                ErrorKind::Failed,
                "files.not_found",
                "check the sandbox path",
            ),
            ErrorCode::AlreadyExists => (
                ErrorKind::Failed,
                "files.exists",
                "pass --replace to swap it atomically, or name another destination",
            ),
            ErrorCode::BadPath => (
                ErrorKind::Failed,
                "files.bad_path",
                "check the sandbox path",
            ),
            ErrorCode::PermissionDenied => (
                ErrorKind::Failed,
                "files.permission_denied",
                "the sandbox user cannot access it; transfers never run as root",
            ),
            ErrorCode::Io | ErrorCode::Corrupt | ErrorCode::BadRequest => (
                ErrorKind::Failed,
                "files.failed",
                "retry; see the message for the file",
            ),
            ErrorCode::VersionMismatch
            | ErrorCode::AuthFailed
            | ErrorCode::RootNotAllowed
            | ErrorCode::CommandNotFound
            | ErrorCode::SpawnFailed
            | ErrorCode::UnexpectedMessage
            | ErrorCode::Internal
            | ErrorCode::ConnectionRefused => (
                ErrorKind::Internal,
                "files.guest",
                "run `airlock status`; if the sandbox is ready, this is a bug in airlock",
            ),
        },
        TransferError::Closed => (
            ErrorKind::Failed,
            "files.interrupted",
            "the sandbox stopped or was stopped during the transfer; run `airlock status`",
        ),
        TransferError::GuestTooOld { .. } => (
            ErrorKind::Failed,
            "files.guest_too_old",
            "recreate the sandbox with this airlock: `airlock down`, then `airlock up`",
        ),
        TransferError::Exists { .. } => (
            ErrorKind::Failed,
            "files.exists",
            "pass --replace to swap it atomically, or name another destination",
        ),
        TransferError::Io { .. }
        | TransferError::Corrupt { .. }
        | TransferError::Entry { .. }
        | TransferError::TooDeep { .. }
        | TransferError::NotUtf8 { .. }
        | TransferError::Special { .. }
        | TransferError::Tampered { .. }
        | TransferError::Unexpected { .. } => (
            ErrorKind::Failed,
            "files.failed",
            "see the message for the file",
        ),
        TransferError::Stream(_) | TransferError::Handshake(_) => (
            ErrorKind::Internal,
            "files.channel",
            "run `airlock status`; if the sandbox is ready, this is a bug in airlock",
        ),
    };
    HostError::new(
        kind,
        code,
        format!("{verb} failed, nothing was published: {e}"),
    )
    .with_hint(hint)
}
