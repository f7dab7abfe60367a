//! `airlock clean` (PRODUCT L9, R2): removes the state of every inactive sandbox whose ownership
//! can be proven, reports what it freed, and lists what it left (running or busy sandboxes,
//! paths without a matching ownership marker). It never touches a ready sandbox.

use airlock_core::lifecycle;
use clap::Args;

use super::lifecycle::{human_bytes, lifecycle_error, setup};
use super::Report;
use crate::context::Context;
use crate::error::CommandError;
use crate::output::{path_text, Doc, Style};

#[derive(Args, Debug)]
pub struct CleanArgs {}

pub fn run(_args: CleanArgs, ctx: &Context) -> Result<Report, CommandError> {
    let setup = setup(ctx, true)?;
    let out = lifecycle::clean(&setup.stores, &setup.backend).map_err(lifecycle_error)?;
    let mut doc = Doc::new();
    let total: u64 = out.cleaned.iter().map(|(_, _, f)| f.bytes).sum();
    doc.heading("Freed");
    if out.cleaned.is_empty() {
        doc.text(1, &[(Style::Dim, "nothing to clean")]);
    }
    for (name, health, freed) in &out.cleaned {
        doc.field(
            1,
            name.as_str(),
            &format!("{health}, {}", human_bytes(freed.bytes)),
        );
    }
    doc.field(1, "total", &human_bytes(total));
    if !out.skipped.is_empty() || !out.unmanaged.is_empty() {
        doc.heading("Left alone");
        for (name, why) in &out.skipped {
            doc.field(1, name.as_str(), why);
        }
        for (path, why) in &out.unmanaged {
            doc.field(1, &path_text(path), &format!("unmanaged: {why}"));
        }
    }
    let json = serde_json::json!({
        "freed_bytes": total,
        "cleaned": out.cleaned.iter().map(|(n, h, f)| serde_json::json!({
            "name": n.as_str(), "health": h, "freed_bytes": f.bytes, "removed": f.removed,
        })).collect::<Vec<_>>(),
        "skipped": out.skipped.iter().map(|(n, why)| serde_json::json!({
            "name": n.as_str(), "reason": why,
        })).collect::<Vec<_>>(),
        "unmanaged": out.unmanaged.iter().map(|(p, why)| serde_json::json!({
            "path": p, "reason": why,
        })).collect::<Vec<_>>(),
    });
    Ok(Report::new(doc, json))
}
