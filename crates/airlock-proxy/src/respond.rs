//! The answers the proxy makes itself, and the audit line each one writes: the N9 denial, a
//! failure (bad request, unreachable upstream), a malformed proxy request; and the body type
//! every proxy response has.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};

use crate::audit::{AuditEntry, Mode, Verdict};
use crate::denial::Denial;
use crate::shared::Shared;

/// Errors of any body the proxy returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type of every proxy response.
pub type ProxyBody = BoxBody<Bytes, BoxError>;

/// What the audit line of a request starts from.
pub(crate) struct RequestStart {
    pub time: String,
    pub method: String,
    pub mode: Mode,
}

impl RequestStart {
    pub fn entry(
        &self,
        host: &str,
        port: u16,
        decision: Verdict,
        rule: String,
        status: u16,
    ) -> AuditEntry {
        AuditEntry {
            time: self.time.clone(),
            method: self.method.clone(),
            host: host.to_owned(),
            port,
            decision,
            rule,
            status,
            bytes_up: 0,
            bytes_down: 0,
            mode: self.mode,
            secrets: Vec::new(),
            warnings: Vec::new(),
            repeated: None,
            last: None,
        }
    }
}

/// A complete small response as a [`ProxyBody`] response.
pub(crate) fn boxed(resp: Response<Full<Bytes>>) -> Response<ProxyBody> {
    resp.map(|b| b.map_err(|never| match never {}).boxed())
}

/// A plain-text error answer.
pub(crate) fn text_response(status: StatusCode, text: String) -> Response<ProxyBody> {
    let mut resp = Response::new(Full::new(Bytes::from(text)));
    *resp.status_mut() = status;
    boxed(resp)
}

/// Audits and answers a denial (N9).
pub(crate) fn deny(shared: &Shared, start: &RequestStart, denial: &Denial) -> Response<ProxyBody> {
    let resp = denial.response();
    let entry = start.entry(&denial.host, denial.port, Verdict::Deny, denial.rule(), 403);
    shared.audit.append(&entry);
    boxed(resp)
}

/// Audits and answers a failure that is not a denial (bad request, unreachable upstream).
pub(crate) fn fail(
    shared: &Shared,
    start: &RequestStart,
    (host, port): (&str, u16),
    rule: String,
    status: StatusCode,
    text: String,
) -> Response<ProxyBody> {
    let verdict = if status == StatusCode::BAD_REQUEST {
        Verdict::Deny
    } else {
        Verdict::Allow
    };
    shared
        .audit
        .append(&start.entry(host, port, verdict, rule, status.as_u16()));
    text_response(status, format!("airlock proxy: {text}\n"))
}

/// Answers a request that is not a well-formed proxy request: 400 with `text`, audited as a
/// denial with no host (the request named none airlock could use).
pub(crate) fn malformed(
    shared: &Shared,
    start: &RequestStart,
    text: String,
) -> Response<ProxyBody> {
    let rule = "malformed proxy request".to_owned();
    fail(shared, start, ("", 0), rule, StatusCode::BAD_REQUEST, text)
}

/// Answers a request whose `Host` is ambiguous or names another destination (N4): 400 with
/// the denial's rule, audited as a denial. It never reaches policy, secrets or an upstream.
pub(crate) fn bad_host(
    shared: &Shared,
    start: &RequestStart,
    denial: &Denial,
) -> Response<ProxyBody> {
    let at = (denial.host.as_str(), denial.port);
    let text = format!(
        "bad request to {}:{}: {}",
        denial.host,
        denial.port,
        denial.rule()
    );
    fail(
        shared,
        start,
        at,
        denial.rule(),
        StatusCode::BAD_REQUEST,
        text,
    )
}
