//! State shared by every connection of one proxy: the live policy and secrets, the upstream
//! trust, the audit log, the interception CA and the shutdown signal; and the HTTP/1 server
//! settings for sandbox clients.
//!
//! Policy and secrets live in one `Arc<Runtime>` behind a lock. A request takes exactly one
//! snapshot ([`Shared::runtime`]) when it starts and passes that `Arc` to every step that
//! decides or substitutes, so an update ([`Shared::replace_runtime`]) takes effect for the next
//! request and never splits one request between two policies.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use airlock_config::policy::Policy;
use airlock_secrets::SecretBindings;
use hyper::server::conn::http1;
use tokio::sync::watch;

use crate::audit::AuditLog;
use crate::ca::{CaError, CertificateAuthority};
use crate::host_cache::HostCache;
use crate::tls::UpstreamTrust;

/// The policy and secrets in force; replaced as a whole by [`ProxyHandle::update`].
#[derive(Debug)]
pub(crate) struct Runtime {
    pub policy: Policy,
    pub bindings: SecretBindings,
}

/// State shared by every connection.
pub(crate) struct Shared {
    pub(crate) runtime: RwLock<Arc<Runtime>>,
    pub hosts: BTreeMap<String, IpAddr>,
    pub upstream_tls: UpstreamTrust,
    pub audit: Arc<AuditLog>,
    pub(crate) ca_dir: PathBuf,
    pub(crate) ca: Mutex<Option<Arc<CertificateAuthority>>>,
    /// The TLS server configuration of each intercepted host, built at its first
    /// interception: a later connection to that host builds nothing and its client can resume
    /// an earlier TLS session (the configuration's session store) instead of a full handshake
    /// with a signature. One per host (a session is never resumed for another host), at most
    /// [`crate::connect::MAX_SERVER_CONFIGS`] ([`HostCache`]). Kept with the leaf it presents:
    /// once the CA issues that host a new leaf, the configuration is built again.
    pub(crate) server_configs:
        HostCache<(Arc<rustls::ServerConfig>, Arc<rustls::sign::CertifiedKey>)>,
    pub shutdown: watch::Receiver<bool>,
    /// Test hook: runs once, right after the first policy snapshot a request takes.
    #[cfg(test)]
    pub snapshot_hook: Mutex<Option<SnapshotHook>>,
    /// Test hook: accept handoff channels from any peer (the test process is no sandbox init).
    #[cfg(test)]
    pub trust_any_handoff_peer: std::sync::atomic::AtomicBool,
}

/// A test hook run after a request's policy snapshot (see [`Shared::snapshot_hook`]).
#[cfg(test)]
pub(crate) type SnapshotHook = Box<dyn FnOnce(&Shared) + Send>;

impl Shared {
    /// The policy and secrets for one request: take it once, at the request's start.
    pub fn runtime(&self) -> Arc<Runtime> {
        let snapshot = self
            .runtime
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        #[cfg(test)]
        {
            let hook = self
                .snapshot_hook
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(hook) = hook {
                hook(self);
            }
        }
        snapshot
    }

    /// Replaces the policy and secrets (the next snapshot sees them).
    pub fn replace_runtime(&self, policy: Policy, bindings: SecretBindings) {
        let mut rt = self.runtime.write().unwrap_or_else(|p| p.into_inner());
        *rt = Arc::new(Runtime { policy, bindings });
    }

    /// The interception CA, created on first use.
    pub fn ca(&self) -> Result<Arc<CertificateAuthority>, CaError> {
        let mut slot = self.ca.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ca) = &*slot {
            return Ok(ca.clone());
        }
        let ca = Arc::new(CertificateAuthority::load_or_create(&self.ca_dir)?);
        *slot = Some(ca.clone());
        Ok(ca)
    }

    /// Whether the peer of `stream` may hand connections over: the sandbox's PID 1
    /// ([`crate::handoff`]).
    pub(crate) fn trusts_handoff_peer(&self, stream: &tokio::net::UnixStream) -> bool {
        #[cfg(test)]
        if self
            .trust_any_handoff_peer
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return true;
        }
        crate::handoff::peer_is_sandbox_init(stream)
    }

    /// Spawns `fut`, cancelled when the proxy shuts down.
    pub fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut stop = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = fut => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
}

/// How long a client may take to send a request head; bounds idle and slow-loris clients.
pub(crate) const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The HTTP/1 server settings for sandbox clients (plain and intercepted).
pub(crate) fn client_http1() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
}

/// [`client_http1`] for the proxy's own listener, where hyper adds no `Date` by itself: the
/// answer to an accepted `CONNECT` is the bare status line (`HTTP/1.1 200 OK`, as squid and
/// tinyproxy send it), which every fresh tunnel waits for before its first byte, and a client
/// reading the head byte by byte pays for every byte of it (B5). Every other answer gets its
/// `Date` from [`with_date`], as hyper would have added it.
pub(crate) fn proxy_http1() -> http1::Builder {
    let mut builder = client_http1();
    builder.auto_date_header(false);
    builder
}

/// Adds a `Date` to `resp` unless it has one (RFC 9110 §6.6.1: a proxy appends one to a
/// response it forwards without; the proxy's own answers carry one too).
pub(crate) fn with_date<B>(mut resp: hyper::Response<B>) -> hyper::Response<B> {
    let headers = resp.headers_mut();
    if !headers.contains_key(hyper::header::DATE) {
        let now = httpdate::fmt_http_date(std::time::SystemTime::now());
        if let Ok(value) = hyper::header::HeaderValue::from_str(&now) {
            headers.insert(hyper::header::DATE, value);
        }
    }
    resp
}
