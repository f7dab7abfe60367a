//! `airlock policy check`'s decision: what the proxy would do with a destination by rule, the
//! rule that decided, and what the user can do about a denial.

use std::net::IpAddr;

use airlock_config::policy::Policy;
use airlock_config::{Decision, RuleOrigin};

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
