//! Trust-aware merge of the network sections of both files (C6).
//!
//! The user config is authoritative. A project config always applies what *tightens* the
//! policy (deny rules, a narrower preset). What would *widen* it (allow rules, a wider preset,
//! static host entries) applies only when the user trusts this exact project config
//! (`airlock trust`, keyed by canonical root and file hash); otherwise each such setting is
//! listed in [`Ignored`] with the reason and the command that would apply it.

use std::path::PathBuf;

use crate::agents::AgentSpec;
use crate::diagnostics::{key_segment, Diagnostic};
use crate::effective::{HostEntry, HostPort, Ignored, Network, Origin, Sourced};
use crate::parse::ParsedFile;
use crate::policy::{Action, HostMatch, HostPattern, Policy, Rule, RuleOrigin};
use crate::raw::{Preset, RawNetwork};

/// The reason text of every ignored project setting.
pub const UNTRUSTED_REASON: &str =
    "the project config is untrusted, so it may only tighten the network policy; \
     review .airlock/config.toml and run `airlock trust` to apply it";

/// Ports the sandbox side reserves (the proxy listens on 127.0.0.1:3128 inside, N1).
const RESERVED_GUEST_PORTS: &[u16] = &[crate::env_vars::PROXY_PORT];

pub(crate) struct NetworkInputs<'a> {
    pub user: Option<&'a ParsedFile>,
    pub project: Option<&'a ParsedFile>,
    pub project_trusted: bool,
    pub agent: Option<&'static AgentSpec>,
    /// Whether the untrusted project config chose the agent (C6: its API hosts are then added
    /// only where the user config already allows them).
    pub agent_from_untrusted_project: bool,
}

/// The reason text of an agent API host the untrusted project config could not add.
pub const UNTRUSTED_AGENT_REASON: &str =
    "the untrusted project config selected this agent, and your user config does not allow \
     its API host; review .airlock/config.toml and run `airlock trust`, or allow the host \
     with `airlock policy allow`";

fn section(file: Option<&ParsedFile>) -> Option<(&ParsedFile, &RawNetwork)> {
    let f = file?;
    Some((f, f.raw.network.as_ref()?))
}

/// Merges both files' `[network]` into the effective network, pushing every error.
pub(crate) fn merge(inputs: &NetworkInputs<'_>, diags: &mut Vec<Diagnostic>) -> Network {
    let mut net = Network {
        preset: Sourced::new(Preset::default(), Origin::Default),
        rules: Vec::new(),
        agent_hosts: Vec::new(),
        ignored: Vec::new(),
        hosts: Vec::new(),
        host_ports: Vec::new(),
        extra_ca: Vec::new(),
    };
    if let Some((file, raw)) = section(inputs.user) {
        if let Some(p) = raw.preset {
            net.preset = Sourced::new(p, Origin::User);
        }
        rules(file, raw, RuleOrigin::User, &mut net, false, diags);
        hosts(file, raw, Origin::User, &mut net, false, diags);
        user_only(file, raw, &mut net, diags);
    }
    // What the user config alone allows: the yardstick for an untrusted project's agent.
    let user_policy = Policy::new(net.preset.value, net.rules.clone());
    if let Some((file, raw)) = section(inputs.project) {
        let widen_ok = inputs.project_trusted;
        if let Some(p) = raw.preset {
            if widen_ok || p <= net.preset.value {
                net.preset = Sourced::new(p, Origin::Project);
            } else {
                net.ignored.push(ignored("network.preset", p.as_str()));
            }
        }
        rules(file, raw, RuleOrigin::Project, &mut net, !widen_ok, diags);
        hosts(file, raw, Origin::Project, &mut net, !widen_ok, diags);
    }
    if let Some(agent) = inputs.agent {
        for host in agent.api_hosts {
            if let Ok(pattern) = HostPattern::parse(host) {
                if inputs.agent_from_untrusted_project && !covered(&user_policy, &pattern) {
                    net.ignored.push(Ignored {
                        key: "agent".to_owned(),
                        value: format!("{} (API host {host})", agent.name),
                        reason: UNTRUSTED_AGENT_REASON.to_owned(),
                    });
                    continue;
                }
                net.agent_hosts.push(Rule {
                    action: Action::Allow,
                    pattern,
                    origin: RuleOrigin::Agent(agent.name.to_owned()),
                });
            }
        }
    }
    net
}

