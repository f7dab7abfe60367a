//! [`SecretBindings`]: which placeholder stands for which value, and on which hosts (N5).
//!
//! The proxy asks two questions per request: which bindings apply to this `host:port`
//! ([`SecretBindings::bound_to`]) and which placeholders occur in some bytes
//! ([`SecretBindings::find_in`]) — the latter to warn about placeholders sent where they are
//! not substituted. Host patterns use the policy matcher's allow semantics
//! ([`HostPattern::allows`]): a portless pattern covers ports 80 and 443.

use airlock_config::policy::{normalize_host, HostPattern};

use crate::name::{HeaderTemplate, SecretName};
use crate::redacted::Redacted;

/// The headers every binding's placeholder may be replaced in (lowercase); a binding adds its
/// template's header and the names it lists ([`Binding::headers`]).
pub const DEFAULT_SECRET_HEADERS: &[&str] = &["authorization", "proxy-authorization"];

/// Every placeholder starts with this; what follows is 32 lowercase hex digits.
pub const PLACEHOLDER_PREFIX: &str = "airlock-secret-";

/// One secret as the proxy sees it. `Debug` never shows the value.
#[derive(Debug, Clone)]
pub struct Binding {
    /// The secret's name (the sandbox environment variable).
    pub name: SecretName,
    /// The stable placeholder the sandbox sees instead of the value.
    pub placeholder: String,
    /// The real value.
    pub value: Redacted<String>,
    /// Where the value may be sent.
    pub hosts: Vec<HostPattern>,
    /// A header to set on every request to those hosts, if configured.
    pub header: Option<HeaderTemplate>,
    /// Further headers (lowercase names) whose placeholders are replaced, besides
    /// [`DEFAULT_SECRET_HEADERS`] and the template's header ([`Binding::may_carry`]).
    pub headers: Vec<String>,
}

impl Binding {
    /// Whether a placeholder of this secret in header `name` is replaced by the value: the
    /// defaults, the template's header and the binding's own list (N5). Case-insensitive.
    pub fn may_carry(&self, name: &str) -> bool {
        DEFAULT_SECRET_HEADERS
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
            || self
                .header
                .as_ref()
                .is_some_and(|t| t.name().eq_ignore_ascii_case(name))
            || self.headers.iter().any(|h| h.eq_ignore_ascii_case(name))
    }

    /// Every header name this secret may be carried in, lowercase, defaults first.
    pub fn carrier_headers(&self) -> Vec<String> {
        let mut out: Vec<String> = DEFAULT_SECRET_HEADERS
            .iter()
            .map(|h| (*h).to_owned())
            .collect();
        let template = self.header.as_ref().map(|t| t.name().to_ascii_lowercase());
        for h in template.into_iter().chain(self.headers.iter().cloned()) {
            if !out.contains(&h) {
                out.push(h);
            }
        }
        out
    }

    /// Whether this secret may be sent to `host:port`.
    pub fn applies_to(&self, host: &str, port: u16) -> bool {
        let host = normalize_host(host);
        self.hosts.iter().any(|p| p.allows(&host, port))
    }
}

/// The table of all secrets, sorted by name.
#[derive(Debug, Clone, Default)]
pub struct SecretBindings {
    bindings: Vec<Binding>,
}

impl SecretBindings {
    /// A table from `bindings` (sorted by name here).
    pub fn new(mut bindings: Vec<Binding>) -> SecretBindings {
        bindings.sort_by(|a, b| a.name.cmp(&b.name));
        SecretBindings { bindings }
    }

    /// No secrets at all.
    pub fn empty() -> SecretBindings {
        SecretBindings::default()
    }

    /// Whether there are no secrets.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// Every binding, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Binding> {
        self.bindings.iter()
    }

    /// The bindings whose hosts cover `host:port`.
    pub fn bound_to<'a>(&'a self, host: &str, port: u16) -> Vec<&'a Binding> {
        self.bindings
            .iter()
            .filter(|b| b.applies_to(host, port))
            .collect()
    }

    /// The bindings whose placeholder occurs in `bytes`.
    pub fn find_in<'a>(&'a self, bytes: &[u8]) -> Vec<&'a Binding> {
        if !contains(bytes, PLACEHOLDER_PREFIX.as_bytes()) {
            return Vec::new();
        }
        self.bindings
            .iter()
            .filter(|b| contains(bytes, b.placeholder.as_bytes()))
            .collect()
    }

    /// The length of the longest placeholder (for scanners that carry bytes across chunks).
    pub fn max_placeholder_len(&self) -> usize {
        self.bindings
            .iter()
            .map(|b| b.placeholder.len())
            .max()
            .unwrap_or(0)
    }

    /// `(NAME, placeholder)` pairs for the sandbox environment. Never contains a value.
    pub fn environment(&self) -> Vec<(String, String)> {
        self.bindings
            .iter()
            .map(|b| (b.name.as_str().to_owned(), b.placeholder.clone()))
            .collect()
    }
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(name: &str, hosts: &[&str]) -> Binding {
        Binding {
            name: SecretName::parse(name).unwrap(),
            placeholder: format!("{PLACEHOLDER_PREFIX}{:0>32}", name.len()),
            value: Redacted::new(format!("value-of-{name}")),
            hosts: hosts
                .iter()
                .map(|h| HostPattern::parse(h).unwrap())
                .collect(),
            header: None,
            headers: Vec::new(),
        }
    }

    #[test]
    fn bindings_apply_only_to_their_hosts_and_default_ports() {
        let table = SecretBindings::new(vec![binding(
            "GH",
            &["api.github.com", "*.example.com:8443"],
        )]);
        assert_eq!(table.bound_to("api.github.com", 443).len(), 1);
        assert_eq!(table.bound_to("API.GitHub.com.", 80).len(), 1);
        assert!(table.bound_to("api.github.com", 8080).is_empty());
        assert!(table.bound_to("github.com", 443).is_empty());
        assert_eq!(table.bound_to("a.example.com", 8443).len(), 1);
        assert!(table.bound_to("a.example.com", 443).is_empty());
    }

    #[test]
    fn debug_of_the_table_never_contains_a_value() {
        let table = SecretBindings::new(vec![binding("GH", &["api.github.com"])]);
        let shown = format!("{table:?}");
        assert!(!shown.contains("value-of-GH"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn find_in_reports_each_placeholder_present() {
        let a = binding("A", &["a.test"]);
        let bb = binding("BB", &["b.test"]);
        let text = format!("x={} y", bb.placeholder);
        let table = SecretBindings::new(vec![a, bb]);
        let found: Vec<_> = table
            .find_in(text.as_bytes())
            .iter()
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(found, ["BB"]);
        assert!(table.find_in(b"nothing here").is_empty());
    }
}
