//! `airlock policy allow P` / `airlock policy deny P`: edit the user config's lists.
//!
//! Order of operations: parse P (a usage error exits 2 before anything is touched); create the
//! config root as a private directory; [`edit_user_rules`] (lock, validate the current file,
//! edit, validate the result as a whole, publish atomically); when the file was created from
//! the template, refresh the schema beside it like `airlock config` does; finally, for an exact
//! host, say how the effective policy now decides it (a wider deny, or a project deny, still
//! wins over a new allow).

use airlock_config::edit::{edit_user_rules, EditError, RuleChange, RuleEdit};
use airlock_config::policy::{HostMatch, HostPattern, DEFAULT_PORTS};
use airlock_config::Action;
use clap::Args;

use super::super::Report;
use crate::context::{discover_project, ensure_root, Context};
use crate::error::{CommandError, ErrorKind};
use crate::live::apply_live;
use crate::output::{path_text, Doc, Style};
use airlock_host::config::current_network;

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

pub fn run(action: Action, args: PatternArgs, ctx: &Context) -> Result<Report, CommandError> {
    let pattern = HostPattern::parse(&args.pattern).map_err(|e| {
        CommandError::new(ErrorKind::Usage, "policy.bad_pattern", e.to_string()).with_hint(
            "write `example.com`, `*.example.com` or `**.example.com`, optionally with `:PORT`",
        )
    })?;
    let roots = ctx.roots()?;
    ensure_root(&roots, &roots.config)?;
    let changes = [
        RuleChange::Add(action, pattern.clone()),
        RuleChange::Remove(opposite(action), pattern.clone()),
    ];
    let edit = edit_user_rules(&roots, &changes).map_err(edit_error)?;
    let mut report = render(action, &pattern, &edit);
    if edit.created {
        let schema = airlock_config::schema::json_schema_text();
        airlock_core::write_atomic(&roots.schema_path(), schema.as_bytes(), 0o644)?;
        report.note(format!("created {} from the template", edit.path.display()));
    }
    if let Some(line) = effect_note(action, &pattern, ctx, &roots) {
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

/// For an exact host (or address): a warning when the effective policy still decides against
/// what the user just asked for. `None` for wildcards, or when it agrees.
fn effect_note(
    action: Action,
    pattern: &HostPattern,
    ctx: &Context,
    roots: &airlock_config::Roots,
) -> Option<String> {
    let host = match pattern.host() {
        HostMatch::Exact(name) => name.clone(),
        HostMatch::Ip(ip) => ip.to_string(),
        HostMatch::OneLabel(_) | HostMatch::AnyDepth(_) => return None,
    };
    let port = pattern.port().unwrap_or(DEFAULT_PORTS[1]);
    let project = discover_project(ctx).ok()?;
    let policy = current_network(roots, project, &mut Vec::new())
        .ok()?
        .policy();
    let decision = policy.decide(&host, port);
    let wanted = action == Action::Allow;
    (decision.allowed != wanted).then(|| {
        format!(
            "warning: {host}:{port} is still {}: {}",
            if decision.allowed {
                "allowed"
            } else {
                "denied"
            },
            airlock_proxy::target::rule_text(&decision)
        )
    })
}

fn edit_error(e: EditError) -> CommandError {
    match e {
        EditError::Invalid(errors) => {
            let n = errors.diagnostics().len();
            CommandError::new(
                ErrorKind::Config,
                "config.invalid",
                format!("the user config has {n} error(s), so it was not changed:\n{errors}"),
            )
            .with_hint(
                "fix each listed key (`airlock config` opens the file), then run the command again",
            )
        }
        EditError::Rejected(errors) => CommandError::new(
            ErrorKind::Config,
            "policy.rejected",
            format!("the edited user config would not be valid, so it was not written:\n{errors}"),
        )
        .with_hint("fix the listed keys in the user config, then run the command again"),
        e @ (EditError::Syntax { .. } | EditError::Shape { .. }) => CommandError::new(
            ErrorKind::Config,
            "config.invalid",
            e.to_string(),
        )
        .with_hint(
            "make `network.allow` and `network.deny` arrays of strings, then run the command again",
        ),
        e @ (EditError::Lock { .. } | EditError::Read { .. } | EditError::Write { .. }) => {
            CommandError::internal("config.io", e.to_string())
                .with_hint("check the permissions and free space of airlock's config directory")
        }
    }
}
