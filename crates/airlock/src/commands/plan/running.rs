//! The "Running sandbox" section of `plan`: what `up` would do with the project's sandbox
//! (decided by `airlock_host::lifecycle::compare`), and every field that differs.

use airlock_host::lifecycle::compare::{Comparison, Verdict};

use crate::output::{Doc, Style};

/// The human section, after the rest of the plan.
pub fn render(doc: &mut Doc, c: &Comparison) {
    doc.heading("Running sandbox");
    if let Some(name) = &c.name {
        doc.field(1, "name", name);
    }
    if let Some(health) = c.health {
        doc.field(1, "health", health.as_str());
    }
    let (style, line) = match c.verdict {
        Verdict::NoProject => (Style::Dim, "none (no project, so no sandbox to compare)"),
        Verdict::Absent => (Style::Dim, "none; `airlock up` would create it"),
        Verdict::Reuse => (
            Style::Good,
            "built from this exact plan; `airlock up` would reuse it",
        ),
        Verdict::Refuse => (
            Style::Warn,
            "built from a different plan; `airlock up` would refuse: run `airlock down` first",
        ),
        Verdict::Starting => (
            Style::Warn,
            "another `airlock up` is creating it; compare again when it is ready",
        ),
        Verdict::Replace => (
            Style::Warn,
            "not running; `airlock up` would clean up what is left and create it anew",
        ),
        Verdict::Unknown => (Style::Bad, "cannot compare with the running sandbox"),
    };
    doc.text(1, &[(style, line)]);
    if let Some(detail) = &c.detail {
        doc.field(1, "reason", detail);
    }
    for d in &c.differences {
        doc.field(
            2,
            &d.field,
            &format!("running {} -> planned {}", d.recorded, d.planned),
        );
    }
}
