//! `airlock plan [--memory-mb N]`: validates everything and shows what `up` would build.
//!
//! Invariant: `plan` creates, changes and locks nothing, anywhere — not even airlock's own
//! roots. It only reads: the config files, the trust store (through
//! [`TrustStore::is_trusted`], which creates nothing) and directory metadata.
//!
//! Every independent configuration error is reported together (exit 2, each with file, key
//! path and line); otherwise the effective configuration is printed with the origin of every
//! value, the mappings with their in-sandbox paths, the network policy (with each project rule
//! ignored because the project is untrusted), the secrets (names, bound hosts and header names,
//! never values; read from the store only if it exists), agents and provisioning steps with
//! their owners.
//! Last comes the comparison with the project's running sandbox (`airlock_host::lifecycle::compare`): what `up` would
//! do with it and every field that differs (JSON: `running_sandbox`).

mod render;
mod running;

use airlock_secrets::SecretStore;
use clap::Args;

use super::Report;
use crate::context::{discover_project, Context};
use crate::error::HostError;
use airlock_host::config::load_effective;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// Memory limit in MiB for this run only (minimum 256); no file is rewritten
    #[arg(long, value_name = "N")]
    pub memory_mb: Option<u64>,
}

pub fn run(args: PlanArgs, ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let project = discover_project(ctx)?;
    let mut notes = Vec::new();
    let effective = load_effective(&roots, project, args.memory_mb, &mut notes)?;
    airlock_host::provision::check_packages(&effective)?;
    let secrets = match SecretStore::open_existing(&roots.data)? {
        Some(store) => store.list()?,
        None => Vec::new(),
    };
    let comparison = airlock_host::lifecycle::compare::compare(&roots, &effective);
    let encode = |e: serde_json::Error| {
        HostError::internal(
            "plan.encode",
            format!("cannot encode the plan as JSON: {e}"),
        )
    };
    let mut json = serde_json::to_value(&effective).map_err(encode)?;
    if let Some(doc) = json.as_object_mut() {
        let secrets: Vec<_> = secrets
            .iter()
            .map(|s| serde_json::json!({ "name": s.name, "hosts": s.hosts, "header": s.header }))
            .collect();
        doc.insert("secrets".to_owned(), serde_json::Value::Array(secrets));
        doc.insert(
            "running_sandbox".to_owned(),
            serde_json::to_value(&comparison).map_err(encode)?,
        );
    }
    let mut doc = render::render(&effective, &roots, &secrets);
    running::render(&mut doc, &comparison);
    let mut report = Report::new(doc, json);
    for n in notes {
        report.note(n);
    }
    Ok(report)
}
