//! `airlock policy ls|allow|deny|check|log` (PRODUCT §2, N2, N3, N7, N9, C6).
//!
//! - `ls` and `check` read the effective policy of the active project (or the user config alone
//!   outside a project) exactly as `plan` loads it, trust included; they change nothing.
//! - `allow`/`deny` edit the USER config through [`airlock_config::edit`] (comments kept, the
//!   whole file validated before it is written atomically, a duplicate is a no-op success).
//!   Adding a pattern to one list removes the identical pattern from the other, so the command
//!   does what it says instead of leaving a contradicting rule in force.
//! - `log` prints the project's sandbox audit log (N7), escaped for the terminal (O1).
//!
//! Running sandboxes: after a change, `crate::live::apply_live` asks each running sandbox's
//! keeper to make its proxy reload (it calls `airlock_host::config::current_network`;
//! `airlock_host::paths::audit_log_path` is where it audits)
//! and reports, per sandbox, whether that happened — never an assumed success.

mod check;
pub mod log;
mod write;

use airlock_host::config::current_network;
use clap::{Args, Subcommand};

use super::Report;
use crate::context::{discover_project, Context};
use crate::error::HostError;
use crate::output::{Doc, Style};

#[derive(Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Show the effective policy: preset, rules with their origins, agent hosts, ignored rules
    Ls(LsArgs),
    /// Allow a host pattern (`example.com`, `*.example.com`, `**.example.com`, `HOST:PORT`) in the user config
    Allow(write::PatternArgs),
    /// Deny a host pattern in the user config (deny beats every allow)
    Deny(write::PatternArgs),
    /// Show whether HOST[:PORT] may be reached and which rule decides; exit 1 when denied
    Check(check::CheckArgs),
    /// Print the audit log of the project's sandbox
    Log(log::LogArgs),
}

#[derive(Args, Debug)]
pub struct LsArgs {}

pub fn run(args: PolicyArgs, ctx: &Context) -> Result<Report, HostError> {
    match args.command {
        PolicyCommand::Ls(_) => ls(ctx),
        PolicyCommand::Allow(a) => write::run(airlock_config::Action::Allow, a, ctx),
        PolicyCommand::Deny(a) => write::run(airlock_config::Action::Deny, a, ctx),
        PolicyCommand::Check(a) => check::run(a, ctx),
        PolicyCommand::Log(a) => log::run(a, ctx),
    }
}

fn ls(ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let project = discover_project(ctx)?;
    let mut notes = Vec::new();
    let net = current_network(&roots, project, &mut notes)?;
    let policy = net.policy();
    let preset_rules: Vec<_> = policy
        .rules()
        .iter()
        .filter(|r| matches!(r.origin, airlock_config::RuleOrigin::Preset(_)))
        .collect();
    let mut doc = Doc::new();
    doc.heading("Network policy");
    doc.styled_field(
        1,
        "preset",
        &[
            (Style::Plain, net.preset.value.as_str()),
            (
                Style::Dim,
                &format!(
                    "  ({}; {} built-in rules)",
                    net.preset.origin.as_str(),
                    preset_rules.len()
                ),
            ),
        ],
    );
    for r in &preset_rules {
        rule_line(&mut doc, "built-in", r);
    }
    for r in &net.rules {
        rule_line(&mut doc, "rule", r);
    }
    for r in &net.agent_hosts {
        rule_line(&mut doc, "agent host", r);
    }
    for i in &net.ignored {
        doc.styled_field(
            1,
            "ignored",
            &[
                (Style::Warn, &format!("{} = {}", i.key, i.value)),
                (Style::Plain, " — "),
                (Style::Warn, &i.reason),
            ],
        );
    }
    if net.rules.is_empty() && net.agent_hosts.is_empty() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "no rules of your own; `airlock policy allow HOST` adds one",
            )],
        );
    }
    doc.text(
        1,
        &[(
            Style::Dim,
            "deny beats allow; `airlock policy check HOST[:PORT]` shows which rule decides",
        )],
    );
    let json = serde_json::json!({
        "preset": net.preset,
        "rules": net.rules,
        "agent_hosts": net.agent_hosts,
        "preset_rules": preset_rules,
        "ignored": net.ignored,
    });
    let mut report = Report::new(doc, json);
    for n in notes {
        report.note(n);
    }
    Ok(report)
}

fn rule_line(doc: &mut Doc, key: &str, r: &airlock_config::Rule) {
    let action = match r.action {
        airlock_config::Action::Allow => (Style::Good, "allow "),
        airlock_config::Action::Deny => (Style::Bad, "deny  "),
    };
    doc.styled_field(
        1,
        key,
        &[
            action,
            (Style::Plain, &r.pattern.to_string()),
            (Style::Dim, &format!("  ({})", r.origin)),
        ],
    );
}
