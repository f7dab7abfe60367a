//! How the libraries' typed errors become [`CommandError`]s. The classification (kind, stable
//! code, message, next action) is airlock-host's (`airlock_host::error`), so a verb and the host
//! report the same failure the same way; only the binary's own [`CreateNewError`] is classified
//! here.

use airlock_config::project::ProjectError;
use airlock_config::{ConfigErrors, RootsError};
use airlock_core::{
    AtomicWriteError, KnownRootsError, LockError, PrivateDirError, StateError, TrustError,
};
use airlock_host::HostError;

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
