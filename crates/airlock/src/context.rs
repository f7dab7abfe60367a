//! What a command may know about the invocation: working directory, terminals, environment.
//!
//! Building a [`Context`] has no side effect: it reads the process environment and the working
//! directory, nothing else, so a usage error or `plan` can never create a file through it.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use airlock_config::Roots;

use crate::error::{CommandError, ErrorKind};

#[derive(Debug, Clone)]
pub struct Context {
    /// `--json` was given: the result is one JSON document on stdout.
    pub json: bool,
    pub cwd: PathBuf,
    pub stdin_is_terminal: bool,
    pub stdout_is_terminal: bool,
}

impl Context {
    pub fn from_process(json: bool) -> Result<Self, CommandError> {
        let cwd = std::env::current_dir().map_err(|e| {
            CommandError::new(
                ErrorKind::Internal,
                "cwd.unreadable",
                format!("cannot read the current directory: {e}"),
            )
            .with_hint("change to an existing directory and run the command again")
        })?;
        Ok(Self {
            json,
            cwd,
            stdin_is_terminal: std::io::stdin().is_terminal(),
            stdout_is_terminal: std::io::stdout().is_terminal(),
        })
    }

    /// One environment variable of the invocation.
    pub fn var(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }

    /// airlock's per-user roots, resolved from the environment. Creates nothing.
    pub fn roots(&self) -> Result<Roots, CommandError> {
        Ok(Roots::from_env(|k| std::env::var_os(k))?)
    }
}

/// Creates `dir` (one of airlock's roots) as a private 0700 directory, verifying every
/// component below its anchor: `$HOME` when `dir` lies beneath it, else the XDG base directory
/// the root was derived from (created with default permissions if missing, like any XDG base).
pub fn ensure_root(roots: &Roots, dir: &Path) -> Result<(), CommandError> {
    let anchor = if dir.starts_with(&roots.home) {
        roots.home.clone()
    } else {
        let base = dir.parent().unwrap_or(Path::new("/")).to_path_buf();
        std::fs::create_dir_all(&base).map_err(|e| {
            CommandError::internal("dir.io", format!("cannot create {}: {e}", base.display()))
                .with_hint("check the permissions of that directory")
        })?;
        base
    };
    airlock_core::ensure_private_dir(dir, &anchor)?;
    Ok(())
}
