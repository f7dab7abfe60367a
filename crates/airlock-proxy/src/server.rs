//! The proxy process side: configuration, the accept loop, live updates and shutdown.
//!
//! One [`Proxy`] serves one sandbox. [`Proxy::start`] checks what can fail cheaply (the extra
//! CA files, that a system trust store exists, the audit log) before accepting a single
//! connection, then spawns the accept loop on the current tokio runtime. Nothing a run may
//! never use is built at start: the system roots and upstream TLS config are built at the
//! first upstream TLS connection ([`crate::tls::UpstreamTrust`]), the interception CA at the
//! first interception. Each accepted connection is served by hyper's
//! HTTP/1 server; `CONNECT` requests are upgraded and handed to [`crate::connect`], everything
//! else goes through [`crate::forward`].
//!
//! Policy and secrets live in one `Arc<Runtime>` behind a lock (`crate::shared`); every request
//! clones the `Arc` once at its start and uses only that snapshot, so [`ProxyHandle::update`]
//! takes effect for the next request without a restart and never tears a request between two
//! policies.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};

use airlock_config::policy::Policy;
use airlock_secrets::SecretBindings;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::audit::{AuditError, AuditLog, Rotation, COLLAPSE_IDLE};
use crate::ca::{CaError, CertificateAuthority};
use crate::connect::ClientStream;
use crate::forward::{self, UpstreamSlot};
use crate::handoff;
use crate::host_cache::HostCache;
use crate::respond::ProxyBody;
#[cfg(test)]
use crate::shared::SnapshotHook;
use crate::shared::{proxy_http1, with_date, Runtime, Shared};
use crate::tls::{TlsSetupError, UpstreamTrust};

/// Everything one sandbox's proxy needs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The effective network policy.
    pub policy: Policy,
    /// The `[network.hosts]` map: names the proxy resolves to fixed addresses.
    pub hosts: BTreeMap<String, IpAddr>,
    /// Extra CA certificate files (PEM) trusted for upstream connections.
    pub extra_roots: Vec<PathBuf>,
    /// The secrets and their hosts.
    pub bindings: SecretBindings,
    /// The sandbox's audit log (JSON lines).
    pub audit_path: PathBuf,
    /// How large the audit log may grow.
    pub audit_rotation: Rotation,
    /// Where the interception CA lives (created on first use).
    pub ca_dir: PathBuf,
}

impl ProxyConfig {
    /// The configuration for a sandbox whose effective `[network]` settings are `network`
    /// (policy with agent hosts, `[network.hosts]`, `extra_ca`).
    pub fn from_network(
        network: &airlock_config::effective::Network,
        bindings: SecretBindings,
        audit_path: PathBuf,
        ca_dir: PathBuf,
    ) -> ProxyConfig {
        ProxyConfig {
            policy: network.policy(),
            hosts: network
                .hosts
                .iter()
                .map(|h| (h.name.clone(), h.address))
                .collect(),
            extra_roots: network.extra_ca.clone(),
            bindings,
            audit_path,
            audit_rotation: Rotation::default(),
            ca_dir,
        }
    }
}

/// What can stop the proxy from starting.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream trust store cannot be built.
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// The audit log cannot be opened.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The interception CA cannot be loaded or created.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// The listener's address cannot be read.
    #[error("cannot read the proxy listener's address: {source}")]
    Listener {
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Where the proxy listens.
#[derive(Debug)]
pub enum ProxyListener {
    /// The production shape: a Unix socket bound into the sandbox (N1).
    Unix(UnixListener),
    /// Loopback TCP, for tests and benchmarks.
    Tcp(TcpListener),
}

/// Entry point.
#[derive(Debug)]
pub struct Proxy;

impl Proxy {
    /// Starts serving `listener` with `cfg` on the current tokio runtime. The upstream trust
    /// store is `cfg.extra_roots` plus the system store ([`UpstreamTrust::prepare`]).
    pub fn start(cfg: ProxyConfig, listener: ProxyListener) -> Result<ProxyHandle, ProxyError> {
        let trust = UpstreamTrust::prepare(&cfg.extra_roots)?;
        Proxy::start_with_trust(cfg, listener, trust)
    }

    /// [`start`](Self::start) with an upstream trust store the caller prepared (e.g. another
    /// system store, [`UpstreamTrust::with_system`]); `cfg.extra_roots` is not read again.
    pub fn start_with_trust(
        cfg: ProxyConfig,
        listener: ProxyListener,
        upstream_tls: UpstreamTrust,
    ) -> Result<ProxyHandle, ProxyError> {
        let audit = Arc::new(AuditLog::open_with(&cfg.audit_path, cfg.audit_rotation)?);
        let local_tcp = match &listener {
            ProxyListener::Tcp(l) => Some(
                l.local_addr()
                    .map_err(|source| ProxyError::Listener { source })?,
            ),
            ProxyListener::Unix(_) => None,
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            runtime: RwLock::new(Arc::new(Runtime {
                policy: cfg.policy,
                bindings: cfg.bindings,
            })),
            hosts: cfg.hosts,
            upstream_tls,
            audit,
            ca_dir: cfg.ca_dir,
            ca: Mutex::new(None),
            server_configs: HostCache::new(crate::connect::MAX_SERVER_CONFIGS),
            shutdown: stop_rx,
            #[cfg(test)]
            snapshot_hook: Mutex::new(None),
            #[cfg(test)]
            trust_any_handoff_peer: std::sync::atomic::AtomicBool::new(false),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        shared.spawn(flush_idle_repeats(shared.audit.clone()));
        Ok(ProxyHandle {
            shared,
            stop: stop_tx,
            task: Some(task),
            local_tcp,
        })
    }
}

/// Controls a running proxy.
pub struct ProxyHandle {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    local_tcp: Option<SocketAddr>,
}

impl std::fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("local_tcp", &self.local_tcp)
            .finish_non_exhaustive()
    }
}

