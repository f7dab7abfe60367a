//! What a command may know about the invocation: working directory, terminals, environment.
//!
//! Building a [`Context`] has no side effect: it reads the process environment and the working
//! directory, nothing else, so a usage error or `plan` can never create a file through it.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

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
}
