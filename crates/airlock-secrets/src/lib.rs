//! airlock-secrets: the host-side secret store (PRODUCT N5, N8, A3).
//!
//! - [`redacted`]: [`Redacted<T>`], a wrapper whose `Debug`/`Display` never print the value and
//!   which zeroes string memory on drop.
//! - [`name`]: checked [`SecretName`]s (`[A-Z_][A-Z0-9_]*`, the environment-variable charset) and
//!   [`HeaderTemplate`]s (`Name: text {value} text`).
//! - [`store`]: the [`SecretStore`] under `<data root>/secrets/` (directory 0700, files 0600,
//!   written atomically), the installation salt and placeholder derivation.
//! - [`bindings`]: [`SecretBindings`], the placeholder ↔ value ↔ hosts table the proxy uses.
//!
//! Invariant (N8): a secret value is only ever held in a [`Redacted`] and only ever written to its
//! own record file; no error, `Debug` output or listing of this crate contains it.

pub mod bindings;
pub mod name;
pub mod redacted;
pub mod store;

pub use bindings::{Binding, SecretBindings, DEFAULT_SECRET_HEADERS, PLACEHOLDER_PREFIX};
pub use name::{parse_header_name, HeaderTemplate, NameError, SecretName};
pub use redacted::Redacted;
pub use store::{SecretError, SecretInfo, SecretStore};
