//! CONNECT: tunnelling byte for byte, or intercepting TLS for hosts with bound secrets.
//!
//! Order of operations in [`handle_connect`]:
//! 1. parse `host:port`; refuse more than one `Host` or one naming another target (400, N4);
//!    run the full policy and address check ([`check_target`]); a denial is
//!    the N9 403 answer to the CONNECT itself;
//! 2. connect to the checked address (failure: 502), then answer 200 and take over the
//!    connection (hyper upgrade, recovering the raw stream and any bytes already read);
//! 3. buffer the client's ClientHello ([`parse_client_hello`]); for a name target require an
//!    SNI equal to the CONNECT host (N4), else send a TLS `access_denied` alert and close;
//!    an IP-literal target (only reachable through an exact rule) carries no SNI to check;
//! 4. hosts with bound secrets: terminate TLS with a leaf from the installation CA and serve
//!    the requests inside through [`forward_intercepted`], which connects upstream with full
//!    certificate verification (N6); every other host: replay the buffered bytes to the
//!    upstream and carry both directions untouched (`splice(2)`, see [`crate::splice`]).

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::upgrade::Upgraded;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::server::{ClientHello as RustlsHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::audit::{Mode, Verdict};
use crate::denial::{Denial, DenyReason, TLS_ACCESS_DENIED};
use crate::forward::{checked_target, connect_tcp, forward_intercepted, host_check, UpstreamSlot};
use crate::respond::{bad_host, fail, malformed, text_response, ProxyBody, RequestStart};
use crate::shared::Shared;
use crate::sni::{parse_client_hello, HelloError};
use crate::splice::{splice_bidirectional, SpliceSocket};
use crate::target::CheckedTarget;
use crate::tls::{provider, Prefixed};

/// How long a client may take to send its ClientHello after the 200.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Buffer size of each direction of a tunnel.
const TUNNEL_BUF: usize = 64 * 1024;

/// Answers a CONNECT request and spawns the tunnel (see the module docs).
pub(crate) async fn handle_connect<S: ClientStream>(
    req: Request<Incoming>,
    shared: Arc<Shared>,
) -> Response<ProxyBody> {
    let start = RequestStart {
        time: crate::clock::rfc3339_now(),
        method: "CONNECT".to_owned(),
        mode: Mode::Tunnel,
    };
    let Some((host, port)) = req
        .uri()
        .authority()
        .and_then(|a| Some((a.host().to_owned(), a.port_u16()?)))
    else {
        return malformed(&shared, &start, "CONNECT needs host:port".to_owned());
    };
    let host = airlock_config::policy::normalize_host(&host);
    if let Some(denial) = host_check(req.headers(), &host, port, port) {
        return bad_host(&shared, &start, &denial);
    }
    let runtime = shared.runtime();
    let target = match checked_target(&shared, &runtime, &start, (&host, port)).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let upstream = match connect_tcp(target.addr).await {
        Ok(s) => s,
        Err(reason) => {
            let text = format!("cannot reach {}:{port}: {reason}", target.host);
            let at = (target.host.as_str(), port);
            return fail(
                &shared,
                &start,
                at,
                target.rule.clone(),
                StatusCode::BAD_GATEWAY,
                text,
            );
        }
    };
    let intercept = !runtime.bindings.bound_to(&target.host, port).is_empty();
    let tunnel = Tunnel {
        shared: shared.clone(),
        target,
        start,
        intercept,
    };
    shared.spawn(take_over::<S>(req, tunnel, upstream));
    text_response(StatusCode::OK, String::new())
}

/// After the 200: recovers the client's raw stream (and bytes already read) and runs the tunnel.
async fn take_over<S: ClientStream>(req: Request<Incoming>, tunnel: Tunnel, upstream: TcpStream) {
    let upgraded = match hyper::upgrade::on(req).await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(error = %e, "CONNECT upgrade failed");
            return;
        }
    };
    match upgraded.downcast::<TokioIo<S>>() {
        Ok(parts) => {
            let client = parts.io.into_inner();
            tunnel.run(client, parts.read_buf, upstream).await
        }
        Err(upgraded) => {
            let client = TokioIo::new(upgraded);
            tunnel.run(client, Bytes::new(), upstream).await
        }
    }
}

