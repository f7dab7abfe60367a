//! `airlock doctor`: what this host offers the `linux` backend (PRODUCT §2, issue 2 item 11).
//!
//! The probes live in `airlock_linux::doctor` (they run in forked children and change nothing)
//! and, for the `vm` backend's optional lines, `airlock_vm::doctor` (reads only);
//! this verb renders one line per check — status, what was found, and the exact fix for what
//! is missing — and exits 0 when every required check passes, 69 otherwise.

use airlock_linux::doctor::{probe_host, runtime_root_check, Check, Status};
use clap::Args;

use super::Report;
use crate::context::Context;
use crate::error::{ErrorKind, HostError};
use crate::output::{Doc, Style};

#[derive(Args, Debug)]
pub struct DoctorArgs {}

pub fn run(_args: DoctorArgs, ctx: &Context) -> Result<Report, HostError> {
    let mut checks = probe_host();
    let user = ctx
        .var(airlock_config::env_vars::USER)
        .map(|u| u.to_string_lossy().into_owned())
        .unwrap_or_else(|| "$USER".to_owned());
    // Optional lines: a host whose roots cannot be resolved still gets the linux checks.
    if let Ok(roots) = ctx.roots() {
        checks.push(runtime_root_check(&roots.runtime));
        checks.extend(airlock_vm::doctor::checks(&roots.cache, &user));
    }
    Ok(report(checks))
}

/// Renders checks and decides the outcome (separate from probing so it can be tested).
fn report(checks: Vec<Check>) -> Report {
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.required && c.status != Status::Ok)
        .map(|c| c.id)
        .collect();
    let mut doc = Doc::new();
    doc.heading("Host checks");
    for c in &checks {
        line(&mut doc, c);
    }
    doc.heading("Result");
    if failed.is_empty() {
        doc.text(
            1,
            &[(Style::Good, "ready: this host can run airlock sandboxes")],
        );
    } else {
        doc.text(
            1,
            &[(
                Style::Bad,
                &format!("not ready: {} required check(s) failed", failed.len()),
            )],
        );
    }
    let json = serde_json::json!({ "ready": failed.is_empty(), "checks": checks });
    let report = Report::new(doc, json);
    if failed.is_empty() {
        return report;
    }
    report.with_failure(
        HostError::new(
            ErrorKind::BackendUnavailable,
            "backend.unavailable",
            format!("this host lacks what sandboxes need: {}", failed.join(", ")),
        )
        .with_hint("apply the fix shown on each failed line, then run `airlock doctor` again"),
    )
}

/// `status  title: detail; fix: …` on one line.
fn line(doc: &mut Doc, c: &Check) {
    let (label, style) = match (c.status, c.required) {
        (Status::Ok, _) => ("ok      ", Style::Good),
        (Status::Missing, true) => ("missing ", Style::Bad),
        (Status::Missing, false) => ("optional", Style::Warn),
        (Status::Warning, _) => ("warning ", Style::Warn),
        (Status::Unused, _) => ("unused  ", Style::Dim),
    };
    let mut spans = vec![
        (style, label.to_owned()),
        (Style::Plain, format!("  {}: {}", c.title, c.detail)),
    ];
    if let (Some(fix), Status::Missing | Status::Warning) = (&c.fix, c.status) {
        spans.push((Style::Warn, format!("; fix: {fix}")));
    }
    let spans: Vec<(Style, &str)> = spans.iter().map(|(s, t)| (*s, t.as_str())).collect();
    doc.text(1, &spans);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code;

    fn check(id: &'static str, status: Status, required: bool) -> Check {
        Check {
            id,
            title: id,
            status,
            required,
            detail: "found".to_owned(),
            fix: (status != Status::Ok).then(|| format!("fix {id}")),
        }
    }

    #[test]
    fn all_required_checks_ok_means_ready_even_with_optional_warnings() {
        let r = report(vec![
            check("userns", Status::Ok, true),
            check("subids", Status::Warning, false),
        ]);
        assert!(r.failure.is_none());
        assert_eq!(r.json["ready"], true);
    }

    #[test]
    fn a_missing_required_check_exits_69_and_names_it() {
        let r = report(vec![
            check("userns", Status::Missing, true),
            check("seccomp", Status::Ok, true),
        ]);
        let failure = r.failure.expect("doctor must fail");
        assert_eq!(exit_code(failure.kind), 69);
        assert!(failure.message.contains("userns"), "{}", failure.message);
        assert_eq!(r.json["ready"], false);
    }

    #[test]
    fn every_failed_check_prints_its_fix_on_its_line() {
        let r = report(vec![check("overlay", Status::Missing, true)]);
        let text = r.doc.render(false);
        let line = text.lines().find(|l| l.contains("overlay")).unwrap();
        assert!(
            line.contains("missing") && line.contains("fix: fix overlay"),
            "{line}"
        );
    }

    #[test]
    fn an_unused_check_is_labelled_unused_without_a_fix_and_does_not_fail() {
        let mut c = check("cgroup_v2", Status::Unused, false);
        c.fix = Some("enable v2".to_owned());
        let r = report(vec![c]);
        assert!(r.failure.is_none());
        let text = r.doc.render(false);
        let line = text.lines().find(|l| l.contains("cgroup_v2")).unwrap();
        assert!(line.trim_start().starts_with("unused "), "{line}");
        assert!(!line.contains("fix:"), "{line}");
    }

    #[test]
    fn a_hostile_detail_cannot_drive_the_terminal() {
        let mut c = check("x", Status::Missing, true);
        c.detail = "\x1b[2Jgone".to_owned();
        let text = report(vec![c]).doc.render(false);
        assert!(!text.contains('\x1b'), "{text:?}");
    }
}
