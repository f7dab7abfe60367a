//! `airlock completions SHELL`: shell completions generated from the clap definition of the
//! public command line (PRODUCT §2), so they can never disagree with what `airlock` accepts.
//!
//! The hidden verbs (`__init`, `__keeper`, `__proxy`) are dispatched before clap and are not in
//! the definition, so they cannot appear. The script goes to stdout as it is (it is ours, not
//! untrusted text, so it is not escaped); with `--json` it is the `script` field instead.

use std::io::{self, Write};

use clap::{Args, CommandFactory, ValueEnum};

use super::Report;
use crate::context::Context;
use crate::error::HostError;
use crate::output::Doc;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to print completions for
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells `airlock completions` supports.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// Source it from ~/.bashrc, or save it as
    /// ~/.local/share/bash-completion/completions/airlock
    Bash,
    /// Save it as `_airlock` in a directory on your `$fpath`
    Zsh,
    /// Save it as ~/.config/fish/completions/airlock.fish
    Fish,
}

impl Shell {
    fn name(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Zsh => "zsh",
            Shell::Fish => "fish",
        }
    }
}

/// The completion script for `shell`.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut cmd = crate::cli::Cli::command();
    let mut out = Vec::new();
    let name = cmd.get_name().to_owned();
    match shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, name, &mut out)
        }
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, name, &mut out),
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, name, &mut out)
        }
    }
    out
}

pub fn run(args: CompletionsArgs, ctx: &Context) -> Result<Report, HostError> {
    let script = script(args.shell);
    if ctx.json {
        let json = serde_json::json!({
            "shell": args.shell.name(),
            "script": String::from_utf8_lossy(&script),
        });
        return Ok(Report::new(Doc::new(), json));
    }
    let mut out = io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => {}
        // The reader went away (`airlock completions bash | head`): nothing more to say.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            return Err(HostError::internal(
                "output.write",
                format!("cannot write the completion script: {e}"),
            ))
        }
    }
    Ok(Report::new(Doc::new(), serde_json::Value::Null))
}
