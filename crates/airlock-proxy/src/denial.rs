//! Explicit, identical denials (N9).
//!
//! Every refusal becomes a [`Denial`]: the host and port asked for, what refused it, and the
//! deciding rule. It renders as an HTTP 403 (also as the answer to a CONNECT) with an
//! `X-Airlock-Policy` header and a plain-text body naming the host, the rule and the command
//! that would allow it, so an agent stops instead of retrying around the block. The answer
//! depends only on the request, never on time or on earlier requests.
//!
//! A request that names its destination ambiguously (more than one `Host`, or a `Host` that
//! disagrees with the target, N4) is a bad request: it is answered 400 with the same rule text
//! (see `crate::respond::bad_host`) and audited as a denial.
//!
//! A denial decided after a CONNECT was already answered (the SNI check, N4) cannot be an HTTP
//! response any more; it ends the TLS handshake with a fatal `access_denied` alert
//! (RFC 8446 §6.2) and is audited like every other denial.

use std::fmt;
use std::net::IpAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

use crate::addr::AddrClass;

/// The header that carries the machine-readable denial.
pub const POLICY_HEADER: &str = "x-airlock-policy";

/// What refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenyReason {
    /// The policy: a deny rule, or no allow rule.
    Policy {
        /// The deciding rule, e.g. `deny **.example.com (user config)`.
        rule: String,
    },
    /// The target is an IP literal that no rule names exactly (N3).
    IpLiteral,
    /// The name resolved only to refused addresses (N3).
    InternalAddress {
        /// The first refused address.
        addr: IpAddr,
        /// Its class.
        class: AddrClass,
    },
    /// The TLS server name differs from the CONNECT host, or is missing (N4).
    SniMismatch {
        /// The server name sent, if any.
        sni: Option<String>,
    },
    /// The client did not speak TLS after a CONNECT to a name (N4 cannot be checked).
    NotTls,
    /// The `Host` header disagrees with the request target (N4).
    HostMismatch {
        /// The `Host` header sent.
        header: String,
    },
    /// The request carries more than one `Host` header (N4).
    DuplicateHost {
        /// How many it carries.
        count: usize,
    },
}

/// One refusal (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The host asked for (normalized).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// What refused it.
    pub reason: DenyReason,
}

impl Denial {
    /// The name of the deciding rule, as written to the audit log and the header.
    pub fn rule(&self) -> String {
        match &self.reason {
            DenyReason::Policy { rule } => sanitize(rule),
            DenyReason::IpLiteral => "IP-literal targets need an exact rule (N3)".to_owned(),
            DenyReason::InternalAddress { addr, class } => format!(
                "resolves to {class} address {addr}; internal addresses need an exact rule (N3)"
            ),
            DenyReason::SniMismatch { sni: Some(sni) } => format!(
                "TLS server name {} differs from the CONNECT host (N4)",
                sanitize(sni)
            ),
            DenyReason::SniMismatch { sni: None } => {
                "TLS ClientHello without a server name (N4)".to_owned()
            }
            DenyReason::NotTls => "CONNECT to a name must carry TLS (N4)".to_owned(),
            DenyReason::HostMismatch { header } => format!(
                "Host header {} differs from the request target (N4)",
                sanitize(header)
            ),
            DenyReason::DuplicateHost { count } => {
                format!("more than one Host header ({count}) (N4)")
            }
        }
    }

    /// The command that would allow the host.
    pub fn allow_command(&self) -> String {
        let host = match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            Ok(IpAddr::V4(_)) | Err(_) => self.host.clone(),
        };
        if self.port == 80 || self.port == 443 {
            format!("airlock policy allow {host}")
        } else {
            format!("airlock policy allow {host}:{}", self.port)
        }
    }

    /// The `X-Airlock-Policy` header value.
    pub fn header_value(&self) -> String {
        format!(
            "denied; host={}:{}; rule=\"{}\"; allow=\"{}\"",
            sanitize(&self.host),
            self.port,
            self.rule().replace('"', "'"),
            self.allow_command()
        )
    }

    /// The full 403 answer.
    pub fn response(&self) -> Response<Full<Bytes>> {
        let body = format!(
            "airlock: request to {}:{} denied\nrule: {}\nto allow it, run on the host: {}\n",
            sanitize(&self.host),
            self.port,
            self.rule(),
            self.allow_command()
        );
        let header = HeaderValue::from_str(&self.header_value())
            .unwrap_or_else(|_| HeaderValue::from_static("denied"));
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = StatusCode::FORBIDDEN;
        resp.headers_mut().insert(POLICY_HEADER, header);
        resp.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} denied", self.host, self.port)
    }
}

/// Visible ASCII and spaces only (a sandbox-chosen string must not break the header or drive a terminal).
pub fn sanitize(text: &str) -> String {
    text.chars()
        .take(255)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// A fatal TLS `access_denied` alert record (RFC 8446 §6.2, code 49).
pub const TLS_ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_answer_names_host_rule_and_allow_command_and_is_identical_every_time() {
        let d = Denial {
            host: "evil.example".into(),
            port: 443,
            reason: DenyReason::Policy {
                rule: "no rule allows it (preset dev)".into(),
            },
        };
        let a = d.response();
        let b = d.response();
        assert_eq!(a.status(), StatusCode::FORBIDDEN);
        let h = a.headers()[POLICY_HEADER].to_str().unwrap();
        assert_eq!(h, b.headers()[POLICY_HEADER].to_str().unwrap());
        assert!(h.contains("host=evil.example:443"), "{h}");
        assert!(h.contains("rule=\"no rule allows it (preset dev)\""), "{h}");
        assert!(
            h.contains("allow=\"airlock policy allow evil.example\""),
            "{h}"
        );
    }

    #[test]
    fn allow_command_keeps_non_default_ports_and_brackets_ipv6() {
        let d = |host: &str, port| Denial {
            host: host.into(),
            port,
            reason: DenyReason::IpLiteral,
        };
        assert_eq!(
            d("a.b", 8080).allow_command(),
            "airlock policy allow a.b:8080"
        );
        assert_eq!(d("::1", 443).allow_command(), "airlock policy allow [::1]");
        assert_eq!(
            d("10.0.0.1", 22).allow_command(),
            "airlock policy allow 10.0.0.1:22"
        );
    }

    #[test]
    fn sandbox_chosen_text_cannot_inject_header_lines() {
        let d = Denial {
            host: "a.b".into(),
            port: 80,
            reason: DenyReason::HostMismatch {
                header: "x\r\nSet-Cookie: y\x1b[2J".into(),
            },
        };
        let v = d.header_value();
        assert!(
            !v.contains('\r') && !v.contains('\n') && !v.contains('\x1b'),
            "{v}"
        );
        assert!(HeaderValue::from_str(&v).is_ok());
    }
}