impl Tunnel {
    /// Audits an interception that ended before any request (the connection is closed).
    fn audit_failed(&self, why: &str) {
        let (host, port) = (&self.target.host, self.target.port);
        let rule = self.target.rule.clone();
        let mut entry = self.start.entry(host, port, Verdict::Allow, rule, 502);
        entry.mode = Mode::Intercept;
        entry.warnings.push(why.to_owned());
        self.shared.audit.append(&entry);
    }
}

/// A client connection the tunnel can carry: raw sockets go through `splice(2)`, anything else
/// (a hyper upgrade that could not be unwrapped) through a user-space copy.
pub(crate) trait ClientStream:
    AsyncRead + AsyncWrite + Unpin + Send + Sized + 'static
{
    /// Carries bytes both ways until both ended; returns (client → upstream, upstream → client).
    fn carry(self, upstream: TcpStream) -> impl Future<Output = (u64, u64)> + Send;
}

async fn splice_carry<S: SpliceSocket>(client: S, upstream: TcpStream) -> (u64, u64) {
    let (counts, result) = splice_bidirectional(&client, &upstream).await;
    if let Err(e) = result {
        tracing::debug!(error = %e, "tunnel ended with an error");
    }
    counts
}

impl ClientStream for TcpStream {
    async fn carry(self, upstream: TcpStream) -> (u64, u64) {
        splice_carry(self, upstream).await
    }
}

impl ClientStream for UnixStream {
    async fn carry(self, upstream: TcpStream) -> (u64, u64) {
        splice_carry(self, upstream).await
    }
}

impl ClientStream for TokioIo<Upgraded> {
    async fn carry(mut self, mut upstream: TcpStream) -> (u64, u64) {
        let copied = tokio::io::copy_bidirectional_with_sizes(
            &mut self,
            &mut upstream,
            TUNNEL_BUF,
            TUNNEL_BUF,
        )
        .await;
        copied.unwrap_or((0, 0))
    }
}

/// One accepted CONNECT after the 200.
struct Tunnel {
    shared: Arc<Shared>,
    target: CheckedTarget,
    start: RequestStart,
    intercept: bool,
}

impl Tunnel {
    async fn run<T: ClientStream>(self, mut client: T, initial: Bytes, upstream: TcpStream) {
        let mut buf = BytesMut::from(&initial[..]);
        let is_ip = self.target.host.parse::<IpAddr>().is_ok();
        if !is_ip {
            let verdict = read_hello(&mut client, &mut buf).await;
            let reason = match verdict {
                Ok(Some(sni))
                    if airlock_config::policy::normalize_host(&sni) == self.target.host =>
                {
                    None
                }
                Ok(sni) => Some(DenyReason::SniMismatch { sni }),
                Err(HelloRead::Closed) => return,
                Err(HelloRead::Bad(HelloError::NotTls)) => Some(DenyReason::NotTls),
                Err(HelloRead::Bad(
                    HelloError::NotClientHello
                    | HelloError::Malformed { .. }
                    | HelloError::TooLarge,
                )) => Some(DenyReason::SniMismatch { sni: None }),
            };
            if let Some(reason) = reason {
                if !matches!(reason, DenyReason::NotTls) {
                    let _ = client.write_all(&TLS_ACCESS_DENIED).await;
                }
                let _ = client.shutdown().await;
                let denial = Denial {
                    host: self.target.host.clone(),
                    port: self.target.port,
                    reason,
                };
                let entry =
                    self.start
                        .entry(&denial.host, denial.port, Verdict::Deny, denial.rule(), 403);
                self.shared.audit.append(&entry);
                return;
            }
        }
        if self.intercept {
            drop(upstream); // requests inside open their own verified TLS connections
            self.intercept(Prefixed::new(buf.freeze(), client)).await;
        } else {
            self.tunnel(client, buf.freeze(), upstream).await;
        }
    }

