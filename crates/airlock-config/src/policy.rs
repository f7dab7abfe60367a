//! The network policy (N2, N3): host patterns, rules, presets and the pure decision function.
//!
//! Invariants:
//! - Fail closed: with preset `none` and no allow rule, every destination is denied.
//! - Deny beats allow, whatever the order or origin of the rules.
//! - `example.com` matches only itself; `*.example.com` matches exactly one extra label;
//!   `**.example.com` any number (≥ 1) of extra labels; neither wildcard matches the bare
//!   domain. A pattern without a port allows ports 80 and 443 only; a *deny* pattern without a
//!   port denies every port (a deny must never be narrower than the user meant).
//! - Hosts are compared in lowercase, without a trailing dot. IP-literal patterns match that
//!   exact address only (N3: the proxy refuses other IP literals).
//!
//! Decision order: deny rules → allow rules (explicit, agent, preset `dev` list) → preset
//! `open` → denied.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};

use crate::presets;
use crate::raw::Preset;

/// Errors parsing a [`HostPattern`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// The pattern is empty.
    #[error("empty host pattern")]
    Empty,
    /// A label is empty, too long, or has characters outside `a-z0-9-` (or starts/ends with `-`).
    #[error("invalid label {label:?} in host pattern {pattern:?} (labels are 1-63 characters of a-z, 0-9 and inner '-')")]
    InvalidLabel {
        /// The whole pattern.
        pattern: String,
        /// The offending label.
        label: String,
    },
    /// The host part is longer than 253 characters.
    #[error("host pattern {pattern:?} is longer than 253 characters")]
    TooLong {
        /// The whole pattern.
        pattern: String,
    },
    /// A wildcard appears somewhere other than the first label, or covers a top-level domain.
    #[error("invalid wildcard in {pattern:?}: use `*.domain.tld` or `**.domain.tld` (the wildcard comes first and needs at least two labels after it)")]
    Wildcard {
        /// The whole pattern.
        pattern: String,
    },
    /// The port is not a number in 1..=65535.
    #[error("invalid port {port:?} in host pattern {pattern:?}")]
    Port {
        /// The whole pattern.
        pattern: String,
        /// The port text.
        port: String,
    },
    /// A name whose last label is all digits (an abbreviated or malformed IP address).
    #[error("{pattern:?} is neither a host name nor a complete IP address")]
    NumericName {
        /// The whole pattern.
        pattern: String,
    },
    /// An IP-literal pattern with a wildcard.
    #[error("IP address patterns must be exact addresses: {pattern:?}")]
    IpWildcard {
        /// The whole pattern.
        pattern: String,
    },
}

/// How a pattern's host part matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostMatch {
    /// Exactly this name.
    Exact(String),
    /// `*.domain`: exactly one extra label before `domain`.
    OneLabel(String),
    /// `**.domain`: one or more extra labels before `domain`.
    AnyDepth(String),
    /// Exactly this IP address.
    Ip(IpAddr),
}

/// A checked host pattern with an optional port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

/// Ports a portless allow pattern covers.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

