//! What `up` would do with the project's sandbox, for the "Running sandbox" section of `plan`
//! (PRODUCT §2, L1): the verdict and every field in which the running sandbox differs from
//! the plan.
//!
//! Read-only, like the rest of `plan`: the lifecycle roots are only verified (never created),
//! no lock is taken, and health comes from `airlock_core::lifecycle::status`, which proves
//! processes without touching them. The planned summary is built exactly as `up` builds it
//! (`run::build_spec` → `egress::attach` → `provision::attach_host_environment` →
//! `lifecycle::plan_summary`) and compared with the record's
//! summary by `diff_plans`, the same comparison `up` refuses with, so `plan` and `up` cannot
//! disagree about what differs.
//!
//! Order: no project → nothing to compare; roots or records unreadable → say why (plan still
//! succeeds: the configuration itself is valid); no record → absent; otherwise health decides:
//! `ready` → reuse (no differences) or refuse (the differences); `starting` → another `up` is
//! creating it; `stopped`/`failed`/`stale` → `up` cleans it up and creates a new one.

use airlock_config::Effective;
use airlock_core::lifecycle::{self, diff_plans, Health, PlanDifference};
use airlock_core::names::SandboxName;
use serde::Serialize;

use airlock_config::Roots;

use crate::error::HostError;
use crate::lifecycle::{lifecycle_error, plan_summary, Host};

/// What `up` would do with the sandbox this plan describes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// `plan` ran outside any project: there is no sandbox name to look up.
    NoProject,
    /// No sandbox exists; `up` would create one.
    Absent,
    /// A ready sandbox built from exactly this plan; `up` would reuse it.
    Reuse,
    /// A ready sandbox built from a different plan; `up` would refuse.
    Refuse,
    /// Another `up` is creating it right now.
    Starting,
    /// What is left of a sandbox that is not running; `up` would clean it up and create anew.
    Replace,
    /// The comparison could not be made (unreadable state, or a spec `up` would reject).
    Unknown,
}

/// The section as data: printed by `plan`, embedded in its `--json` as `running_sandbox`.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub name: Option<String>,
    pub health: Option<Health>,
    pub verdict: Verdict,
    /// Every field the running sandbox differs in (recorded → planned); empty unless `refuse`.
    pub differences: Vec<PlanDifference>,
    /// Why the comparison is `unknown`.
    pub detail: Option<String>,
}

impl Comparison {
    fn of(name: Option<&SandboxName>, health: Option<Health>, verdict: Verdict) -> Comparison {
        Comparison {
            name: name.map(|n| n.as_str().to_owned()),
            health,
            verdict,
            differences: Vec::new(),
            detail: None,
        }
    }
}

/// Compares the plan with the project's sandbox, changing nothing.
pub fn compare(roots: &Roots, effective: &Effective) -> Comparison {
    let Some(project) = effective.project.as_ref() else {
        return Comparison::of(None, None, Verdict::NoProject);
    };
    let name = SandboxName::for_project(&project.root);
    match compare_named(roots, effective, &name) {
        Ok(c) => c,
        Err(e) => Comparison {
            detail: Some(e.message),
            ..Comparison::of(Some(&name), None, Verdict::Unknown)
        },
    }
}

fn compare_named(
    roots: &Roots,
    effective: &Effective,
    name: &SandboxName,
) -> Result<Comparison, HostError> {
    let setup = Host::open(roots, false)?;
    let report = lifecycle::status(&setup.stores, &setup.backend, name).map_err(lifecycle_error)?;
    let health = report.health;
    let verdict = match health {
        Health::Absent => Verdict::Absent,
        Health::Starting => Verdict::Starting,
        Health::Stopped | Health::Failed | Health::Stale => Verdict::Replace,
        Health::Ready => Verdict::Reuse,
    };
    let mut out = Comparison::of(Some(name), Some(health), verdict);
    let Some(record) = report.record.filter(|_| health == Health::Ready) else {
        return Ok(out);
    };
    let mut spec = crate::run::build_spec(effective, false)?;
    crate::egress::attach(&mut spec, &effective.network, &roots.data)?;
    crate::agents::extend_spec(effective, roots, name.as_str(), &mut spec);
    // The package cache's path without creating it (`up` creates it): plan changes nothing.
    if let Ok(cache) = crate::provision::cache_dir(roots, effective) {
        crate::provision::attach_host_environment(&mut spec, effective, &cache);
    }
    let planned = plan_summary(&spec);
    out.differences = diff_plans(&record.plan, &planned);
    if !out.differences.is_empty() {
        out.verdict = Verdict::Refuse;
    }
    Ok(out)
}
