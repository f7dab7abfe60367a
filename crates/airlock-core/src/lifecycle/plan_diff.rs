//! L1: which fields of the plan differ from what a running sandbox was built from.
//!
//! Mappings are keyed by their path inside the sandbox, so a changed host path, a changed
//! writability, an added and a removed mapping are each one named difference. Host paths are
//! canonical in both plans, so two spellings of one directory compare equal.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::records::{MappingSummary, PlanSummary};

/// One differing field: its name, what the sandbox has, what the plan wants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanDifference {
    pub field: String,
    pub recorded: String,
    pub planned: String,
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

/// Every difference between the recorded plan and the current one, in a stable order.
pub fn diff_plans(recorded: &PlanSummary, planned: &PlanSummary) -> Vec<PlanDifference> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            out.push(PlanDifference {
                field: name.to_owned(),
                recorded: a,
                planned: b,
            });
        }
    };
    field("image", recorded.image.clone(), planned.image.clone());
    field(
        "home",
        recorded.home.display().to_string(),
        planned.home.display().to_string(),
    );
    field("memory_mb", opt(recorded.memory_mb), opt(planned.memory_mb));
    field("pids_max", opt(recorded.pids_max), opt(planned.pids_max));
    field("cpus", opt(recorded.cpus), opt(planned.cpus));
    diff_mappings(
        "workspace",
        &recorded.workspaces,
        &planned.workspaces,
        &mut out,
    );
    diff_mappings("mount", &recorded.mounts, &planned.mounts, &mut out);
    out
}

fn describe(m: Option<&MappingSummary>) -> String {
    match m {
        None => "absent".to_owned(),
        Some(m) => format!(
            "{} ({})",
            m.host.display(),
            if m.writable {
                "read-write"
            } else {
                "read-only"
            }
        ),
    }
}

fn diff_mappings(
    kind: &str,
    recorded: &[MappingSummary],
    planned: &[MappingSummary],
    out: &mut Vec<PlanDifference>,
) {
    let index = |list: &[MappingSummary]| -> BTreeMap<PathBuf, MappingSummary> {
        list.iter()
            .map(|m| (m.sandbox.clone(), m.clone()))
            .collect()
    };
    let (a, b) = (index(recorded), index(planned));
    let mut keys: Vec<&PathBuf> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let (x, y) = (a.get(key), b.get(key));
        if x != y {
            out.push(PlanDifference {
                field: format!("{kind} {}", key.display()),
                recorded: describe(x),
                planned: describe(y),
            });
        }
    }
}
