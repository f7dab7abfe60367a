//! airlock's host side: everything the `airlock` binary does besides reading argv and printing.
//!
//! - [`lifecycle`]: persistent sandboxes — [`Host::open`] (state stores and the linux
//!   [`lifecycle::backend::LinuxBackend`]), the keeper process that owns a sandbox, finished-run
//!   records ([`lifecycle::runs`]), and [`lifecycle::lifecycle_error`].
//! - [`run`]: the ephemeral sandbox of `airlock run`, step by step, and [`run::build_spec`],
//!   the [`airlock_linux::spec::SandboxSpec`] built from the effective configuration.
//! - [`egress`]: the egress proxy of a sandbox — materialized files, the supervised proxy child,
//!   live reload of a running sandbox's policy.
//! - [`files`]: the host side of `push`/`pull` (readiness, writable directories, the stream).
//! - [`images`]: the host side of `image import|ls|rm`.
//! - [`config`]: the effective configuration as the host loads it (trust read-only).
//! - [`project`]: the active project of a working directory.
//! - [`provision`]: provisioning on every `up`, the package cache, `[[tool]]` and `[env]`.
//! - [`paths`]: airlock's private roots and the state files the verbs share;
//!   [`create_new::create_new`] for a file that must not exist yet (`init`, `config`).
//! - [`sessions`]: the persistent sessions of a sandbox (S1–S4): the default session's spec
//!   and the list/kill/ensure requests to the guest.
//! - [`hidden`]: the hidden verbs (`__init`, `__keeper`, `__proxy`) as library functions.
//! - [`vm`]: the `vm` backend on the host (its checks, its keeper, `run` in a VM).
//! - [`wire`]: every message between two airlock processes on the host (keeper, proxy child).
//!
//! This crate never parses a command line, prints a result or decides an exit code: failures
//! are [`HostError`]s whose [`ErrorKind`] the binary maps to an exit status.

pub mod agents;
pub mod config;
pub mod create_new;
pub mod egress;
pub mod error;
pub mod files;
pub mod hidden;
pub mod images;
mod lib_errors;
pub mod lifecycle;
pub mod paths;
pub mod project;
pub mod provision;
pub mod run;
pub mod sessions;
pub mod vm;
pub mod wire;

pub use error::{ErrorKind, HostError};
pub use lifecycle::Host;
