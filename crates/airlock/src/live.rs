//! Applying a change of the network policy or the secrets to the running sandboxes, for the
//! verbs that make one (`policy allow|deny`, `secret set|rm`), and saying per sandbox whether it
//! happened — never an assumed success.

use airlock_config::Roots;
use airlock_host::config::running_sandboxes;
use airlock_host::egress::reload::reload_running;

use crate::commands::Report;

/// Applies a change of `what` (policy, secrets) to every running sandbox and adds the outcome to
/// `report`: a note per sandbox that could not apply it, `applied_live` (true only when every
/// running sandbox applied it) and `running_sandboxes`.
pub fn apply_live(roots: &Roots, what: &str, changed: bool, report: &mut Report) {
    let running = running_sandboxes(roots);
    let outcomes = if changed {
        reload_running(&running)
    } else {
        Vec::new()
    };
    let mut applied = Vec::new();
    for o in &outcomes {
        match &o.result {
            Ok(()) => applied.push(o.name.as_str()),
            Err(reason) => report.note(format!(
                "sandbox {} still enforces the previous {what}: {reason} \
                 (`airlock down`, then `airlock up`, restarts it)",
                o.name.as_str()
            )),
        }
    }
    if !applied.is_empty() {
        report.note(format!(
            "applied to the running sandboxes without restart: {}",
            applied.join(", ")
        ));
    }
    report.json["running_sandboxes"] =
        serde_json::json!(running.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>());
    report.json["applied_live"] =
        serde_json::Value::Bool(!outcomes.is_empty() && outcomes.iter().all(|o| o.result.is_ok()));
}
