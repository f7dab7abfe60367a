//! How the libraries' typed errors become [`HostError`]s: kind (the binary's exit code), stable code,
//! message and next action. Every match is exhaustive, so a new library variant must be
//! classified here before the host crate compiles.

use airlock_config::edit::EditError;
use airlock_config::{ConfigErrors, RootsError};
use airlock_core::{
    AtomicWriteError, KnownRootsError, LockError, PrivateDirError, StateError, TrustError,
};
use airlock_image::{ImportError, StoreError};
use airlock_protocol::{ClientError, ErrorCode};
use airlock_proxy::audit::AuditError;
use airlock_secrets::SecretError;

use crate::create_new::CreateNewError;

use crate::error::{ErrorKind, HostError};

impl From<RootsError> for HostError {
    fn from(e: RootsError) -> Self {
        let code = match &e {
            RootsError::HomeUnset => "env.home_unset",
            RootsError::HomeRelative { .. } => "env.home_relative",
        };
        HostError::new(ErrorKind::Config, code, e.to_string())
            .with_hint("set HOME to the absolute path of your home directory")
    }
}

impl From<ConfigErrors> for HostError {
    fn from(e: ConfigErrors) -> Self {
        let n = e.diagnostics().len();
        let noun = if n == 1 { "error" } else { "errors" };
        HostError::new(
            ErrorKind::Config,
            "config.invalid",
            format!("the configuration has {n} {noun}:\n{e}"),
        )
        .with_hint("fix each listed key in the named file, then run `airlock plan` again")
    }
}

impl From<AtomicWriteError> for HostError {
    fn from(e: AtomicWriteError) -> Self {
        let code = match &e {
            AtomicWriteError::NoFileName { .. } => "io.bad_path",
            AtomicWriteError::OpenDir { .. }
            | AtomicWriteError::CreateTemp { .. }
            | AtomicWriteError::Chmod { .. }
            | AtomicWriteError::Write { .. }
            | AtomicWriteError::SyncFile { .. }
            | AtomicWriteError::Rename { .. }
            | AtomicWriteError::SyncDir { .. } => "io.write",
        };
        HostError::internal(code, e.to_string())
            .with_hint("check the permissions and free space of that directory")
    }
}

impl From<PrivateDirError> for HostError {
    fn from(e: PrivateDirError) -> Self {
        // The messages of the unsafe-directory variants already end with the exact fix.
        let (kind, code, hint) = match &e {
            PrivateDirError::NotBelow { .. } | PrivateDirError::Unclean { .. } => (
                ErrorKind::Config,
                "dir.bad_location",
                "point the XDG variable or HOME at a plain absolute directory",
            ),
            PrivateDirError::Symlink { .. }
            | PrivateDirError::NotADirectory { .. }
            | PrivateDirError::OwnedByOther { .. }
            | PrivateDirError::Writable { .. } => (
                ErrorKind::Failed,
                "dir.unsafe",
                "apply the fix above, then run the command again",
            ),
            PrivateDirError::Open { .. }
            | PrivateDirError::Create { .. }
            | PrivateDirError::Stat { .. }
            | PrivateDirError::Chmod { .. } => (
                ErrorKind::Internal,
                "dir.io",
                "check the permissions of that directory",
            ),
        };
        HostError::new(kind, code, e.to_string()).with_hint(hint)
    }
}

impl From<StateError> for HostError {
    fn from(e: StateError) -> Self {
        let (kind, code, hint) = match &e {
            StateError::StaleRevision { .. } | StateError::Contended { .. } => (
                ErrorKind::Busy,
                "state.contended",
                "another airlock command changed the same record; run the command again",
            ),
            StateError::LockTimeout { .. } => (
                ErrorKind::Busy,
                "state.locked",
                "wait for the other airlock command to finish, then run this one again",
            ),
            StateError::Corrupt { .. } => (
                ErrorKind::Internal,
                "state.corrupt",
                "move the named file aside; airlock recreates it",
            ),
            StateError::RootNotAbsolute { .. } | StateError::InvalidName { .. } => (
                ErrorKind::Internal,
                "state.invalid",
                "this is a bug in airlock; please report it",
            ),
            StateError::Read { .. }
            | StateError::Encode { .. }
            | StateError::CreateDir { .. }
            | StateError::Lock { .. }
            | StateError::Write(_)
            | StateError::Remove { .. } => (
                ErrorKind::Internal,
                "state.io",
                "check the permissions and free space of airlock's state directory",
            ),
        };
        HostError::new(kind, code, e.to_string()).with_hint(hint)
    }
}

