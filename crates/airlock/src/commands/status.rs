//! `airlock status [--name NAME] [--json]` (PRODUCT L5): the sandbox's health, proven from the
//! processes themselves, separately from its latest operation. Read-only: takes no lock and
//! creates nothing. Exit 0 only for `ready`. A ready sandbox's sessions are listed too (asking
//! its PID 1, bounded in time).

use airlock_core::lifecycle::{self, Health, StatusReport};
use airlock_core::records::utc_text;
use airlock_protocol::SessionInfo;
use clap::Args;

use airlock_host::lifecycle::{human_bytes, lifecycle_error};

use super::Report;
use crate::context::{resolve_name, setup, Context};
use crate::error::{ErrorKind, HostError};
use crate::output::{path_text, Doc, Style};
use crate::session_view;
use crate::status_json::to_json;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The sandbox to report on instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
}

pub fn run(args: StatusArgs, ctx: &Context) -> Result<Report, HostError> {
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let setup = setup(ctx, false)?;
    let report =
        lifecycle::status(&setup.stores, &setup.backend, &name).map_err(lifecycle_error)?;
    let sessions = sessions_of(&setup, &report);
    let doc = render(&report, &sessions);
    let mut json = to_json(&report);
    json["sessions"] = match &sessions {
        Some(Ok(list)) => list.iter().map(session_view::json).collect(),
        Some(Err(_)) | None => serde_json::Value::Null,
    };
    let out = Report::new(doc, json);
    Ok(match report.health {
        Health::Ready => out,
        health => out.with_failure(
            HostError::new(
                ErrorKind::Failed,
                "status.not_ready",
                format!("sandbox {name} is {health}"),
            )
            .with_hint(format!("next: {}", report.next)),
        ),
    })
}

/// The sessions of a ready sandbox (L5); `None` when it is not ready.
fn sessions_of(
    host: &airlock_host::Host,
    report: &StatusReport,
) -> Option<Result<Vec<SessionInfo>, HostError>> {
    let record = report
        .record
        .as_ref()
        .filter(|_| report.health == Health::Ready)?;
    Some(airlock_host::sessions::list(host, record))
}

fn render_sessions(doc: &mut Doc, sessions: &Option<Result<Vec<SessionInfo>, HostError>>) {
    let Some(sessions) = sessions else { return };
    doc.heading("Sessions");
    match sessions {
        Ok(list) if list.is_empty() => {
            doc.text(1, &[(Style::Dim, "none")]);
        }
        Ok(list) => {
            for info in list {
                doc.text(1, &[(Style::Plain, &session_view::line(info))]);
            }
        }
        Err(e) => {
            doc.text(
                1,
                &[(Style::Warn, &format!("cannot list the sessions: {e}"))],
            );
        }
    }
}

fn health_style(h: Health) -> Style {
    match h {
        Health::Ready => Style::Good,
        Health::Starting | Health::Absent => Style::Warn,
        Health::Stopped | Health::Failed | Health::Stale => Style::Bad,
    }
}

fn render(r: &StatusReport, sessions: &Option<Result<Vec<SessionInfo>, HostError>>) -> Doc {
    let mut doc = Doc::new();
    doc.heading("Sandbox");
    doc.field(1, "name", r.name.as_str());
    doc.styled_field(1, "health", &[(health_style(r.health), r.health.as_str())]);
    if let Some(rec) = &r.record {
        doc.field(1, "epoch", &rec.epoch.display());
        let guest = rec
            .guest
            .as_ref()
            .map_or_else(|| "none".to_owned(), |g| g.pid.to_string());
        doc.field(1, "guest pid", &guest);
        doc.field(1, "project", &path_text(&rec.project_root));
        doc.field(1, "backend", &rec.backend);
        doc.field(1, "image", &rec.plan.image);
        if let Some(bytes) = r.inspection.as_ref().and_then(|i| i.disk_bytes) {
            doc.field(1, "disk", &human_bytes(bytes));
        }
        doc.heading("Mappings");
        for m in rec.plan.workspaces.iter().chain(rec.plan.mounts.iter()) {
            let mode = if m.writable {
                "read-write"
            } else {
                "read-only"
            };
            doc.field(
                1,
                &path_text(&m.sandbox),
                &format!("{} ({mode})", path_text(&m.host)),
            );
        }
    }
    let ports = crate::status_json::published(r);
    if !ports.is_empty() {
        doc.heading("Ports");
        for f in &ports {
            doc.field(
                1,
                &format!("127.0.0.1:{}", f.host),
                &format!("sandbox port {}", f.guest),
            );
        }
    }
    if let Some(op) = &r.operation {
        doc.heading("Operation");
        doc.field(1, "kind", op.kind.as_str());
        doc.field(1, "started", &utc_text(op.started_ms));
        doc.field(1, "phase", &op.phase);
        doc.field(1, "result", op.result.as_str());
        let timings: Vec<String> = op
            .timings
            .iter()
            .map(|(k, v)| format!("{k} {v} ms"))
            .collect();
        doc.field(1, "timings", &timings.join(", "));
    }
    render_sessions(&mut doc, sessions);
    if !r.warnings.is_empty() {
        doc.heading("Warnings");
        for w in &r.warnings {
            doc.text(1, &[(Style::Warn, w)]);
        }
    }
    doc.heading("Next");
    doc.text(1, &[(Style::Plain, &r.next)]);
    doc
}
