//! Placeholder substitution in request headers (N5).
//!
//! For a request to `host:port`, the bindings that cover it are the *bound* ones. In order:
//! 1. every header the binding names ([`Binding::may_carry`]: `Authorization`,
//!    `Proxy-Authorization`, the template's header, the agent catalogue's header for that
//!    secret name, and those named with `airlock secret set --header-name`): placeholders of
//!    bound secrets are replaced by their values; inside `Basic …` credentials they are
//!    base64-decoded, substituted, re-encoded. A placeholder in any other header (`X-Echo`,
//!    `Cookie`, …) stays as it is, because a server that echoes such a header would hand the
//!    value back to the sandbox;
//! 2. every bound secret with a header template sets that header, replacing any header of the
//!    same name the client sent (never a duplicate);
//! 3. over cleartext HTTP only secrets whose host pattern names the port explicitly count as
//!    bound (`api.example.com:8080`): a portless pattern means "this service", which is
//!    HTTPS, and a token must not travel in cleartext because a client was misconfigured;
//! 4. placeholders left anywhere — headers the binding does not name, headers of an unbound
//!    host, the request target (query), the body ([`BodyScanner`]) — are left as they are and reported as warnings naming the
//!    secret and the place, never the value.
//!
//! Substituted header values are marked sensitive (hyper then never indexes them in HPACK and
//! `Debug` of the header map hides them).

use std::collections::BTreeSet;

use airlock_secrets::{Binding, SecretBindings};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, PROXY_AUTHORIZATION};
use hyper::HeaderMap;

/// What substitution did to one request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Substitution {
    /// Names of the secrets put into the request.
    pub used: BTreeSet<String>,
    /// Placeholders seen and left alone.
    pub warnings: Vec<String>,
}

impl Substitution {
    /// Records a placeholder of `binding` left in `place`.
    pub fn warn(&mut self, binding: &Binding, place: &str, host: &str) {
        let text = unsubstituted_warning(binding.name.as_str(), place, host);
        if !self.warnings.contains(&text) {
            self.warnings.push(text);
        }
    }
}

/// The warning (also logged) for a placeholder of secret `name` left in `place` of a request
/// to `host`; names the secret and the place, never the value.
pub(crate) fn unsubstituted_warning(name: &str, place: &str, host: &str) -> String {
    let text = format!(
        "placeholder of secret {name} in {place} to {host} not substituted (secrets go only into the headers their binding names — Authorization, Proxy-Authorization, the template's header, `secret set --header-name` — of requests to their bound hosts, and over cleartext HTTP only when the binding names the port)"
    );
    tracing::warn!("{text}");
    text
}

/// How the request travels upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Inside TLS (an intercepted connection).
    Tls,
    /// Plain HTTP.
    Cleartext,
}

/// Applies the module docs to `headers` and warns about the request target.
pub fn substitute_headers(
    headers: &mut HeaderMap,
    target: &str,
    (host, port): (&str, u16),
    channel: Channel,
    table: &SecretBindings,
) -> Substitution {
    let mut out = Substitution::default();
    if table.is_empty() {
        return out;
    }
    for b in table.find_in(target.as_bytes()) {
        out.warn(b, "the request target", host);
    }
    let bound: Vec<&Binding> = table
        .bound_to(host, port)
        .into_iter()
        .filter(|b| channel == Channel::Tls || names_port(b, host, port))
        .collect();
    let names: Vec<HeaderName> = headers.keys().cloned().collect();
    for name in names {
        let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
        let mut changed = false;
        let mut new_values = Vec::with_capacity(values.len());
        let carriers: Vec<&Binding> = bound
            .iter()
            .copied()
            .filter(|b| b.may_carry(name.as_str()))
            .collect();
        for value in values {
            let replaced = substitute_value(&name, value.as_bytes(), &carriers, &mut out);
            for b in table.find_in(replaced.as_deref().unwrap_or(value.as_bytes())) {
                out.warn(b, &format!("header {name}"), host);
            }
            match replaced.and_then(|v| HeaderValue::from_bytes(&v).ok()) {
                Some(mut v) => {
                    v.set_sensitive(true);
                    changed = true;
                    new_values.push(v);
                }
                None => new_values.push(value),
            }
        }
        if changed {
            headers.remove(&name);
            for v in new_values {
                headers.append(name.clone(), v);
            }
        }
    }
    for b in &bound {
        let Some(template) = &b.header else { continue };
        let Ok(name) = HeaderName::from_bytes(template.name().as_bytes()) else {
            continue;
        };
        let Ok(mut value) = HeaderValue::from_str(&template.render(b.value.expose())) else {
            continue;
        };
        value.set_sensitive(true);
        headers.remove(&name);
        headers.insert(name, value);
        out.used.insert(b.name.to_string());
    }
    out
}

