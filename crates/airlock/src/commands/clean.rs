//! `airlock clean` (PRODUCT L9, R2, R4): removes the state of every inactive sandbox whose
//! ownership can be proven, and the state directories of `airlock run`s whose process is
//! provably gone (the sweep `airlock_host::Host::open` runs for every mutating lifecycle verb,
//! see `airlock_host::lifecycle::runs`); reports what it freed, and lists what it left (running or
//! busy sandboxes, live runs, paths without a matching ownership marker). It never touches a
//! ready sandbox or a live run.

use airlock_core::lifecycle;
use clap::Args;

use airlock_host::lifecycle::{human_bytes, lifecycle_error};

use super::Report;
use crate::context::{setup, Context};
use crate::error::HostError;
use crate::output::{path_text, Doc, Style};

#[derive(Args, Debug)]
pub struct CleanArgs {}

pub fn run(_args: CleanArgs, ctx: &Context) -> Result<Report, HostError> {
    let setup = setup(ctx, true)?;
    let out = lifecycle::clean(&setup.stores, &setup.backend).map_err(lifecycle_error)?;
    let runs = &setup.runs;
    let mut doc = Doc::new();
    let total: u64 = out.cleaned.iter().map(|(_, _, f)| f.bytes).sum::<u64>()
        + runs.removed.iter().map(|r| r.bytes).sum::<u64>();
    doc.heading("Freed");
    if out.cleaned.is_empty() && runs.removed.is_empty() {
        doc.text(1, &[(Style::Dim, "nothing to clean")]);
    }
    for (name, health, freed) in &out.cleaned {
        doc.field(
            1,
            name.as_str(),
            &format!("{health}, {}", human_bytes(freed.bytes)),
        );
    }
    for r in &runs.removed {
        doc.field(
            1,
            &format!("run {}", r.id),
            &format!("finished, {}", human_bytes(r.bytes)),
        );
    }
    doc.field(1, "total", &human_bytes(total));
    // Private clones of sandboxes that are gone: removed once fully fetched (A5).
    let live: Vec<String> = airlock_host::agents::clone::sandboxes_with_clones(&ctx.roots()?)
        .into_iter()
        .filter(|n| {
            airlock_core::names::SandboxName::parse(n)
                .map(|name| setup.paths(&name).state_dir.exists())
                .unwrap_or(true)
        })
        .collect();
    let clones: Vec<String> = airlock_host::agents::clone::sweep(&ctx.roots()?, &live)
        .iter()
        .map(|(sandbox, fate)| fate.message(sandbox))
        .collect();
    if !clones.is_empty() {
        doc.heading("Clones");
        for line in &clones {
            doc.text(1, &[(Style::Plain, line)]);
        }
    }
    let unmanaged = out.unmanaged.iter().chain(runs.unmanaged.iter());
    if !out.skipped.is_empty() || !runs.live.is_empty() || unmanaged.clone().next().is_some() {
        doc.heading("Left alone");
        for (name, why) in &out.skipped {
            doc.field(1, name.as_str(), why);
        }
        for (id, pid) in &runs.live {
            doc.field(1, &format!("run {id}"), &format!("running (pid {pid})"));
        }
        for (path, why) in unmanaged.clone() {
            doc.field(1, &path_text(path), &format!("unmanaged: {why}"));
        }
    }
    let json = serde_json::json!({
        "clones": clones,
        "freed_bytes": total,
        "cleaned": out.cleaned.iter().map(|(n, h, f)| serde_json::json!({
            "name": n.as_str(), "health": h, "freed_bytes": f.bytes, "removed": f.removed,
        })).collect::<Vec<_>>(),
        "runs": runs.removed.iter().map(|r| serde_json::json!({
            "id": r.id, "path": r.path, "freed_bytes": r.bytes,
        })).collect::<Vec<_>>(),
        "skipped": out.skipped.iter().map(|(n, why)| serde_json::json!({
            "name": n.as_str(), "reason": why,
        })).chain(runs.live.iter().map(|(id, pid)| serde_json::json!({
            "run": id, "reason": format!("running (pid {pid})"),
        }))).collect::<Vec<_>>(),
        "unmanaged": unmanaged.map(|(p, why)| serde_json::json!({
            "path": p, "reason": why,
        })).collect::<Vec<_>>(),
    });
    Ok(Report::new(doc, json))
}
