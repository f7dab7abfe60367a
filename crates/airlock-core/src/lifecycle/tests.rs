use std::path::PathBuf;

use super::*;
use crate::records::{MappingSummary, PlanSummary};

fn plan() -> PlanSummary {
    PlanSummary {
        image: "host".into(),
        workspaces: vec![MappingSummary {
            host: "/p".into(),
            sandbox: "/p".into(),
            writable: true,
        }],
        mounts: vec![MappingSummary {
            host: "/data".into(),
            sandbox: "/data".into(),
            writable: false,
        }],
        home: PathBuf::from("/home/u"),
        memory_mb: Some(8192),
        pids_max: Some(4096),
        cpus: None,
    }
}

#[test]
fn identical_plans_have_no_differences() {
    assert!(diff_plans(&plan(), &plan()).is_empty());
}

#[test]
fn a_mount_made_writable_is_named_as_that_mount() {
    let mut changed = plan();
    changed.mounts[0].writable = true;
    let diffs = diff_plans(&plan(), &changed);
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].field, "mount /data");
    assert!(diffs[0].recorded.contains("read-only"));
    assert!(diffs[0].planned.contains("read-write"));
}

#[test]
fn added_removed_mounts_and_limits_each_count() {
    let mut changed = plan();
    changed.mounts.clear();
    changed.mounts.push(MappingSummary {
        host: "/other".into(),
        sandbox: "/other".into(),
        writable: false,
    });
    changed.memory_mb = Some(512);
    let fields: Vec<String> = diff_plans(&plan(), &changed)
        .into_iter()
        .map(|d| d.field)
        .collect();
    assert_eq!(fields, ["memory_mb", "mount /data", "mount /other"]);
}

#[test]
fn no_record_is_absent() {
    assert_eq!(assess(None, None, None), Health::Absent);
}
