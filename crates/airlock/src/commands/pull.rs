//! `airlock pull GUEST_SRC HOST_DEST [--replace] [--name NAME]`: copy a file or tree out of the
//! ready sandbox (PRODUCT F1–F6).
//!
//! Order of operations: both paths are checked while the command line is read (F5) → the
//! sandbox must be ready → the host destination is resolved (links followed only outside
//! sandbox-writable directories; `cp -r` rules; an existing target is refused without
//! `--replace`) → one authenticated stream to PID 1, which reads as the sandbox user without
//! following links → the tree is written beneath a staging entry next to the destination,
//! never following anything the sandbox sent, then published with one rename. Whatever the
//! sandbox sends, nothing outside the destination is created, written or read.

use std::path::PathBuf;

use airlock_files::{host_path, sandbox_path, PathError, Resolver};
use clap::Args;

use super::Report;
use crate::context::{resolve_name, setup, Context};
use crate::error::{untrusted, HostError};
use crate::transfer_view;

#[derive(Args, Debug)]
pub struct PullArgs {
    /// The sandbox file or directory to copy (absolute; a symbolic link is copied as a link)
    #[arg(value_name = "GUEST_SRC")]
    pub source: String,
    /// Where it goes on the host; an existing directory receives it by name
    #[arg(value_name = "HOST_DEST")]
    pub dest: PathBuf,
    /// Swap an existing target atomically instead of refusing
    #[arg(long)]
    pub replace: bool,
    /// The sandbox to use instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
}

pub fn run(args: PullArgs, ctx: &Context) -> Result<Report, HostError> {
    let usage = |e: PathError| HostError::usage(e.to_string());
    let source = sandbox_path(&args.source).map_err(usage)?;
    if source.is_root() {
        return Err(usage(PathError::Root));
    }
    let source_name = source.file_name().map_err(usage)?.to_owned();
    let dest = host_path(args.dest.as_os_str(), &ctx.cwd).map_err(usage)?;
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let host = setup(ctx, false)?;
    let record = airlock_host::files::ready(&host, &name, airlock_host::files::Verb::Pull)?;
    let resolver = Resolver::host(&airlock_host::files::writable_dirs(&host)?);
    let target = resolver
        .target(&dest, &source_name, args.replace)
        .map_err(|e| untrusted(airlock_host::files::resolve_error(&e)))?;
    let wire = airlock_host::files::open_transfer(&host, &record)?;
    let source = source.as_path().display().to_string();
    let (outcome, took) = transfer_view::run("pull", wire, |wire, progress| {
        airlock_files::pull(wire, &source, &target, progress)
    })?;
    let from = &outcome.sandbox_path;
    Ok(transfer_view::report(
        "pulled",
        from,
        &target.display,
        &outcome.summary,
        took,
    ))
}
