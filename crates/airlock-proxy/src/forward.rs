//! Forwarding HTTP requests: plain forward proxying and requests inside intercepted TLS.
//!
//! Order of operations for one request ([`forward_http`], [`forward_intercepted`]):
//! 1. work out the destination from the request target (absolute-form for plain HTTP; the
//!    CONNECT host for intercepted TLS) and refuse a `Host` header that disagrees (N4);
//! 2. check the destination: the full policy and address check for plain HTTP
//!    ([`check_target`]); for intercepted requests the policy again (it may have been updated
//!    since the CONNECT) — the address was checked at CONNECT time;
//! 3. substitute secrets into the headers and collect warnings ([`substitute_headers`]);
//! 4. drop hop-by-hop headers (RFC 9110 §7.6.1), rewrite the target to origin-form;
//! 5. send over a per-client-connection upstream connection to the *checked address* (never
//!    a second DNS lookup), TLS-verified for intercepted hosts;
//! 6. stream the response back; the audit line is written when it ends ([`AuditGuard`]).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, HOST};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::audit::{Mode, Verdict};
use crate::body::{AuditGuard, CountBody, RequestNotes, ScanBody};
use crate::clock::rfc3339_now;
use crate::denial::{Denial, DenyReason};
use crate::respond::{bad_host, deny, fail, malformed, BoxError, ProxyBody, RequestStart};
use crate::shared::{Runtime, Shared};
use crate::substitute::{substitute_headers, Channel};
use crate::target::{check_target, rule_text, CheckedTarget, TargetError};

/// How long connecting to an upstream may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A live upstream connection: the checked address and host it goes to, and its sender.
type Upstream = (SocketAddr, String, SendRequest<ScanBody>);

/// One reusable upstream connection per client connection, keyed by address and host.
#[derive(Clone, Default)]
pub struct UpstreamSlot(Arc<tokio::sync::Mutex<Option<Upstream>>>);

/// Splits a `Host` header value into host and port.
fn parse_host_header(value: &HeaderValue, default_port: u16) -> Option<(String, u16)> {
    let text = value.to_str().ok()?;
    let auth: hyper::http::uri::Authority = text.parse().ok()?;
    Some((
        airlock_config::policy::normalize_host(auth.host()),
        auth.port_u16().unwrap_or(default_port),
    ))
}

/// N4: at most one `Host` header, and when present it names `host:port` (a `Host` without a
/// port means `default_port`). Used for plain HTTP, intercepted requests and CONNECT alike.
pub(crate) fn host_check(
    headers: &HeaderMap,
    host: &str,
    port: u16,
    default_port: u16,
) -> Option<Denial> {
    let denial = |reason| {
        Some(Denial {
            host: host.to_owned(),
            port,
            reason,
        })
    };
    let mut values = headers.get_all(HOST).iter();
    let value = values.next()?;
    let count = 1 + values.count();
    if count > 1 {
        return denial(DenyReason::DuplicateHost { count });
    }
    match parse_host_header(value, default_port) {
        Some((h, p)) if h == host && p == port => None,
        Some(_) | None => denial(DenyReason::HostMismatch {
            header: String::from_utf8_lossy(value.as_bytes()).into_owned(),
        }),
    }
}

/// [`check_target`] for `host:port` under the request's `runtime`, or the audited answer
/// refusing it (403, or 502 when the name does not resolve).
pub(crate) async fn checked_target(
    shared: &Shared,
    runtime: &Runtime,
    start: &RequestStart,
    (host, port): (&str, u16),
) -> Result<CheckedTarget, Response<ProxyBody>> {
    match check_target(host, port, &runtime.policy, &shared.hosts).await {
        Ok(t) => Ok(t),
        Err(TargetError::Denied(denial)) => Err(deny(shared, start, &denial)),
        Err(e @ (TargetError::Resolve { .. } | TargetError::NoAddress { .. })) => {
            let rule = rule_text(&runtime.policy.decide(host, port));
            let at = (host, port);
            Err(fail(
                shared,
                start,
                at,
                rule,
                StatusCode::BAD_GATEWAY,
                e.to_string(),
            ))
        }
    }
}

/// A TCP connection to a checked address, with [`CONNECT_TIMEOUT`] and `TCP_NODELAY`.
pub(crate) async fn connect_tcp(addr: SocketAddr) -> Result<TcpStream, String> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

/// Forwards one plain-HTTP proxy request (absolute-form target).
pub(crate) async fn forward_http(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: UpstreamSlot,
) -> Response<ProxyBody> {
    let start = RequestStart {
        time: rfc3339_now(),
        method: req.method().to_string(),
        mode: Mode::Http,
    };
    let uri = req.uri().clone();
    let Some(authority) = uri.authority().filter(|_| uri.scheme_str() == Some("http")) else {
        let text = match uri.scheme_str() {
            Some("https") => "send HTTPS through CONNECT (set HTTPS_PROXY)".to_owned(),
            _ => "this is an HTTP proxy: send absolute-form requests (http://host/path)".to_owned(),
        };
        return malformed(&shared, &start, text);
    };
    let host = airlock_config::policy::normalize_host(authority.host());
    let port = authority.port_u16().unwrap_or(80);
    if let Some(denial) = host_check(req.headers(), &host, port, 80) {
        return bad_host(&shared, &start, &denial);
    }
    let runtime = shared.runtime();
    let target = match checked_target(&shared, &runtime, &start, (&host, port)).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    relay(req, &shared, runtime, &slot, (&target, false), start).await
}

