//! `airlock policy allow P` / `airlock policy deny P`: edit the user config's lists.
//!
//! Order of operations: parse P (a usage error exits 2 before anything is touched); create the
//! config root as a private directory; [`edit_user_rules`] (lock, validate the current file,
//! edit, validate the result as a whole, publish atomically); when the file was created from
//! the template, refresh the schema beside it like `airlock config` does; finally, for an exact
//! host, say how the effective policy now decides it (a wider deny, or a project deny, still
//! wins over a new allow: `airlock_host::egress::check::still_decided_against`).

use airlock_config::edit::{edit_user_rules, RuleChange, RuleEdit};
use airlock_config::policy::HostPattern;
use airlock_config::Action;
use clap::Args;

use super::super::Report;
use crate::context::Context;
use crate::error::{ErrorKind, HostError};
use crate::live::apply_live;
use crate::output::{path_text, Doc, Style};
use airlock_host::paths::ensure_root;

#[derive(Args, Debug)]
pub struct PatternArgs {
    /// Host pattern: `example.com`, `*.example.com` (one label), `**.example.com` (any depth),
    /// optionally `:PORT` (default ports 80 and 443)
    #[arg(value_name = "PATTERN")]
    pub pattern: String,
}

fn verb(action: Action) -> &'static str {
    match action {
        Action::Allow => "allow",
        Action::Deny => "deny",
    }
}

fn opposite(action: Action) -> Action {
    match action {
        Action::Allow => Action::Deny,
        Action::Deny => Action::Allow,
    }
}

pub fn run(action: Action, args: PatternArgs, ctx: &Context) -> Result<Report, HostError> {
    let pattern = HostPattern::parse(&args.pattern).map_err(|e| {
        HostError::new(ErrorKind::Usage, "policy.bad_pattern", e.to_string()).with_hint(
            "write `example.com`, `*.example.com` or `**.example.com`, optionally with `:PORT`",
        )
    })?;
    let roots = ctx.roots()?;
    ensure_root(&roots, &roots.config)?;
    let changes = [
        RuleChange::Add(action, pattern.clone()),
        RuleChange::Remove(opposite(action), pattern.clone()),
    ];
    let edit = edit_user_rules(&roots, &changes)?;
    let mut report = render(action, &pattern, &edit);
    if edit.created {
        let schema = airlock_config::schema::json_schema_text();
        airlock_core::write_atomic(&roots.schema_path(), schema.as_bytes(), 0o644)?;
        report.note(format!("created {} from the template", edit.path.display()));
    }
    let check = airlock_host::egress::check::still_decided_against;
    if let Some(line) = check(&roots, &ctx.cwd, action, &pattern) {
        report.note(line);
    }
    apply_live(&roots, "policy", !edit.applied.is_empty(), &mut report);
    Ok(report)
}

fn render(action: Action, pattern: &HostPattern, edit: &RuleEdit) -> Report {
    let added = edit
        .applied
        .iter()
        .any(|c| matches!(c, RuleChange::Add(..)));
    let removed = edit
        .applied
        .iter()
        .any(|c| matches!(c, RuleChange::Remove(..)));
    let rule = format!("{} {pattern}", verb(action));
    let mut doc = Doc::new();
    if edit.applied.is_empty() {
        doc.heading("Unchanged");
        doc.field(1, "rule", &rule);
        doc.field(1, "config", &path_text(&edit.path));
        doc.text(
            1,
            &[(
                Style::Dim,
                "the user config already has this rule; nothing was written",
            )],
        );
    } else {
        doc.heading(match action {
            Action::Allow => "Allowed",
            Action::Deny => "Denied",
        });
        doc.field(1, "rule", &rule);
        doc.field(1, "config", &path_text(&edit.path));
        if removed {
            let gone = format!("{} {pattern}", verb(opposite(action)));
            doc.styled_field(1, "removed", &[(Style::Warn, &gone)]);
        }
    }
    let json = serde_json::json!({
        "action": verb(action),
        "pattern": pattern.to_string(),
        "config": edit.path,
        "created": edit.created,
        "changed": !edit.applied.is_empty(),
        "added": added,
        "removed_opposite": removed,
    });
    Report::new(doc, json)
}
