//! `airlock down [--name NAME]` (PRODUCT L6): stops the sandbox and discards its guest state.
//! Idempotent (an absent sandbox is success), bounded (TERM, bounded wait, KILL), ownership
//! checked before any signal, and nothing of the sandbox is left: processes, mounts (they live
//! in its mount namespace), the control socket, the cgroup, its directories.

use airlock_core::lifecycle::{self, Health};
use clap::Args;

use airlock_host::lifecycle::{human_bytes, lifecycle_error, lock_wait};

use super::Report;
use crate::context::{resolve_name, setup, Context};
use crate::error::HostError;
use crate::output::{Doc, Style};

#[derive(Args, Debug)]
pub struct DownArgs {
    /// The sandbox to stop instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
}

pub fn run(args: DownArgs, ctx: &Context) -> Result<Report, HostError> {
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let setup = setup(ctx, true)?;
    let out = lifecycle::down(&setup.stores, &setup.backend, &name, lock_wait())
        .map_err(lifecycle_error)?;
    let mut doc = Doc::new();
    let line = match out.was {
        Health::Absent => format!("no sandbox {name}; nothing to do"),
        was => format!(
            "removed sandbox {name} (was {was}; {} freed{})",
            human_bytes(out.freed.bytes),
            if out.killed {
                "; it had to be killed"
            } else {
                ""
            }
        ),
    };
    doc.text(0, &[(Style::Plain, &line)]);
    // Clone-mode workspaces: keep a clone the host has not fetched everything from (A5).
    let fates = airlock_host::agents::clone::after_down(&ctx.roots()?, name.as_str());
    let clones: Vec<String> = fates.iter().map(|f| f.message(name.as_str())).collect();
    for line in &clones {
        doc.text(0, &[(Style::Plain, line)]);
    }
    let json = serde_json::json!({
        "clones": clones,
        "name": name.as_str(),
        "was": out.was,
        "killed": out.killed,
        "freed_bytes": out.freed.bytes,
        "removed": out.freed.removed,
    });
    let mut report = Report::new(doc, json);
    if let Some(op) = &out.interrupted {
        report.note(format!(
            "note: an earlier `{}` (pid {}) died during phase {}; it was marked interrupted",
            op.kind.as_str(),
            op.process.pid,
            op.phase
        ));
    }
    Ok(report)
}