/// Forwards one request received inside an intercepted TLS connection to `target`.
pub(crate) async fn forward_intercepted(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: UpstreamSlot,
    target: Arc<CheckedTarget>,
) -> Response<ProxyBody> {
    let start = RequestStart {
        time: rfc3339_now(),
        method: req.method().to_string(),
        mode: Mode::Intercept,
    };
    let (host, port) = (target.host.as_str(), target.port);
    let uri_mismatch = req.uri().authority().is_some_and(|a| {
        airlock_config::policy::normalize_host(a.host()) != host
            || a.port_u16().unwrap_or(443) != port
    });
    if uri_mismatch {
        let denial = Denial {
            host: host.to_owned(),
            port,
            reason: DenyReason::HostMismatch {
                header: req.uri().to_string(),
            },
        };
        return bad_host(&shared, &start, &denial);
    }
    if let Some(denial) = host_check(req.headers(), host, port, 443) {
        return bad_host(&shared, &start, &denial);
    }
    let runtime = shared.runtime();
    let decision = runtime.policy.decide(host, port);
    if !decision.allowed {
        let denial = Denial {
            host: host.to_owned(),
            port,
            reason: DenyReason::Policy {
                rule: rule_text(&decision),
            },
        };
        return deny(&shared, &start, &denial);
    }
    let target = CheckedTarget {
        rule: rule_text(&decision),
        ..(*target).clone()
    };
    relay(req, &shared, runtime, &slot, (&target, true), start).await
}

/// Steps 3–6 of the module docs, under the request's one `runtime` snapshot.
async fn relay(
    req: Request<Incoming>,
    shared: &Arc<Shared>,
    runtime: Arc<Runtime>,
    slot: &UpstreamSlot,
    (target, tls): (&CheckedTarget, bool),
    start: RequestStart,
) -> Response<ProxyBody> {
    let (host, port) = (target.host.as_str(), target.port);
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let channel = if tls {
        Channel::Tls
    } else {
        Channel::Cleartext
    };
    let subst = substitute_headers(
        &mut parts.headers,
        &path,
        (host, port),
        channel,
        &runtime.bindings,
    );
    strip_hop_by_hop(&mut parts.headers);
    parts.uri = path
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = Version::HTTP_11;
    if !parts.headers.contains_key(HOST) {
        let default = if tls { 443 } else { 80 };
        let value = if port == default {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            parts.headers.insert(HOST, v);
        }
    }
    let notes = Arc::new(RequestNotes::default());
    let body = ScanBody::new(body, &runtime, notes.clone());
    let upstream = Request::from_parts(parts, body);
    let result = match upstream_sender(shared, slot, target, tls).await {
        Ok(mut sender) => {
            let r = sender
                .send_request(upstream)
                .await
                .map_err(|e| e.to_string());
            *slot.0.lock().await = Some((target.addr, target.host.clone(), sender));
            r
        }
        Err(e) => Err(e),
    };
    let mut resp = match result {
        Ok(resp) => resp,
        Err(reason) => {
            let text = format!("cannot reach {host}:{port}: {reason}");
            return fail(
                shared,
                &start,
                (host, port),
                target.rule.clone(),
                StatusCode::BAD_GATEWAY,
                text,
            );
        }
    };
    strip_hop_by_hop(resp.headers_mut());
    let mut entry = start.entry(
        host,
        port,
        Verdict::Allow,
        target.rule.clone(),
        resp.status().as_u16(),
    );
    entry.secrets = subst.used.into_iter().collect();
    entry.warnings = subst.warnings;
    let guard = AuditGuard::new(shared.audit.clone(), entry, Some(notes));
    resp.map(|b| {
        CountBody::new(b, guard)
            .map_err(|e| Box::new(e) as BoxError)
            .boxed()
    })
}

/// A ready sender to `target`: the slot's if it points there and is alive, else a new one.
async fn upstream_sender(
    shared: &Arc<Shared>,
    slot: &UpstreamSlot,
    target: &CheckedTarget,
    tls: bool,
) -> Result<SendRequest<ScanBody>, String> {
    let cached = slot.0.lock().await.take();
    if let Some((addr, host, mut sender)) = cached {
        if addr == target.addr && host == target.host && sender.ready().await.is_ok() {
            return Ok(sender);
        }
    }
    let tcp = connect_tcp(target.addr).await?;
    if !tls {
        let io = TokioIo::new(ShutdownAfterOthers::new(tcp));
        let (sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        shared.spawn(async move {
            let _ = conn.await;
        });
        return Ok(sender);
    }
    let name = ServerName::try_from(target.host.clone()).map_err(|e| e.to_string())?;
    let config = shared.upstream_tls.config().await.map_err(|e| {
        tracing::error!(error = %e, "cannot build the upstream trust store");
        format!("upstream trust store: {e}")
    })?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let stream = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("upstream TLS verification failed: {e}"))?;
    let io = TokioIo::new(ShutdownAfterOthers::new(stream));
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    shared.spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// An upstream stream whose shutdown lets every task already woken run first.
///
/// When an upstream answers with `Connection: close`, hyper's connection task reads the last
/// bytes, hands them to the response body (waking the task that writes them to the sandbox
/// client) and, in the same poll, shuts the socket down and closes it: the FIN, its loopback
/// delivery and the close then ran before the client got its answer (B5: a forwarded plain
/// HTTP request paid them in series). The first `poll_shutdown` therefore only schedules
/// itself again; the shutdown itself is unchanged, one turn of the runtime later.
struct ShutdownAfterOthers<S> {
    inner: S,
    yielded: bool,
}

impl<S> ShutdownAfterOthers<S> {
    fn new(inner: S) -> Self {
        ShutdownAfterOthers {
            inner,
            yielded: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ShutdownAfterOthers<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ShutdownAfterOthers<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), including those `Connection` names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(name);
    }
}
