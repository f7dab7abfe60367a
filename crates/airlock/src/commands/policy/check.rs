//! `airlock policy check HOST[:PORT]`: the decision the proxy would make by rule, and the rule.
//!
//! Exit 0 when allowed, 1 when denied (a result, not an error: the document is printed either
//! way). The port defaults to 443. Besides the rules, the one address check that needs no
//! resolution is applied too: an IP-literal destination is allowed only by a rule naming that
//! exact address (N3). Whether a *name* resolves to an internal address is only known when the
//! proxy resolves it at request time; the output says so for names.

use std::net::IpAddr;

use airlock_config::policy::{parse_target, Policy};
use airlock_config::{Decision, RuleOrigin};
use clap::Args;

use super::super::Report;
use crate::context::{discover_project, Context};
use crate::error::{CommandError, ErrorKind};
use crate::output::{Doc, Style};
use airlock_host::config::current_network;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Destination: a host name or IP address, optionally `:PORT` (default 443; IPv6 as `[addr]:PORT`)
    #[arg(value_name = "HOST[:PORT]")]
    pub target: String,
}

/// The outcome of a check, as printed.
struct Verdict {
    allowed: bool,
    /// What decided, in the proxy's words (`allow **.github.com (preset dev)`).
    decided_by: String,
    /// The deciding rule, when one did.
    decision: Decision,
    /// What the user can do about a denial.
    hint: Option<String>,
}

pub fn run(args: CheckArgs, ctx: &Context) -> Result<Report, CommandError> {
    let (host, port) = parse_target(&args.target).map_err(|e| {
        CommandError::new(ErrorKind::Usage, "policy.bad_target", e.to_string())
            .with_hint("give one destination, e.g. `api.example.com` or `api.example.com:8443`")
    })?;
    let roots = ctx.roots()?;
    let project = discover_project(ctx)?;
    let mut notes = Vec::new();
    let policy = current_network(&roots, project, &mut notes)?.policy();
    let v = verdict(&policy, &host, port);
    let target = display_target(&host, port);
    let mut doc = Doc::new();
    let (style, word) = if v.allowed {
        (Style::Good, "allowed")
    } else {
        (Style::Bad, "denied")
    };
    doc.text(0, &[(style, word), (Style::Plain, &format!("  {target}"))]);
    doc.field(1, "decided by", &v.decided_by);
    if let Some(h) = &v.hint {
        doc.field(1, "next", h);
    }
    if v.allowed && host.parse::<IpAddr>().is_err() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "the proxy still refuses it if the name resolves to a private or loopback address",
            )],
        );
    }
    let json = serde_json::json!({
        "target": target,
        "host": host,
        "port": port,
        "allowed": v.allowed,
        "decided_by": v.decided_by,
        "rule": v.decision.rule,
        "preset": v.decision.preset,
        "hint": v.hint,
    });
    let mut report = Report::new(doc, json);
    report.notes = notes;
    if !v.allowed {
        report.status = Some(1);
    }
    Ok(report)
}

fn display_target(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn verdict(policy: &Policy, host: &str, port: u16) -> Verdict {
    let decision = policy.decide(host, port);
    let decided_by = airlock_proxy::target::rule_text(&decision);
    let allow_cmd = airlock_config::policy::allow_command(host, port);
    if decision.allowed {
        if let Ok(ip) = host.parse::<IpAddr>() {
            if !airlock_proxy::target::exact_ip_rule(policy, ip, port) {
                return Verdict {
                    allowed: false,
                    decided_by: format!(
                        "IP-literal destinations need an allow rule naming that exact address \
                         (the policy alone says: {decided_by})"
                    ),
                    decision,
                    hint: Some(allow_cmd),
                };
            }
        }
        return Verdict {
            allowed: true,
            decided_by,
            decision,
            hint: None,
        };
    }
    let hint = match decision.rule.as_ref().map(|r| &r.origin) {
        None => allow_cmd,
        Some(RuleOrigin::User | RuleOrigin::Runtime) => {
            "a deny rule in your user config decides; remove it (`airlock config`) to allow this"
                .to_owned()
        }
        Some(RuleOrigin::Project) => {
            "the project config denies it; only an edit of .airlock/config.toml can lift that"
                .to_owned()
        }
        Some(RuleOrigin::Preset(_) | RuleOrigin::Agent(_)) => allow_cmd,
    };
    Verdict {
        allowed: false,
        decided_by,
        decision,
        hint: Some(hint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_config::raw::Preset;
    use airlock_config::{Action, HostPattern, Rule};

    fn rule(action: Action, p: &str, origin: RuleOrigin) -> Rule {
        Rule {
            action,
            pattern: HostPattern::parse(p).unwrap(),
            origin,
        }
    }

    #[test]
    fn open_preset_does_not_open_ip_literals_without_an_exact_rule() {
        let policy = Policy::new(Preset::Open, vec![]);
        assert!(!verdict(&policy, "10.0.0.1", 443).allowed);
        let policy = Policy::new(
            Preset::Open,
            vec![rule(Action::Allow, "10.0.0.1", RuleOrigin::User)],
        );
        assert!(verdict(&policy, "10.0.0.1", 443).allowed);
    }

    #[test]
    fn a_project_deny_is_not_answered_with_an_allow_command_that_cannot_help() {
        let policy = Policy::new(
            Preset::Dev,
            vec![rule(Action::Deny, "github.com", RuleOrigin::Project)],
        );
        let v = verdict(&policy, "github.com", 443);
        assert!(!v.allowed);
        assert!(v.hint.unwrap().contains(".airlock/config.toml"));
        let v = verdict(&Policy::new(Preset::None, vec![]), "x.example.com", 8443);
        assert_eq!(
            v.hint.as_deref(),
            Some("airlock policy allow x.example.com:8443")
        );
    }
}