/// Whether `policy` already allows everything `pattern` would: an exact host on its port (80
/// and 443 when portless), a wildcard through a host below it that no narrower rule could
/// single out (`airlock-probe.<domain>`, two labels deep for `**.`).
fn covered(policy: &Policy, pattern: &HostPattern) -> bool {
    let host = match pattern.host() {
        HostMatch::Exact(h) => h.clone(),
        HostMatch::Ip(ip) => ip.to_string(),
        HostMatch::OneLabel(d) => format!("airlock-probe.{d}"),
        HostMatch::AnyDepth(d) => format!("airlock-probe.airlock-probe.{d}"),
    };
    let ports: &[u16] = match pattern.port() {
        Some(p) => &[p],
        None => &[80, 443],
    };
    ports.iter().all(|p| policy.decide(&host, *p).allowed)
}

fn ignored(key: &str, value: &str) -> Ignored {
    Ignored {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: UNTRUSTED_REASON.to_owned(),
    }
}

/// Adds allow/deny rules; with `untrusted` set, allow rules go to `ignored` instead.
fn rules(
    file: &ParsedFile,
    raw: &RawNetwork,
    origin: RuleOrigin,
    net: &mut Network,
    untrusted: bool,
    diags: &mut Vec<Diagnostic>,
) {
    // Deny first, so deny rules are listed before allow rules of the same file.
    for (action, list, name) in [
        (Action::Deny, &raw.deny, "deny"),
        (Action::Allow, &raw.allow, "allow"),
    ] {
        for (i, text) in list.iter().flatten().enumerate() {
            let key = format!("network.{name}[{i}]");
            let pattern = match HostPattern::parse(text) {
                Ok(p) => p,
                Err(e) => {
                    diags.push(file.diag(&key, e.to_string()));
                    continue;
                }
            };
            if action == Action::Allow && untrusted {
                net.ignored.push(ignored(&key, text));
                continue;
            }
            net.rules.push(Rule {
                action,
                pattern,
                origin: origin.clone(),
            });
        }
    }
}

fn hosts(
    file: &ParsedFile,
    raw: &RawNetwork,
    origin: Origin,
    net: &mut Network,
    untrusted: bool,
    diags: &mut Vec<Diagnostic>,
) {
    for (name, address) in raw.hosts.iter().flatten() {
        let key = format!("network.hosts.{}", key_segment(name));
        let valid = matches!(
            HostPattern::parse(name).map(|p| (p.port(), p.host().clone())),
            Ok((None, HostMatch::Exact(_)))
        );
        if !valid {
            diags.push(file.diag(&key, format!("{name:?} is not a host name")));
            continue;
        }
        if untrusted {
            net.ignored.push(ignored(&key, &address.to_string()));
            continue;
        }
        let name = name.to_ascii_lowercase();
        net.hosts.retain(|h| h.name != name);
        net.hosts.push(HostEntry {
            name,
            address: *address,
            origin,
        });
    }
}

fn user_only(file: &ParsedFile, raw: &RawNetwork, net: &mut Network, diags: &mut Vec<Diagnostic>) {
    for (i, ca) in raw.extra_ca.iter().flatten().enumerate() {
        let key = format!("network.extra_ca[{i}]");
        let path = PathBuf::from(ca);
        if !path.is_absolute() {
            diags.push(file.diag(&key, format!("{ca} is not an absolute path")));
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => net.extra_ca.push(path),
            Ok(_) => diags.push(file.diag(&key, format!("{ca} is not a file"))),
            Err(e) => diags.push(file.diag(&key, format!("cannot read {ca}: {e}"))),
        }
    }
    for (i, hp) in raw.host_port.iter().enumerate() {
        let guest_port = hp.guest_port.unwrap_or(hp.port);
        let key = format!("network.host_port[{i}]");
        if hp.port == 0 || guest_port == 0 {
            diags.push(file.diag(&key, "ports must be between 1 and 65535".to_owned()));
        } else if RESERVED_GUEST_PORTS.contains(&guest_port) {
            diags.push(file.diag(
                &key,
                format!("guest port {guest_port} is reserved for airlock's egress proxy"),
            ));
        } else if net.host_ports.iter().any(|p| p.guest_port == guest_port) {
            diags.push(file.diag(
                &key,
                format!("guest port {guest_port} is already used by another host_port"),
            ));
        } else {
            net.host_ports.push(HostPort {
                port: hp.port,
                guest_port,
            });
        }
    }
}
