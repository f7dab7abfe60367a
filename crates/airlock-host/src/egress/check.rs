//! `airlock policy check`'s decision: what the proxy would do with a destination by rule, the
//! rule that decided, and what the user can do about a denial; and the warnings of `policy
//! allow|deny` and `secret set` when the effective policy of the working directory's project
//! still decides against what the user just asked for. Those warnings only decide what is said:
//! a project or config that cannot be read yields none.

use std::net::IpAddr;
use std::path::Path;

use airlock_config::policy::{HostMatch, HostPattern, Policy, DEFAULT_PORTS};
use airlock_config::{Action, Decision, Roots, RuleOrigin};

/// The effective policy of `cwd`'s project (the user config alone outside one), if readable.
fn policy_of(roots: &Roots, cwd: &Path) -> Option<Policy> {
    let project = crate::project::discover_project(cwd).ok()?;
    let network = crate::config::current_network(roots, project, &mut Vec::new()).ok()?;
    Some(network.policy())
}

/// After `policy allow|deny PATTERN` of an exact host (or address): a warning when the
/// effective policy still decides against `action` (a wider deny, or a project deny, wins over
/// a new allow). `None` for wildcards, or when it agrees.
pub fn still_decided_against(
    roots: &Roots,
    cwd: &Path,
    action: Action,
    pattern: &HostPattern,
) -> Option<String> {
    let host = match pattern.host() {
        HostMatch::Exact(name) => name.clone(),
        HostMatch::Ip(ip) => ip.to_string(),
        HostMatch::OneLabel(_) | HostMatch::AnyDepth(_) => return None,
    };
    let port = pattern.port().unwrap_or(DEFAULT_PORTS[1]);
    let decision = policy_of(roots, cwd)?.decide(&host, port);
    let wanted = action == Action::Allow;
    (decision.allowed != wanted).then(|| {
        let now = if decision.allowed {
            "allowed"
        } else {
            "denied"
        };
        let rule = airlock_proxy::target::rule_text(&decision);
        format!("warning: {host}:{port} is still {now}: {rule}")
    })
}

/// After `secret set --host …`: a warning per bound exact host the effective policy denies.
/// The proxy would never send the secret there, which is safe but surely not what was meant.
pub fn denied_secret_hosts(roots: &Roots, cwd: &Path, hosts: &[HostPattern]) -> Vec<String> {
    let Some(policy) = policy_of(roots, cwd) else {
        return Vec::new();
    };
    hosts
        .iter()
        .filter_map(|h| {
            let HostMatch::Exact(host) = h.host() else {
                return None;
            };
            let port = h.port().unwrap_or(443);
            (!policy.decide(host, port).allowed).then(|| {
                format!(
                    "warning: the network policy denies {host}:{port}, so this secret is never \
                     sent there; `{}` allows it",
                    airlock_config::policy::allow_command(host, port)
                )
            })
        })
        .collect()
}

/// The outcome of a check.
#[derive(Debug)]
pub struct Verdict {
    pub allowed: bool,
    /// What decided, in the proxy's words (`allow **.github.com (preset dev)`).
    pub decided_by: String,
    /// The deciding rule, when one did.
    pub decision: Decision,
    /// What the user can do about a denial.
    pub hint: Option<String>,
}

/// What the proxy would decide for `host:port` under `policy`, by rule and by the address
/// check that needs no resolution (an IP literal needs a rule naming that exact address).
pub fn verdict(policy: &Policy, host: &str, port: u16) -> Verdict {
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
    use airlock_config::Rule;

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