impl From<LockError> for HostError {
    fn from(e: LockError) -> Self {
        let (kind, code, hint) = match &e {
            LockError::Busy { .. } => (
                ErrorKind::Busy,
                "lock.busy",
                "wait for the other command to finish, then run this one again",
            ),
            LockError::Open { .. } | LockError::Lock { .. } | LockError::WriteHolder { .. } => (
                ErrorKind::Internal,
                "lock.io",
                "check the permissions of airlock's state directory",
            ),
        };
        HostError::new(kind, code, e.to_string()).with_hint(hint)
    }
}

impl From<TrustError> for HostError {
    fn from(e: TrustError) -> Self {
        match e {
            TrustError::State(inner) => inner.into(),
            e @ (TrustError::NotAbsolute { .. }
            | TrustError::NonUtf8Path { .. }
            | TrustError::InvalidHash { .. }) => {
                HostError::new(ErrorKind::Failed, "trust.invalid", e.to_string())
                    .with_hint("trust needs a project path that is absolute UTF-8")
            }
            e @ TrustError::Canonicalize { .. } => {
                HostError::new(ErrorKind::Failed, "trust.io", e.to_string())
                    .with_hint("check that the project directory still exists")
            }
        }
    }
}

impl From<KnownRootsError> for HostError {
    fn from(e: KnownRootsError) -> Self {
        match e {
            KnownRootsError::State(inner) => inner.into(),
            e @ (KnownRootsError::NotAbsolute { .. } | KnownRootsError::NonUtf8Path { .. }) => {
                HostError::new(ErrorKind::Failed, "project.remember", e.to_string())
                    .with_hint("airlock remembers project roots by their absolute UTF-8 path")
            }
        }
    }
}

/// How `secret set/ls/rm` report a store failure.
impl From<SecretError> for HostError {
    fn from(e: SecretError) -> Self {
        let make = |kind, code, e: SecretError, hint: &str| {
            HostError::new(kind, code, e.to_string()).with_hint(hint)
        };
        match e {
            SecretError::Dir(inner) => inner.into(),
            e @ (SecretError::Name(_) | SecretError::NoHosts { .. }) => make(
                ErrorKind::Usage,
                "secret.invalid",
                e,
                "see `airlock secret set --help`",
            ),
            e @ SecretError::InvalidValue { .. } => make(
                ErrorKind::Usage,
                "secret.bad_value",
                e,
                "pipe or type the value itself, on one line",
            ),
            e @ SecretError::NotFound { .. } => make(
                ErrorKind::Failed,
                "secret.not_found",
                e,
                "check the spelling: names are case-sensitive",
            ),
            e @ SecretError::Corrupt { .. } => make(
                ErrorKind::Internal,
                "secret.corrupt",
                e,
                "remove the named file, then set the secret again",
            ),
            e @ (SecretError::CreateRoot { .. }
            | SecretError::Read { .. }
            | SecretError::Write { .. }
            | SecretError::Link { .. }
            | SecretError::Remove { .. }) => make(
                ErrorKind::Internal,
                "secret.io",
                e,
                "check the permissions and free space of airlock's data directory",
            ),
        }
    }
}

impl From<CreateNewError> for HostError {
    fn from(e: CreateNewError) -> Self {
        match &e {
            CreateNewError::Exists { .. } => HostError::new(
                ErrorKind::Config,
                "file.exists",
                format!("{e}; airlock never overwrites it"),
            )
            .with_hint("edit the existing file, or move it away to start from the template"),
            CreateNewError::Create { .. } | CreateNewError::Write { .. } => {
                HostError::internal("io.write", e.to_string())
                    .with_hint("check the permissions and free space of that directory")
            }
        }
    }
}

