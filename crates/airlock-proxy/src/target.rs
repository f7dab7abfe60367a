//! Deciding and resolving a destination (N2, N3).
//!
//! Order of operations in [`check_target`]:
//! 1. normalize the host; apply the policy ([`Policy::decide`]): a deny rule, or no allow rule
//!    without preset `open`, refuses;
//! 2. an IP literal (including the numeric forms resolvers accept, `127.1`, `2130706433`,
//!    `0x7f.1`) is refused unless an allow rule names that exact address;
//! 3. a name is resolved by the proxy itself: the static `[network.hosts]` map first, then the
//!    system resolver;
//! 4. each address of a refused class ([`crate::addr::classify`]) is dropped unless an allow rule
//!    names that exact address, or a user/project/runtime allow rule names this exact host (a
//!    wildcard or a preset entry never opens an internal address);
//! 5. the first remaining address is the one the caller connects to — never the name again, so
//!    a DNS answer that changes between check and connect (rebinding) cannot redirect it.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};

use airlock_config::policy::{normalize_host, Action, Decision, HostMatch, Policy, RuleOrigin};

use crate::addr::classify;
use crate::denial::{Denial, DenyReason};

/// A destination that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedTarget {
    /// The normalized host.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The checked address to connect to.
    pub addr: SocketAddr,
    /// The deciding rule, for the audit log.
    pub rule: String,
}

/// Why a destination cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Refused by policy or by the address checks.
    #[error("{0}")]
    Denied(Denial),
    /// The name does not resolve.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The name.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// The name resolved to no address at all.
    #[error("{host} has no address")]
    NoAddress {
        /// The name.
        host: String,
    },
}

/// The text of the deciding rule of `decision`.
pub fn rule_text(decision: &Decision) -> String {
    match &decision.rule {
        Some(rule) => rule.to_string(),
        None if decision.allowed => format!("preset {}", decision.preset.as_str()),
        None => format!("no rule allows it (preset {})", decision.preset.as_str()),
    }
}

/// Runs the checks of the module docs for `host:port`.
pub async fn check_target(
    host: &str,
    port: u16,
    policy: &Policy,
    static_hosts: &BTreeMap<String, IpAddr>,
) -> Result<CheckedTarget, TargetError> {
    let host = normalize_host(host);
    let decision = policy.decide(&host, port);
    let rule = rule_text(&decision);
    let deny = |reason| {
        TargetError::Denied(Denial {
            host: host.clone(),
            port,
            reason,
        })
    };
    if !decision.allowed {
        return Err(deny(DenyReason::Policy { rule }));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if !exact_ip_rule(policy, ip, port) {
            return Err(deny(DenyReason::IpLiteral));
        }
        return Ok(CheckedTarget {
            addr: SocketAddr::new(ip, port),
            host,
            port,
            rule,
        });
    }
    if looks_numeric(&host) {
        return Err(deny(DenyReason::IpLiteral));
    }
    let candidates = resolve(&host, port, static_hosts).await?;
    let named_exactly = exact_host_rule(policy, &host, port);
    let mut refused = None;
    for ip in candidates {
        match classify(ip) {
            Some(class) if !named_exactly && !exact_ip_rule(policy, ip, port) => {
                refused.get_or_insert((ip, class));
            }
            Some(_) | None => {
                return Ok(CheckedTarget {
                    addr: SocketAddr::new(ip, port),
                    host,
                    port,
                    rule,
                })
            }
        }
    }
    match refused {
        Some((addr, class)) => Err(deny(DenyReason::InternalAddress { addr, class })),
        None => Err(TargetError::NoAddress { host }),
    }
}

async fn resolve(
    host: &str,
    port: u16,
    static_hosts: &BTreeMap<String, IpAddr>,
) -> Result<Vec<IpAddr>, TargetError> {
    if let Some(ip) = static_hosts
        .iter()
        .find(|(name, _)| normalize_host(name) == host)
        .map(|(_, ip)| *ip)
    {
        return Ok(vec![ip]);
    }
    let addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|source| TargetError::Resolve {
            host: host.to_owned(),
            source,
        })?;
    Ok(addrs.map(|a| a.ip()).collect())
}

/// An allow rule names exactly this address (and covers the port): what an IP-literal
/// destination needs (N3); `airlock policy check` asks the same.
pub fn exact_ip_rule(policy: &Policy, ip: IpAddr, port: u16) -> bool {
    policy.rules().iter().any(|r| {
        r.action == Action::Allow
            && matches!(r.pattern.host(), HostMatch::Ip(rule_ip) if *rule_ip == ip)
            && r.pattern.allows(&ip.to_string(), port)
    })
}