impl ProxyHandle {
    /// Replaces the policy and secrets; the next request uses them (no restart).
    pub fn update(&self, policy: Policy, bindings: SecretBindings) {
        self.shared.replace_runtime(policy, bindings);
    }

    /// The interception CA (created on first use), e.g. to install its certificate in the
    /// sandbox trust store.
    pub fn ca(&self) -> Result<Arc<CertificateAuthority>, ProxyError> {
        Ok(self.shared.ca()?)
    }

    /// Test hook: `hook` runs once, right after the next policy snapshot a request takes.
    #[cfg(test)]
    pub(crate) fn after_next_snapshot(&self, hook: SnapshotHook) {
        *self
            .shared
            .snapshot_hook
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// Test hook: accept handoff channels from any peer, not only a sandbox's PID 1.
    #[cfg(test)]
    pub(crate) fn trust_any_handoff_peer(&self) {
        self.shared
            .trust_any_handoff_peer
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the upstream trust store has been built (i.e. some upstream TLS connection was
    /// attempted); it is not read at start.
    pub fn upstream_trust_built(&self) -> bool {
        self.shared.upstream_tls.is_built()
    }

    /// The TCP address, when listening on TCP.
    pub fn local_tcp_addr(&self) -> Option<SocketAddr> {
        self.local_tcp
    }

    /// Stops accepting, closes every connection and tunnel, and waits for the accept loop.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.shared.audit.flush();
    }
}

impl Drop for ProxyHandle {
    /// Dropping the handle stops the proxy too: no proxy outlives its controller.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Writes counted repeated denials once they went idle (see [`crate::audit`]).
async fn flush_idle_repeats(audit: Arc<AuditLog>) {
    let mut tick = tokio::time::interval(COLLAPSE_IDLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        audit.flush_idle(std::time::Instant::now());
    }
}

async fn accept_loop(listener: ProxyListener, shared: Arc<Shared>) {
    let mut stop = shared.shutdown.clone();
    let handed_over = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            a = accept(&listener) => a,
        };
        match accepted {
            Ok(Accepted::Unix(s)) => {
                shared.spawn(serve_unix(s, shared.clone(), handed_over.clone()));
            }
            Ok(Accepted::Tcp(s)) => {
                let _ = s.set_nodelay(true);
                shared.spawn(serve_conn(s, shared.clone()))
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "proxy accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(listener: &ProxyListener) -> io::Result<Accepted> {
    match listener {
        ProxyListener::Unix(l) => l.accept().await.map(|(s, _)| Accepted::Unix(s)),
        ProxyListener::Tcp(l) => l.accept().await.map(|(s, _)| Accepted::Tcp(s)),
    }
}

/// Serves one Unix connection: a plain client, or a handoff channel from the sandbox's PID 1
/// whose every connection is served like a client ([`crate::handoff`]).
async fn serve_unix(
    mut stream: tokio::net::UnixStream,
    shared: Arc<Shared>,
    open: Arc<AtomicUsize>,
) {
    match handoff::classify(&mut stream, &shared).await {
        handoff::Kind::Client => serve_conn(stream, shared).await,
        handoff::Kind::Refused => {}
        handoff::Kind::Channel => serve_channel(stream, shared, open).await,
    }
}

/// Serves a handoff channel: every connection handed over on it, and, once PID 1 handed over
/// its listener, every connection accepted from that, until the channel closes (then the
/// listener is closed here and PID 1 accepts again).
async fn serve_channel(
    channel: tokio::net::UnixStream,
    shared: Arc<Shared>,
    open: Arc<AtomicUsize>,
) {
    let mut listener: Option<TcpListener> = None;
    loop {
        let admitted = tokio::select! {
            handed = handoff::next(&channel) => match handed {
                None => return,
                Some(handoff::Handed::Connection(fd)) => handoff::admit(fd, &open),
                Some(handoff::Handed::Listener(fd)) => {
                    match listener {
                        Some(_) => Err(handoff::AdmitError::SecondListener),
                        None => handoff::admit_listener(fd).map(|l| listener = Some(l)),
                    }
                    .unwrap_or_else(|e| tracing::warn!(error = %e, "refused a handed-over listener"));
                    continue;
                }
            },
            accepted = accept_from(listener.as_ref()) => match accepted {
                Ok((stream, peer)) => handoff::admit_accepted(stream, peer, &open),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept on the handed-over listener failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        match admitted {
            Ok(admitted) => {
                let shared_conn = shared.clone();
                shared.spawn(async move {
                    let handoff::Admitted { stream, _slot } = admitted;
                    serve_conn(stream, shared_conn).await;
                });
            }
            Err(e) => tracing::warn!(error = %e, "refused a handed-over connection"),
        }
    }
}

/// The next connection on `listener`; never, without one.
async fn accept_from(
    listener: Option<&TcpListener>,
) -> io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Serves one client connection (plain HTTP requests and CONNECT).
async fn serve_conn<S: ClientStream>(stream: S, shared: Arc<Shared>) {
    let slot = UpstreamSlot::default();
    let service = service_fn(move |req: Request<Incoming>| {
        let shared = shared.clone();
        let slot = slot.clone();
        async move {
            let resp: Response<ProxyBody> = if req.method() == Method::CONNECT {
                let resp = crate::connect::handle_connect::<S>(req, shared).await;
                // An accepted tunnel's answer is the bare status line (see `proxy_http1`).
                if resp.status().is_success() {
                    resp
                } else {
                    with_date(resp)
                }
            } else {
                with_date(forward::forward_http(req, shared, slot).await)
            };
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = proxy_http1()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "proxy client connection ended with an error");
    }
}