/// Whether one of the binding's patterns names `port` explicitly (and matches `host`).
fn names_port(binding: &Binding, host: &str, port: u16) -> bool {
    let host = airlock_config::policy::normalize_host(host);
    binding
        .hosts
        .iter()
        .any(|p| p.port() == Some(port) && p.matches_host(&host))
}

/// The value with bound placeholders replaced, or `None` when nothing was replaced.
fn substitute_value(
    name: &HeaderName,
    value: &[u8],
    bound: &[&Binding],
    out: &mut Substitution,
) -> Option<Vec<u8>> {
    if bound.is_empty() {
        return None;
    }
    if *name == AUTHORIZATION || *name == PROXY_AUTHORIZATION {
        if let Some(creds) = basic_credentials(value) {
            let decoded = BASE64.decode(creds).ok()?;
            let replaced = replace_all(&decoded, bound, out)?;
            let mut v = value[..value.len() - creds.len()].to_vec();
            v.extend_from_slice(BASE64.encode(replaced).as_bytes());
            return Some(v);
        }
    }
    replace_all(value, bound, out)
}

/// The base64 part of `Basic <credentials>` (scheme case-insensitive, RFC 7617).
fn basic_credentials(value: &[u8]) -> Option<&[u8]> {
    let scheme = value.get(..6)?;
    if scheme.eq_ignore_ascii_case(b"basic ") {
        Some(value[6..].trim_ascii())
    } else {
        None
    }
}

fn replace_all(text: &[u8], bound: &[&Binding], out: &mut Substitution) -> Option<Vec<u8>> {
    let mut current: Option<Vec<u8>> = None;
    for b in bound {
        let haystack = current.as_deref().unwrap_or(text);
        if let Some(next) = replace(
            haystack,
            b.placeholder.as_bytes(),
            b.value.expose().as_bytes(),
        ) {
            out.used.insert(b.name.to_string());
            current = Some(next);
        }
    }
    current
}

fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = haystack;
    let mut found = false;
    while let Some(i) = rest.windows(needle.len()).position(|w| w == needle) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(with);
        rest = &rest[i + needle.len()..];
        found = true;
    }
    if !found {
        return None;
    }
    out.extend_from_slice(rest);
    Some(out)
}

/// Finds placeholders in a streamed body, across chunk boundaries.
#[derive(Debug)]
pub struct BodyScanner {
    carry: Vec<u8>,
    keep: usize,
    found: BTreeSet<String>,
}

impl BodyScanner {
    /// A scanner for the placeholders of `table`.
    pub fn new(table: &SecretBindings) -> BodyScanner {
        BodyScanner {
            carry: Vec::new(),
            keep: table.max_placeholder_len().saturating_sub(1),
            found: BTreeSet::new(),
        }
    }

    /// Scans the next chunk.
    pub fn feed(&mut self, chunk: &[u8], table: &SecretBindings) {
        if self.keep == 0 {
            return;
        }
        let mut window = std::mem::take(&mut self.carry);
        window.extend_from_slice(chunk);
        for b in table.find_in(&window) {
            self.found.insert(b.name.to_string());
        }
        let start = window.len().saturating_sub(self.keep);
        self.carry = window.split_off(start);
    }