/// A command streamed by `run` or `exec` failed. The message can quote the guest: the binary
/// escapes every message before it reaches a terminal.
impl From<ClientError> for HostError {
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
        HostError::new(kind, code, e.to_string())
            .with_hint("run `airlock doctor`; if it reports nothing, this is a bug in airlock")
    }
}

/// The image store (`image import|ls|rm`, an imported image for a sandbox).
impl From<StoreError> for HostError {
    fn from(e: StoreError) -> Self {
        let make = |kind, code, e: &StoreError, hint: &str| {
            HostError::new(kind, code, e.to_string()).with_hint(hint)
        };
        match &e {
            StoreError::Private(_) | StoreError::Io { .. } | StoreError::Write { .. } => make(
                ErrorKind::Internal,
                "image.io",
                &e,
                "check the permissions and free space of airlock's data directory",
            ),
            StoreError::Exists { name } => make(
                ErrorKind::Failed,
                "image.exists",
                &e,
                &format!("choose another --name, or `airlock image rm {name}` first"),
            ),
            StoreError::NotFound { .. } => make(
                ErrorKind::Failed,
                "image.not_found",
                &e,
                "`airlock image ls` lists the imported images",
            ),
            StoreError::Corrupt { .. } => make(
                ErrorKind::Internal,
                "image.corrupt",
                &e,
                "remove the image with `airlock image rm NAME` and import it again",
            ),
            StoreError::InUse { .. } => make(
                ErrorKind::Failed,
                "image.in_use",
                &e,
                "let the `airlock run` and `airlock up` commands using it end first",
            ),
            StoreError::Removing { .. } => make(
                ErrorKind::Failed,
                "image.removing",
                &e,
                "`airlock image ls` shows whether it is still there",
            ),
        }
    }
}

/// An import or removal failed; the message can quote the archive.
impl From<ImportError> for HostError {
    fn from(e: ImportError) -> Self {
        match e {
            ImportError::Store(s) => s.into(),
            ImportError::Refused { message } => HostError::new(
                ErrorKind::Failed,
                "image.refused",
                format!("the archive was refused: {message}"),
            )
            .with_hint("nothing was imported; check where the archive came from"),
            ImportError::Failed { message } => {
                HostError::new(ErrorKind::Internal, "image.failed", message).with_hint(
                    "nothing was imported; check free space and permissions, then try again",
                )
            }
            ImportError::Helper(h) => {
                HostError::new(ErrorKind::BackendUnavailable, "image.helper", h.to_string())
                    .with_hint("`airlock doctor` checks user namespaces and subordinate ids")
            }
        }
    }
}

/// `policy allow|deny` could not edit the user config.
impl From<EditError> for HostError {
    fn from(e: EditError) -> Self {
        match e {
            EditError::Invalid(errors) => {
                let n = errors.diagnostics().len();
                HostError::new(
                    ErrorKind::Config,
                    "config.invalid",
                    format!("the user config has {n} error(s), so it was not changed:\n{errors}"),
                )
                .with_hint(
                    "fix each listed key (`airlock config` opens the file), then run the command again",
                )
            }
            EditError::Rejected(errors) => HostError::new(
                ErrorKind::Config,
                "policy.rejected",
                format!(
                    "the edited user config would not be valid, so it was not written:\n{errors}"
                ),
            )
            .with_hint("fix the listed keys in the user config, then run the command again"),
            e @ (EditError::Syntax { .. } | EditError::Shape { .. }) => {
                HostError::new(ErrorKind::Config, "config.invalid", e.to_string()).with_hint(
                    "make `network.allow` and `network.deny` arrays of strings, then run the command again",
                )
            }
            e @ (EditError::Lock { .. } | EditError::Read { .. } | EditError::Write { .. }) => {
                HostError::internal("config.io", e.to_string())
                    .with_hint("check the permissions and free space of airlock's config directory")
            }
        }
    }
}

/// `policy log` could not read the audit log.
impl From<AuditError> for HostError {
    fn from(e: AuditError) -> Self {
        match e {
            e @ (AuditError::Open { .. } | AuditError::Read { .. }) => {
                HostError::internal("audit.io", e.to_string())
                    .with_hint("check the permissions of airlock's state directory")
            }
        }
    }
}
