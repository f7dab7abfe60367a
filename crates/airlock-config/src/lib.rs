//! airlock-config: the configuration of airlock, from environment and files to the validated
//! [`Effective`] configuration, plus the pure network policy matcher.
//!
//! Entry points: [`Roots::from_env`] → [`project::discover`] → [`load`]. Nothing in this
//! crate writes anywhere except [`edit`] (the user config's allow/deny lists, on request); it
//! reads the two config files and metadata of the paths they name.
//! See `docs/architecture.md` for the contracts.

mod agent_defs;
pub mod agent_sync;
pub mod agents;
pub mod backend;
pub mod beneath;
pub mod credential_shapes;
pub mod diagnostics;
pub mod edit;
pub mod effective;
pub mod git_worktree;
/// The environment-variable catalogue (the `airlock-env` crate, re-exported under its old path).
pub use airlock_env as env_vars;
mod limits;
mod load;
pub mod mounts;
mod network;
mod parse;
pub mod policy;
pub mod ports;
pub mod presets;
pub mod project;
pub mod protect;
pub mod raw;
pub mod roots;
pub mod runtime_root;
pub mod sandbox_git;
pub mod schema;
pub mod templates;
pub mod toolchain;
pub mod values;

pub use diagnostics::{ConfigErrors, Diagnostic};
pub use effective::{Effective, Origin, Sourced};
pub use load::{config_hash, load, LoadRequest, Overrides, COMMAND_LINE};
pub use network::UNTRUSTED_REASON;
pub use policy::{Action, Decision, HostPattern, Policy, Rule, RuleOrigin};
pub use project::{Project, ProjectError, ProjectKind};
pub use roots::{Roots, RootsError};