    async fn tunnel<T: ClientStream>(self, client: T, hello: Bytes, mut upstream: TcpStream) {
        let mut entry = self.start.entry(
            &self.target.host,
            self.target.port,
            Verdict::Allow,
            self.target.rule.clone(),
            200,
        );
        if upstream.write_all(&hello).await.is_ok() {
            (entry.bytes_up, entry.bytes_down) = client.carry(upstream).await;
        }
        entry.bytes_up += hello.len() as u64;
        self.shared.audit.append(&entry);
    }

    async fn intercept<T>(self, client: Prefixed<T>)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let host = self.target.host.clone();
        // The CA decides when a host's leaf is issued again; a kept configuration is used
        // only while it still presents the CA's current leaf for this host.
        let config = self
            .shared
            .ca()
            .and_then(|ca| ca.leaf(&host))
            .map_err(|e| {
                tracing::error!(error = %e, %host, "cannot intercept: no certificate");
            })
            .and_then(|leaf| {
                self.shared.server_configs.get_or_try_insert_if(
                    &host,
                    |(_, presented)| Arc::ptr_eq(presented, &leaf),
                    || {
                        server_config(leaf.clone())
                            .map(|c| (c, leaf.clone()))
                            .ok_or(())
                    },
                )
            })
            .map(|(config, _)| config);
        let config = config.ok();
        let Some(config) = config else {
            // The connection closes without a handshake; the audit says why.
            self.audit_failed("the interception CA is unavailable; see the proxy's error log");
            return;
        };
        let tls = match tokio_rustls::TlsAcceptor::from(config).accept(client).await {
            Ok(s) => s,
            Err(e) => {
                self.audit_failed(&format!(
                    "the client refused the airlock interception certificate ({e}); is the airlock CA in its trust store?"
                ));
                return;
            }
        };
        let slot = UpstreamSlot::default();
        let target = Arc::new(self.target);
        let shared = self.shared;
        let service = service_fn(move |req: Request<Incoming>| {
            let (shared, slot, target) = (shared.clone(), slot.clone(), target.clone());
            async move {
                Ok::<_, std::convert::Infallible>(
                    forward_intercepted(req, shared, slot, target).await,
                )
            }
        });
        if let Err(e) = crate::shared::client_http1()
            .serve_connection(TokioIo::new(tls), service)
            .await
        {
            tracing::debug!(error = %e, "intercepted connection ended with an error");
        }
    }
}

enum HelloRead {
    /// The client closed (or timed out) before a complete ClientHello.
    Closed,
    /// The bytes are not an acceptable ClientHello.
    Bad(HelloError),
}

/// Reads into `buf` until it holds a complete ClientHello; returns its SNI.
async fn read_hello<T: AsyncRead + Unpin>(
    client: &mut T,
    buf: &mut BytesMut,
) -> Result<Option<String>, HelloRead> {
    let deadline = tokio::time::Instant::now() + HELLO_TIMEOUT;
    loop {
        match parse_client_hello(buf) {
            Ok(Some(hello)) => return Ok(hello.sni),
            Ok(None) => {}
            Err(e) => return Err(HelloRead::Bad(e)),
        }
        buf.reserve(4096);
        match tokio::time::timeout_at(deadline, client.read_buf(buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Err(HelloRead::Closed),
            Ok(Ok(_)) => {}
        }
    }
}

/// Intercepted hosts whose TLS server configuration is kept ([`Shared::server_configs`]).
pub(crate) const MAX_SERVER_CONFIGS: usize = 64;

/// Presents one certificate whatever the client asks (the SNI was checked already).
#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _hello: RustlsHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

fn server_config(leaf: Arc<CertifiedKey>) -> Option<Arc<ServerConfig>> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tracing::error!(error = %e, "TLS server configuration"))
        .ok()?;
    let mut config = builder
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(FixedCert(leaf)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Some(Arc::new(config))
}