/// A user, project or runtime allow rule names exactly this host (and covers the port).
fn exact_host_rule(policy: &Policy, host: &str, port: u16) -> bool {
    policy.rules().iter().any(|r| {
        r.action == Action::Allow
            && matches!(
                r.origin,
                RuleOrigin::User | RuleOrigin::Project | RuleOrigin::Runtime
            )
            && matches!(r.pattern.host(), HostMatch::Exact(name) if name == host)
            && r.pattern.allows(host, port)
    })
}

/// Names the C resolver reads as IPv4 addresses (`inet_aton`): an all-digit or `0x` last label.
fn looks_numeric(host: &str) -> bool {
    let last = host.rsplit('.').next().unwrap_or(host);
    !last.is_empty()
        && (last.bytes().all(|b| b.is_ascii_digit())
            || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_config::policy::{HostPattern, Rule};
    use airlock_config::raw::Preset;

    fn policy(preset: Preset, rules: &[(Action, &str, RuleOrigin)]) -> Policy {
        let rules = rules
            .iter()
            .map(|(action, p, origin)| Rule {
                action: *action,
                pattern: HostPattern::parse(p).unwrap(),
                origin: origin.clone(),
            })
            .collect();
        Policy::new(preset, rules)
    }

    fn hosts(list: &[(&str, &str)]) -> BTreeMap<String, IpAddr> {
        list.iter()
            .map(|(h, ip)| (h.to_string(), ip.parse().unwrap()))
            .collect()
    }

    fn denied(r: Result<CheckedTarget, TargetError>) -> DenyReason {
        match r {
            Err(TargetError::Denied(d)) => d.reason,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn static_host_pointing_at_loopback_needs_an_exact_user_rule() {
        let map = hosts(&[("db.corp.example", "127.0.0.1")]);
        let wildcard = policy(
            Preset::None,
            &[(Action::Allow, "*.corp.example", RuleOrigin::User)],
        );
        let r = check_target("db.corp.example", 443, &wildcard, &map).await;
        assert!(matches!(denied(r), DenyReason::InternalAddress { .. }));
        let exact = policy(
            Preset::None,
            &[(Action::Allow, "db.corp.example", RuleOrigin::User)],
        );
        let ok = check_target("DB.corp.example.", 443, &exact, &map)
            .await
            .unwrap();
        assert_eq!(ok.addr, "127.0.0.1:443".parse().unwrap());
        let by_agent = policy(
            Preset::None,
            &[(
                Action::Allow,
                "db.corp.example",
                RuleOrigin::Agent("x".into()),
            )],
        );
        let r = check_target("db.corp.example", 443, &by_agent, &map).await;
        assert!(matches!(denied(r), DenyReason::InternalAddress { .. }));
    }

    #[tokio::test]
    async fn metadata_address_behind_a_name_is_refused_even_with_preset_open() {
        let map = hosts(&[("meta.example.com", "169.254.169.254")]);
        let open = policy(Preset::Open, &[]);
        let r = check_target("meta.example.com", 80, &open, &map).await;
        assert!(matches!(denied(r), DenyReason::InternalAddress { .. }));
    }

    #[tokio::test]
    async fn ip_literals_need_an_exact_address_rule() {
        let open = policy(Preset::Open, &[]);
        for literal in [
            "1.1.1.1",
            "127.0.0.1",
            "[::1]",
            "2130706433",
            "127.1",
            "0x7f.1",
        ] {
            let r = check_target(literal, 443, &open, &BTreeMap::new()).await;
            assert_eq!(denied(r), DenyReason::IpLiteral, "{literal}");
        }
        let exact = policy(
            Preset::None,
            &[(Action::Allow, "127.0.0.1:8080", RuleOrigin::User)],
        );
        let ok = check_target("127.0.0.1", 8080, &exact, &BTreeMap::new())
            .await
            .unwrap();
        assert_eq!(ok.addr, "127.0.0.1:8080".parse().unwrap());
    }

    #[tokio::test]
    async fn deny_rules_and_unlisted_hosts_are_refused_by_policy() {
        let p = policy(
            Preset::None,
            &[
                (Action::Allow, "**.example.com", RuleOrigin::User),
                (Action::Deny, "bad.example.com", RuleOrigin::User),
            ],
        );
        let map = hosts(&[("bad.example.com", "1.2.3.4"), ("other.test", "1.2.3.4")]);
        match denied(check_target("bad.example.com", 443, &p, &map).await) {
            DenyReason::Policy { rule } => {
                assert!(rule.starts_with("deny bad.example.com"), "{rule}")
            }
            other => panic!("{other:?}"),
        }
        match denied(check_target("other.test", 443, &p, &map).await) {
            DenyReason::Policy { rule } => assert_eq!(rule, "no rule allows it (preset none)"),
            other => panic!("{other:?}"),
        }
        let ok = check_target(
            "a.example.com",
            443,
            &p,
            &hosts(&[("a.example.com", "1.2.3.4")]),
        )
        .await
        .unwrap();
        assert_eq!(ok.addr, "1.2.3.4:443".parse().unwrap());
    }
}
