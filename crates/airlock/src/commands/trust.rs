//! `airlock trust` / `airlock untrust` (PRODUCT C6).
//!
//! Trust is keyed by the project's canonical root and the SHA-256 of the bytes of its
//! `.airlock/config.toml` as read here; editing the file afterwards makes it untrusted again.
//! `trust` refuses a config that does not validate (trusting it could not widen anything and
//! would hide the errors). `untrust` of a project that is not trusted changes nothing and says
//! so.

use std::path::Path;

use airlock_config::effective::LoadedFile;
use airlock_core::TrustStore;
use clap::Args;

use super::Report;
use crate::context::{active_project, Context};
use crate::error::{ErrorKind, HostError};
use crate::output::{path_text, Doc, Style};
use airlock_host::paths::ensure_root;

#[derive(Args, Debug)]
pub struct TrustArgs {}

#[derive(Args, Debug)]
pub struct UntrustArgs {}

pub fn run_trust(_args: TrustArgs, ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let project = active_project(ctx)?;
    // Validate first: errors are reported (exit 2) and nothing is recorded. The digest trusted
    // is the one of the bytes that were validated.
    let effective =
        airlock_host::config::load_effective(&roots, Some(project.clone()), None, &mut Vec::new())?;
    let sha256 = match effective.files.project {
        Some(LoadedFile {
            present: true,
            sha256: Some(sha256),
            ..
        }) => sha256,
        Some(_) | None => return Err(no_config(&project.config_path)),
    };
    ensure_root(&roots, &roots.state)?;
    let entry = TrustStore::open(&roots.state)?.trust(&project.root, &sha256)?;
    let mut doc = Doc::new();
    doc.heading("Trusted")
        .field(1, "project", &path_text(&entry.root))
        .field(1, "config", &path_text(&project.config_path))
        .field(1, "sha256", &entry.config_sha256);
    for i in effective.ignored.iter().chain(&effective.network.ignored) {
        doc.field(1, "now applies", &format!("{} = {}", i.key, i.value));
    }
    doc.text(
        1,
        &[(
            Style::Dim,
            "its network rules may now widen the policy; editing the file revokes trust",
        )],
    );
    let json = serde_json::json!({
        "trusted": true,
        "project": entry.root,
        "config": project.config_path,
        "config_sha256": entry.config_sha256,
        "now_applies": effective.ignored.iter().chain(&effective.network.ignored).collect::<Vec<_>>(),
    });
    Ok(Report::new(doc, json))
}

pub fn run_untrust(_args: UntrustArgs, ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let project = active_project(ctx)?;
    let project = project.root;
    let was_trusted = TrustStore::open(&roots.state)?.untrust(&project)?;
    let mut doc = Doc::new();
    if was_trusted {
        doc.heading("Untrusted")
            .field(1, "project", &path_text(&project));
        doc.text(
            1,
            &[(
                Style::Dim,
                "its config may only tighten the network policy again",
            )],
        );
    } else {
        doc.heading("Not trusted")
            .field(1, "project", &path_text(&project));
        doc.text(1, &[(Style::Dim, "nothing changed")]);
    }
    let json = serde_json::json!({
        "project": project,
        "was_trusted": was_trusted,
        "trusted": false,
    });
    Ok(Report::new(doc, json))
}

fn no_config(path: &Path) -> HostError {
    HostError::new(
        ErrorKind::Config,
        "project.no_config",
        format!(
            "{} does not exist, so there is nothing to trust",
            path.display()
        ),
    )
    .with_hint("create it with `airlock init`")
}
