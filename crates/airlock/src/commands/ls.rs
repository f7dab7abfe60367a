//! `airlock ls [--json]`: every sandbox this user owns, one line each: name, health (proven,
//! as in `status`), project, age, disk use (R4). A sandbox whose record does not parse is
//! listed as `corrupt` with its file, and the rest still listed. Read-only.

use std::path::Path;

use airlock_core::lifecycle::{self, Listed};
use airlock_core::names::SandboxName;
use airlock_core::records::now_ms;
use clap::Args;

use airlock_host::lifecycle::{human_bytes, lifecycle_error};

use super::Report;
use crate::context::{setup, Context};
use crate::error::HostError;
use crate::output::{path_text, Doc, Style};

#[derive(Args, Debug)]
pub struct LsArgs {}

pub fn run(_args: LsArgs, ctx: &Context) -> Result<Report, HostError> {
    let setup = setup(ctx, false)?;
    let mut doc = Doc::new();
    let mut items = Vec::new();
    let listed = lifecycle::list(&setup.stores, &setup.backend).map_err(lifecycle_error)?;
    if listed.is_empty() {
        doc.text(0, &[(Style::Dim, "no sandboxes")]);
    }
    for entry in listed {
        let r = match entry {
            Listed::Sandbox(r) => r,
            Listed::Corrupt { name, path, detail } => {
                corrupt(&mut doc, &name, &path);
                items.push(serde_json::json!({
                    "name": name,
                    "health": "corrupt",
                    "file": path,
                    "detail": detail,
                }));
                continue;
            }
        };
        let name = &r.name;
        let (project, age) = r
            .record
            .as_ref()
            .map_or((String::new(), String::new()), |rec| {
                let secs = now_ms().saturating_sub(rec.created_ms) / 1000;
                (path_text(&rec.project_root), age_text(secs))
            });
        let disk = r
            .inspection
            .as_ref()
            .and_then(|i| i.disk_bytes)
            .map_or_else(|| "-".to_owned(), human_bytes);
        doc.text(
            0,
            &[
                (Style::Plain, name.as_str()),
                (Style::Plain, "  "),
                (Style::Plain, r.health.as_str()),
                (Style::Plain, &format!("  {project}  {age}  {disk}")),
            ],
        );
        items.push(crate::status_json::to_json(&r));
    }
    Ok(Report::new(doc, serde_json::json!({ "sandboxes": items })))
}

/// A sandbox whose record does not parse: named with its file, so the rest still lists.
fn corrupt(doc: &mut Doc, name: &SandboxName, path: &Path) {
    doc.text(
        0,
        &[
            (Style::Plain, name.as_str()),
            (Style::Plain, "  "),
            (Style::Warn, "corrupt"),
            (Style::Plain, &format!("  {}", path_text(path))),
            (
                Style::Dim,
                "  (not a valid record: inspect or remove that file)",
            ),
        ],
    );
}

fn age_text(secs: u64) -> String {
    match secs {
        s if s >= 86400 => format!("{}d", s / 86400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
