//! The options `exec` and `run` share: how the one command runs (same flags, same help).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_protocol::{ExecRequest, ExecUser};
use clap::Args;

use crate::context::Context;
use crate::error::HostError;

/// How the one command runs: the options `exec` and `run` share (same flags, same help).
#[derive(Args, Debug)]
pub struct CommandOptions {
    /// Stream stdin to the command
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Give the command a terminal (PTY); needs a terminal on stdin and stdout
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Working directory inside the sandbox (inside a workspace, mount or the sandbox home)
    #[arg(short = 'w', long = "workdir", value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Set an environment variable for the command (repeatable)
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Run as root of the sandbox's user namespace (never the host's root)
    #[arg(long)]
    pub root: bool,
}

impl CommandOptions {
    /// Parses `-e` and checks that `-t` has a terminal; runs before any side effect.
    pub fn validate(&self, ctx: &Context) -> Result<BTreeMap<String, String>, HostError> {
        let env = parse_env(&self.env)?;
        if self.tty && !(ctx.stdin_is_terminal && ctx.stdout_is_terminal) {
            return Err(HostError::usage("-t needs a terminal on stdin and stdout")
                .with_hint("drop -t (use -i to stream stdin), or run from a terminal"));
        }
        Ok(env)
    }

    /// The request to run `argv` in `cwd` with `env` (from [`Self::validate`]), checked by the
    /// protocol's own validation (a usage error, exit 2, when it refuses).
    pub fn request(
        &self,
        argv: &[String],
        env: BTreeMap<String, String>,
        cwd: &Path,
    ) -> Result<ExecRequest, HostError> {
        let request = ExecRequest {
            argv: argv.to_vec(),
            env,
            cwd: Some(cwd.to_string_lossy().into_owned()),
            user: if self.root {
                ExecUser::Root
            } else {
                ExecUser::Sandbox
            },
            tty: self.tty.then(airlock_term::stream::tty_request),
        };
        request
            .validate()
            .map_err(|e| HostError::usage(e.to_string()))?;
        Ok(request)
    }
}

/// Parses `-e NAME=VALUE` items.
pub fn parse_env(items: &[String]) -> Result<BTreeMap<String, String>, HostError> {
    let mut env = BTreeMap::new();
    for item in items {
        let valid = |k: &str| {
            !k.is_empty()
                && !k.contains(['=', '\0'])
                && !k.starts_with(|c: char| c.is_ascii_digit())
        };
        match item.split_once('=') {
            Some((k, v)) if valid(k) && !v.contains('\0') => {
                env.insert(k.to_owned(), v.to_owned());
            }
            _ => {
                return Err(
                    HostError::usage(format!("-e {item:?} is not of the form NAME=VALUE"))
                        .with_hint("write -e NAME=VALUE, e.g. -e RUST_LOG=debug"),
                )
            }
        }
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn env_items_must_be_name_equals_value() {
        assert!(parse_env(&["A=1".into(), "B=".into()]).is_ok());
        for bad in ["A", "=1", "1A=x"] {
            assert_eq!(parse_env(&[bad.into()]).unwrap_err().kind, ErrorKind::Usage);
        }
    }
}
