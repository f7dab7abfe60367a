//! What a command may know about the invocation: working directory, terminals, environment.
//!
//! Building a [`Context`] has no side effect: it reads the process environment and the working
//! directory, nothing else, so a usage error or `plan` can never create a file through it.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

use airlock_config::{Project, Roots};
use airlock_core::names::SandboxName;
use airlock_host::Host;

use crate::error::{ErrorKind, HostError};

#[derive(Debug, Clone)]
pub struct Context {
    /// `--json` was given: the result is one JSON document on stdout.
    pub json: bool,
    /// `--backend`, when given (`up` and `run` use it).
    pub backend: Option<String>,
    pub cwd: PathBuf,
    pub stdin_is_terminal: bool,
    pub stdout_is_terminal: bool,
}

impl Context {
    /// The invocation's context; `stdout_is_terminal` is the caller's one probe of stdout
    /// (stdin is probed here).
    pub fn from_process(
        json: bool,
        backend: Option<String>,
        stdout_is_terminal: bool,
    ) -> Result<Self, HostError> {
        let cwd = std::env::current_dir().map_err(|e| {
            HostError::new(
                ErrorKind::Internal,
                "cwd.unreadable",
                format!("cannot read the current directory: {e}"),
            )
            .with_hint("change to an existing directory and run the command again")
        })?;
        Ok(Self {
            json,
            backend,
            cwd,
            stdin_is_terminal: std::io::stdin().is_terminal(),
            stdout_is_terminal,
        })
    }

    /// One environment variable of the invocation.
    pub fn var(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }

    /// airlock's per-user roots, resolved from the environment. Creates nothing but, without
    /// `XDG_RUNTIME_DIR`, this user's private tmpfs runtime base (`airlock_config::runtime_root`).
    pub fn roots(&self) -> Result<Roots, HostError> {
        Ok(Roots::from_env(|k| std::env::var_os(k))?)
    }
}

/// The active project, if any (PRODUCT C4).
pub fn discover_project(ctx: &Context) -> Result<Option<Project>, HostError> {
    airlock_host::project::discover_project(&ctx.cwd)
}

/// The active project; an error pointing at `airlock init` when there is none.
pub fn active_project(ctx: &Context) -> Result<Project, HostError> {
    airlock_host::project::active_project(&ctx.cwd)
}

/// Parses `--name`, or derives the active project's name. Usage error (exit 2) for a bad name.
pub fn resolve_name(
    ctx: &Context,
    name: Option<&str>,
) -> Result<(SandboxName, Option<Project>), HostError> {
    airlock_host::lifecycle::resolve_name(&ctx.cwd, name)
}

/// Opens the lifecycle state ([`Host::open`]); `mutating` verbs create the roots and sweep.
pub fn setup(ctx: &Context, mutating: bool) -> Result<Host, HostError> {
    Host::open(&ctx.roots()?, mutating)
}