impl HostPattern {
    /// Parses `pattern` (see the module docs for the syntax).
    pub fn parse(pattern: &str) -> Result<HostPattern, PatternError> {
        let text = pattern.trim().to_ascii_lowercase();
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        let (host, port) = split_port(&text, pattern)?;
        if let Some(ip) = parse_ip(host) {
            return Ok(HostPattern {
                host: HostMatch::Ip(ip),
                port,
            });
        }
        if host.len() > 253 {
            return Err(PatternError::TooLong {
                pattern: pattern.to_owned(),
            });
        }
        let (kind, domain): (fn(String) -> HostMatch, &str) =
            if let Some(rest) = host.strip_prefix("**.") {
                (HostMatch::AnyDepth, rest)
            } else if let Some(rest) = host.strip_prefix("*.") {
                (HostMatch::OneLabel, rest)
            } else {
                (HostMatch::Exact, host)
            };
        if domain.contains('*') {
            return Err(if domain.parse::<IpAddr>().is_ok() {
                PatternError::IpWildcard {
                    pattern: pattern.to_owned(),
                }
            } else {
                PatternError::Wildcard {
                    pattern: pattern.to_owned(),
                }
            });
        }
        let labels: Vec<&str> = domain.split('.').collect();
        for label in &labels {
            if !valid_label(label) {
                return Err(PatternError::InvalidLabel {
                    pattern: pattern.to_owned(),
                    label: (*label).to_owned(),
                });
            }
        }
        let is_wildcard = !matches!(kind(String::new()), HostMatch::Exact(_));
        if is_wildcard && parse_ip(domain).is_some() {
            return Err(PatternError::IpWildcard {
                pattern: pattern.to_owned(),
            });
        }
        // An all-digit last label is never a DNS name; resolvers read forms like `127.1` as
        // IP addresses, which must be written as exact addresses instead.
        if labels
            .last()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(PatternError::NumericName {
                pattern: pattern.to_owned(),
            });
        }
        if is_wildcard && labels.len() < 2 {
            return Err(PatternError::Wildcard {
                pattern: pattern.to_owned(),
            });
        }
        Ok(HostPattern {
            host: kind(domain.to_owned()),
            port,
        })
    }

    /// The host part.
    pub fn host(&self) -> &HostMatch {
        &self.host
    }

    /// The explicit port, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether `host` (already normalized by [`normalize_host`]) matches the host part.
    pub fn matches_host(&self, host: &str) -> bool {
        match &self.host {
            HostMatch::Exact(name) => host == name,
            HostMatch::OneLabel(domain) => host
                .strip_suffix(domain.as_str())
                .and_then(|p| p.strip_suffix('.'))
                .is_some_and(valid_label),
            HostMatch::AnyDepth(domain) => host
                .strip_suffix(domain.as_str())
                .and_then(|p| p.strip_suffix('.'))
                .is_some_and(|labels| labels.split('.').all(valid_label)),
            HostMatch::Ip(ip) => parse_ip(host) == Some(*ip),
        }
    }

    /// Whether the pattern matches `host:port` for an allow rule (portless → 80/443).
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        port_ok && self.matches_host(host)
    }

    /// Whether the pattern matches `host:port` for a deny rule (portless → every port).
    pub fn denies(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.matches_host(host)
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Exact(d) => write!(f, "{d}")?,
            HostMatch::OneLabel(d) => write!(f, "*.{d}")?,
            HostMatch::AnyDepth(d) => write!(f, "**.{d}")?,
            HostMatch::Ip(IpAddr::V6(ip)) if self.port.is_some() => write!(f, "[{ip}]")?,
            HostMatch::Ip(ip) => write!(f, "{ip}")?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

impl FromStr for HostPattern {
    type Err = PatternError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostPattern::parse(s)
    }
}

impl Serialize for HostPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostPattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HostPattern::parse(&s).map_err(serde::de::Error::custom)
    }
}

fn split_port<'t>(text: &'t str, pattern: &str) -> Result<(&'t str, Option<u16>), PatternError> {
    let port_err = |port: &str| PatternError::Port {
        pattern: pattern.to_owned(),
        port: port.to_owned(),
    };
    let parse_port = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(port_err(p)),
    };
    if let Some(rest) = text.strip_prefix('[') {
        // [v6] or [v6]:port
        let Some((inner, after)) = rest.split_once(']') else {
            return Err(PatternError::InvalidLabel {
                pattern: pattern.to_owned(),
                label: text.to_owned(),
            });
        };
        return match after {
            "" => Ok((inner, None)),
            p => match p.strip_prefix(':') {
                Some(p) => Ok((inner, Some(parse_port(p)?))),
                None => Err(port_err(p)),
            },
        };
    }
    if text.matches(':').count() > 1 {
        return Ok((text, None)); // a bare IPv6 address
    }
    match text.split_once(':') {
        Some((host, p)) => Ok((host, Some(parse_port(p)?))),
        None => Ok((text, None)),
    }
}

fn parse_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn valid_label(label: &str) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Lowercases a destination host and strips one trailing dot and IPv6 brackets.
pub fn normalize_host(host: &str) -> String {
    let h = host.trim().to_ascii_lowercase();
    let h = h.strip_suffix('.').unwrap_or(&h);
    h.trim_start_matches('[').trim_end_matches(']').to_owned()
}

