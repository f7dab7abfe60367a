//! The JSON document of a sandbox's status, shared by `status` and `ls` (one per sandbox).

use airlock_core::lifecycle::StatusReport;
use airlock_core::records::utc_text;

/// The JSON document of one sandbox's status; `health`, `epoch`, `guest`, `operation` are top
/// level (issue 4).
pub fn to_json(r: &StatusReport) -> serde_json::Value {
    let rec = r.record.as_ref();
    serde_json::json!({
        "name": r.name.as_str(),
        "health": r.health,
        "epoch": rec.map(|x| x.epoch.display()),
        "guest": { "pid": rec.and_then(|x| x.guest.as_ref()).map(|g| g.pid) },
        "keeper": { "pid": rec.and_then(|x| x.keeper.as_ref()).map(|g| g.pid) },
        "project": rec.map(|x| x.project_root.clone()),
        "backend": rec.map(|x| x.backend.clone()),
        "image": rec.map(|x| x.plan.image.clone()),
        "mappings": rec.map(|x| serde_json::json!({
            "workspaces": x.plan.workspaces,
            "mounts": x.plan.mounts,
            "home": x.plan.home,
        })),
        "created_ms": rec.map(|x| x.created_ms),
        "disk_bytes": r.inspection.as_ref().and_then(|i| i.disk_bytes),
        "operation": r.operation.as_ref().map(|op| serde_json::json!({
            "kind": op.kind,
            "started": utc_text(op.started_ms),
            "started_ms": op.started_ms,
            "finished_ms": op.finished_ms,
            "phase": op.phase,
            "result": op.result.as_str(),
            "timings": op.timings,
            "pid": op.process.pid,
        })),
        "ports": ports_json(&published(r)),
        "warnings": r.warnings,
        "next": r.next,
    })
}

/// The ports a ready sandbox's keeper has published (none unless ready: a dead keeper's table
/// is stale).
pub fn published(r: &StatusReport) -> Vec<airlock_host::wire::Forward> {
    match (&r.record, r.health) {
        (Some(rec), airlock_core::lifecycle::Health::Ready) => {
            airlock_host::lifecycle::ports::read_published(&rec.paths.state_dir)
        }
        _ => Vec::new(),
    }
}

/// Published ports as JSON objects (`status`, `ls`, `ports`).
pub fn ports_json(forwards: &[airlock_host::wire::Forward]) -> serde_json::Value {
    forwards
        .iter()
        .map(|f| {
            serde_json::json!({
                "host": f.host,
                "guest": f.guest,
                "address": format!("127.0.0.1:{}", f.host),
            })
        })
        .collect()
}