    /// The names of the secrets whose placeholders were seen.
    pub fn found(&self) -> &BTreeSet<String> {
        &self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_config::policy::HostPattern;
    use airlock_secrets::{HeaderTemplate, Redacted, SecretName};

    const PH: &str = "airlock-secret-0123456789abcdef0123456789abcdef";

    fn table(header: Option<&str>) -> SecretBindings {
        table_carried_in(header, &[])
    }

    fn table_carried_in(header: Option<&str>, carriers: &[&str]) -> SecretBindings {
        SecretBindings::new(vec![Binding {
            name: SecretName::parse("TOKEN").unwrap(),
            placeholder: PH.into(),
            value: Redacted::new("s3cr3t".into()),
            hosts: vec![HostPattern::parse("api.example.com").unwrap()],
            header: header.map(|h| HeaderTemplate::parse(h).unwrap()),
            headers: carriers.iter().map(|h| (*h).to_owned()).collect(),
        }])
    }

    fn headers(list: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in list {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn placeholder_in_a_header_is_replaced_for_the_bound_host_only() {
        let t = table_carried_in(None, &["x-api-key"]);
        let mut h = headers(&[("x-api-key", PH)]);
        let s = substitute_headers(&mut h, "/", ("api.example.com", 443), Channel::Tls, &t);
        assert_eq!(h["x-api-key"], "s3cr3t");
        assert!(h["x-api-key"].is_sensitive());
        assert_eq!(s.used.iter().collect::<Vec<_>>(), ["TOKEN"]);
        let mut h = headers(&[("x-api-key", PH)]);
        let s = substitute_headers(&mut h, "/", ("other.example.com", 443), Channel::Tls, &t);
        assert_eq!(h["x-api-key"], PH);
        assert!(s.used.is_empty());
        assert_eq!(s.warnings.len(), 1);
        assert!(s.warnings[0].contains("TOKEN") && !s.warnings[0].contains("s3cr3t"));
    }

    #[test]
    fn placeholder_in_a_header_the_binding_does_not_name_is_left_and_warned() {
        let t = table(Some("X-Token: {value}"));
        let mut h = headers(&[("x-echo", PH), ("cookie", PH), ("X-Token", PH)]);
        let s = substitute_headers(&mut h, "/", ("api.example.com", 443), Channel::Tls, &t);
        assert_eq!(h["x-echo"], PH);
        assert_eq!(h["cookie"], PH);
        assert_eq!(h["x-token"], "s3cr3t", "the template's header is a carrier");
        assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
        assert!(s.warnings.iter().all(|w| !w.contains("s3cr3t")));
    }

    #[test]
    fn placeholder_inside_basic_credentials_is_replaced() {
        let t = table(None);
        let basic = format!("Basic {}", BASE64.encode(format!("user:{PH}")));
        let mut h = headers(&[("authorization", &basic)]);
        substitute_headers(&mut h, "/", ("api.example.com", 443), Channel::Tls, &t);
        assert_eq!(
            h["authorization"],
            format!("Basic {}", BASE64.encode("user:s3cr3t"))
        );
    }

    #[test]
    fn template_replaces_the_client_header_instead_of_duplicating_it() {
        let t = table(Some("Authorization: Bearer {value}"));
        let mut h = headers(&[("authorization", "Bearer client-made"), ("accept", "*/*")]);
        let s = substitute_headers(&mut h, "/", ("api.example.com", 443), Channel::Tls, &t);
        let all: Vec<_> = h.get_all("authorization").iter().collect();
        assert_eq!(all, ["Bearer s3cr3t"]);
        assert!(s.used.contains("TOKEN"));
    }

    #[test]
    fn placeholder_in_the_query_is_left_and_warned_even_for_the_bound_host() {
        let t = table(None);
        let mut h = HeaderMap::new();
        let s = substitute_headers(
            &mut h,
            &format!("/x?key={PH}"),
            ("api.example.com", 443),
            Channel::Tls,
            &t,
        );
        assert!(s.used.is_empty());
        assert!(s.warnings[0].contains("request target"), "{:?}", s.warnings);
    }

    #[test]
    fn portless_binding_is_not_substituted_over_cleartext_http() {
        let t = table(Some("Authorization: Bearer {value}"));
        let mut h = headers(&[("x-api-key", PH)]);
        let s = substitute_headers(&mut h, "/", ("api.example.com", 80), Channel::Cleartext, &t);
        assert_eq!(h["x-api-key"], PH);
        assert!(h.get("authorization").is_none());
        assert!(s.used.is_empty());
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    }

    #[test]
    fn body_scanner_finds_placeholders_split_across_chunks() {
        let t = table(None);
        let mut scan = BodyScanner::new(&t);
        let body = format!("{{\"k\":\"{PH}\"}}");
        for chunk in body.as_bytes().chunks(5) {
            scan.feed(chunk, &t);
        }
        assert!(scan.found().contains("TOKEN"));
    }
}