/// Parses a destination `HOST[:PORT]` as typed to `airlock policy check` (port default 443;
/// IPv6 in brackets when a port follows). The host is normalized like [`Policy::decide`] does.
pub fn parse_target(target: &str) -> Result<(String, u16), PatternError> {
    let pattern = HostPattern::parse(target)?;
    if !matches!(pattern.host, HostMatch::Exact(_) | HostMatch::Ip(_)) {
        return Err(PatternError::Wildcard {
            pattern: target.to_owned(),
        });
    }
    let host = match &pattern.host {
        HostMatch::Ip(ip) => ip.to_string(),
        HostMatch::Exact(name) | HostMatch::OneLabel(name) | HostMatch::AnyDepth(name) => {
            name.clone()
        }
    };
    Ok((host, pattern.port.unwrap_or(443)))
}

/// The command that would allow `host:port` (for denials, N9): the port is omitted when it is
/// one of the default ports.
pub fn allow_command(host: &str, port: u16) -> String {
    let host = normalize_host(host);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    if DEFAULT_PORTS.contains(&port) {
        format!("airlock policy allow {host}")
    } else {
        format!("airlock policy allow {host}:{port}")
    }
}

/// Whether a rule allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Let matching requests through.
    Allow,
    /// Refuse matching requests (beats every allow).
    Deny,
}

/// Where a rule comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum RuleOrigin {
    /// A built-in preset's list.
    Preset(Preset),
    /// The user config.
    User,
    /// The project config.
    Project,
    /// The API hosts of the selected agent (A1).
    Agent(String),
    /// Added at run time with `airlock policy allow|deny`.
    Runtime,
}

impl fmt::Display for RuleOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleOrigin::Preset(p) => write!(f, "preset {}", p.as_str()),
            RuleOrigin::User => f.write_str("user config"),
            RuleOrigin::Project => f.write_str("project config"),
            RuleOrigin::Agent(a) => write!(f, "agent {a}"),
            RuleOrigin::Runtime => f.write_str("airlock policy"),
        }
    }
}

/// One allow or deny rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    /// Allow or deny.
    pub action: Action,
    /// What it matches.
    pub pattern: HostPattern,
    /// Where it comes from.
    pub origin: RuleOrigin,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = match self.action {
            Action::Allow => "allow",
            Action::Deny => "deny",
        };
        write!(f, "{action} {} ({})", self.pattern, self.origin)
    }
}

/// The outcome of [`Policy::decide`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Whether the request may go out.
    pub allowed: bool,
    /// The deciding rule; `None` when the preset decided (`open` allows, otherwise nothing
    /// matched and the request is denied by default).
    pub rule: Option<Rule>,
    /// The base preset in force.
    pub preset: Preset,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.allowed { "allowed" } else { "denied" };
        match &self.rule {
            Some(rule) => write!(f, "{verdict} by rule {rule}"),
            None if self.allowed => write!(f, "{verdict} by preset {}", self.preset.as_str()),
            None => write!(
                f,
                "{verdict}: no rule allows it (preset {})",
                self.preset.as_str()
            ),
        }
    }
}

/// A complete policy: a preset plus explicit rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Policy {
    preset: Preset,
    rules: Vec<Rule>,
}

impl Policy {
    /// A policy from a preset and explicit rules (user, project, agent, runtime). The preset's
    /// own list (for `dev`) is appended with origin [`RuleOrigin::Preset`].
    pub fn new(preset: Preset, rules: Vec<Rule>) -> Policy {
        let mut all = rules;
        all.extend(presets::rules(preset));
        Policy { preset, rules: all }
    }

    /// The base preset.
    pub fn preset(&self) -> Preset {
        self.preset
    }

    /// Every rule, explicit ones first, then the preset's.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Decides whether `host:port` may be reached. `host` may be a name or an IP literal.
    pub fn decide(&self, host: &str, port: u16) -> Decision {
        let host = normalize_host(host);
        let decision = |allowed, rule: Option<&Rule>| Decision {
            allowed,
            rule: rule.cloned(),
            preset: self.preset,
        };
        if let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.action == Action::Deny && r.pattern.denies(&host, port))
        {
            return decision(false, Some(rule));
        }
        if let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.action == Action::Allow && r.pattern.allows(&host, port))
        {
            return decision(true, Some(rule));
        }
        decision(self.preset == Preset::Open, None)
    }
}
