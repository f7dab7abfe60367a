//! TLS plumbing: the upstream trust store (N6) and a stream that replays buffered bytes.
//!
//! Upstream certificates are verified against the system roots (read from the system store by
//! `rustls-native-certs`, i.e. `/etc/ssl/certs` on Debian, or `SSL_CERT_FILE`/`SSL_CERT_DIR`)
//! plus the configured extra CA files. The proxy never disables verification: a failed
//! upstream handshake becomes a 502 for the client.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What went wrong building the upstream trust store.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// An extra CA file cannot be read or holds no certificate.
    #[error("cannot load extra CA {path}: {reason}")]
    ExtraCa {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No root at all: neither the system store nor an extra CA gave one.
    #[error("no trusted root certificates: the system store is empty and no extra CA is configured (install ca-certificates)")]
    NoRoots,
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The ring crypto provider every config here uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client config for upstream connections: system roots plus `extra_roots`, HTTP/1.1.
pub fn upstream_config(extra_roots: &[PathBuf]) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // Individual unparsable system certificates are skipped, as browsers do.
        let _ = roots.add(cert);
    }
    for path in extra_roots {
        for cert in read_pem_certs(path)? {
            roots.add(cert).map_err(|e| TlsSetupError::ExtraCa {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        }
    }
    if roots.is_empty() {
        return Err(TlsSetupError::NoRoots);
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let err = |reason: String| TlsSetupError::ExtraCa {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

/// A stream that first yields `prefix`, then reads from `inner`; writes go to `inner`.
#[derive(Debug)]
pub struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    /// Wraps `inner` behind `prefix`.
    pub fn new(prefix: Bytes, inner: S) -> Prefixed<S> {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.prefix.has_remaining() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
