//! `airlock push HOST_SRC GUEST_DEST [--replace] [--name NAME]`: copy a host file or tree into
//! the ready sandbox (PRODUCT F1–F6).
//!
//! Order of operations: both paths are checked while the command line is read (F5: empty,
//! relative sandbox path, `..` in the sandbox path, `/proc`, `/sys`, `/dev` → exit 2, nothing
//! touched) → the sandbox must be ready → the host source's parent is resolved (links followed
//! only outside sandbox-writable directories; the source itself is never followed, F2) → one
//! authenticated stream to PID 1, which writes as the sandbox user beneath a staging entry and
//! publishes with one rename (`cp -r` rules: an existing directory receives `DEST/NAME`).

use std::path::PathBuf;

use airlock_files::{host_path, sandbox_path, Resolver};
use clap::Args;

use super::Report;
use crate::context::{resolve_name, setup, Context};
use crate::error::{untrusted, HostError};
use crate::transfer_view;

#[derive(Args, Debug)]
pub struct PushArgs {
    /// The host file or directory to copy (a symbolic link is copied as a link)
    #[arg(value_name = "HOST_SRC")]
    pub source: PathBuf,
    /// Where it goes in the sandbox (absolute); an existing directory receives it by name
    #[arg(value_name = "GUEST_DEST")]
    pub dest: String,
    /// Swap an existing target atomically instead of refusing
    #[arg(long)]
    pub replace: bool,
    /// The sandbox to use instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
}

pub fn run(args: PushArgs, ctx: &Context) -> Result<Report, HostError> {
    let usage = |e: airlock_files::PathError| HostError::usage(e.to_string());
    let source = host_path(args.source.as_os_str(), &ctx.cwd).map_err(usage)?;
    source.file_name().map_err(usage)?;
    let dest = sandbox_path(&args.dest).map_err(usage)?;
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let host = setup(ctx, false)?;
    let record = airlock_host::files::ready(&host, &name, airlock_host::files::Verb::Push)?;
    let resolver = Resolver::host(&airlock_host::files::writable_dirs(&host)?);
    let source = resolver
        .source(&source)
        .map_err(|e| untrusted(airlock_host::files::resolve_error(&e)))?;
    let wire = airlock_host::files::open_transfer(&host, &record)?;
    let dest = dest.as_path().display().to_string();
    let (outcome, took) = transfer_view::run("push", wire, |wire, progress| {
        airlock_files::push(wire, &source, &dest, args.replace, progress)
    })?;
    let from = args.source.display().to_string();
    let to = &outcome.sandbox_path;
    Ok(transfer_view::report(
        "pushed",
        &from,
        to,
        &outcome.summary,
        took,
    ))
}
