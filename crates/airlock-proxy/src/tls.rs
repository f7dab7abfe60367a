//! TLS plumbing: the upstream trust store (N6) and a stream that replays buffered bytes.
//!
//! Upstream certificates are verified against the system roots plus the configured extra CA
//! files. The proxy never disables verification: a failed upstream handshake, or a trust store
//! that cannot be built, becomes a 502 for the client.
//!
//! Order of operations, chosen so that a sandbox that never talks TLS upstream (most runs) pays
//! almost nothing at proxy start:
//! 1. [`UpstreamTrust::prepare`] (at [`crate::Proxy::start`]): parses the extra CA files (small,
//!    and an unreadable one must stop the start with its path) and locates the system store
//!    with a few `stat`s; no system certificate is read.
//! 2. [`UpstreamTrust::config`] (at the first upstream TLS connection): reads and parses the
//!    system roots from ONE source, builds the rustls config once and shares it; a failure is
//!    not cached, so the next connection tries again.
//!
//! The system source: `SSL_CERT_FILE`/`SSL_CERT_DIR` when set (honoured as given, as
//! `rustls-native-certs` does); otherwise the distribution's bundle file when present
//! (`/etc/ssl/certs/ca-certificates.crt` on Debian), else the certificate directories. The
//! bundle and the directory hold the same certificates, so reading both only doubles the cost.

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
use tokio::sync::OnceCell;

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

/// Where the system roots are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemRoots {
    /// `SSL_CERT_FILE` and/or `SSL_CERT_DIR` are set: read what they name, as given.
    FromEnv,
    /// The distribution's bundle file (one PEM file with every root).
    Bundle(PathBuf),
    /// No bundle file: every file of these directories.
    Dirs(Vec<PathBuf>),
    /// Nothing found.
    None,
}

impl SystemRoots {
    /// Locates the system store (a few `stat`s; nothing is read).
    pub fn locate() -> SystemRoots {
        // Exactly the test `rustls-native-certs` applies: set (even to a missing path) wins.
        if std::env::var_os(airlock_env::SSL_CERT_FILE).is_some()
            || std::env::var_os(airlock_env::SSL_CERT_DIR).is_some()
        {
            return SystemRoots::FromEnv;
        }
        let found = openssl_probe::probe();
        match found.cert_file {
            Some(file) => SystemRoots::Bundle(file),
            None if !found.cert_dir.is_empty() => SystemRoots::Dirs(found.cert_dir),
            None => SystemRoots::None,
        }
    }

    /// Reads and parses the certificates. Individual unreadable or unparsable system
    /// certificates are skipped (logged), as browsers do.
    pub fn load(&self) -> Vec<CertificateDer<'static>> {
        let result = match self {
            SystemRoots::FromEnv => rustls_native_certs::load_native_certs(),
            SystemRoots::Bundle(file) => {
                rustls_native_certs::load_certs_from_paths(Some(file), None)
            }
            SystemRoots::Dirs(dirs) => {
                let mut all = rustls_native_certs::CertificateResult::default();
                for dir in dirs {
                    let r = rustls_native_certs::load_certs_from_paths(None, Some(dir));
                    all.certs.extend(r.certs);
                    all.errors.extend(r.errors);
                }
                all
            }
            SystemRoots::None => rustls_native_certs::CertificateResult::default(),
        };
        for e in &result.errors {
            tracing::warn!(error = %e, "skipping part of the system trust store");
        }
        result.certs
    }
}

/// The upstream trust store: extra CAs parsed at start, system roots and the rustls config
/// built once, at the first upstream TLS connection.
#[derive(Debug)]
pub struct UpstreamTrust {
    system: SystemRoots,
    extra: Vec<(PathBuf, Vec<CertificateDer<'static>>)>,
    config: OnceCell<Arc<ClientConfig>>,
}

impl UpstreamTrust {
    /// Parses the extra CA files and locates the system store; reads no system certificate.
    ///
    /// Fails when an extra CA file cannot be read or holds no certificate, and when there can
    /// be no root at all (no system store found and no extra CA).
    pub fn prepare(extra_roots: &[PathBuf]) -> Result<UpstreamTrust, TlsSetupError> {
        Self::with_system(SystemRoots::locate(), extra_roots)
    }

    /// As [`prepare`](Self::prepare), with the system store given.
    pub fn with_system(
        system: SystemRoots,
        extra_roots: &[PathBuf],
    ) -> Result<UpstreamTrust, TlsSetupError> {
        let extra = extra_roots
            .iter()
            .map(|p| Ok((p.clone(), read_pem_certs(p)?)))
            .collect::<Result<Vec<_>, TlsSetupError>>()?;
        if system == SystemRoots::None && extra.is_empty() {
            return Err(TlsSetupError::NoRoots);
        }
        Ok(UpstreamTrust {
            system,
            extra,
            config: OnceCell::new(),
        })
    }

    /// The client config, built at the first call (concurrent callers wait for that one
    /// build); a failed build is not kept, the next call tries again.
    pub async fn config(&self) -> Result<Arc<ClientConfig>, TlsSetupError> {
        self.config
            .get_or_try_init(|| async { self.build().map(Arc::new) })
            .await
            .cloned()
    }

    /// Whether the config has been built (the system store read).
    pub fn is_built(&self) -> bool {
        self.config.initialized()
    }

    /// Reads the system roots and builds the config: system roots plus extra CAs, HTTP/1.1.
    pub fn build(&self) -> Result<ClientConfig, TlsSetupError> {
        let mut roots = RootCertStore::empty();
        for cert in self.system.load() {
            // Individual unparsable system certificates are skipped, as browsers do.
            let _ = roots.add(cert);
        }
        for (path, certs) in &self.extra {
            for cert in certs {
                roots
                    .add(cert.clone())
                    .map_err(|e| TlsSetupError::ExtraCa {
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
        Ok(config)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write_ca(path: &Path) {
        let ca = rcgen::generate_simple_self_signed(vec!["roots.test".to_owned()]).unwrap();
        std::fs::write(path, ca.cert.pem()).unwrap();
    }

    #[test]
    fn an_unreadable_extra_ca_stops_the_start_and_names_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("corp-ca.pem");
        let err = UpstreamTrust::with_system(SystemRoots::None, std::slice::from_ref(&missing))
            .unwrap_err();
        assert!(
            matches!(&err, TlsSetupError::ExtraCa { path, .. } if *path == missing),
            "{err}"
        );
        let empty = tmp.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = UpstreamTrust::with_system(SystemRoots::None, std::slice::from_ref(&empty))
            .unwrap_err();
        assert!(err.to_string().contains("empty.pem"), "{err}");
    }

    #[test]
    fn no_system_store_and_no_extra_ca_is_refused_at_start() {
        let err = UpstreamTrust::with_system(SystemRoots::None, &[]).unwrap_err();
        assert!(matches!(err, TlsSetupError::NoRoots), "{err}");
    }

    #[tokio::test]
    async fn the_system_store_is_read_at_first_use_and_a_failure_is_retried() {
        let tmp = tempfile::tempdir().unwrap();
        let bundle = tmp.path().join("ca-certificates.crt");
        let trust = UpstreamTrust::with_system(SystemRoots::Bundle(bundle.clone()), &[]).unwrap();
        assert!(!trust.is_built(), "nothing is read at start");
        let err = trust.config().await.unwrap_err();
        assert!(matches!(err, TlsSetupError::NoRoots), "{err}");
        assert!(!trust.is_built(), "a failed build is not kept");
        write_ca(&bundle);
        let first = trust.config().await.unwrap();
        let again = trust.config().await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the config is built once");
        assert_eq!(first.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_bundle_source_reads_the_bundle_and_not_the_directory_beside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let bundle = tmp.path().join("bundle.pem");
        write_ca(&bundle);
        write_ca(&tmp.path().join("other.pem"));
        assert_eq!(SystemRoots::Bundle(bundle).load().len(), 1);
        assert_eq!(
            SystemRoots::Dirs(vec![tmp.path().to_path_buf()])
                .load()
                .len(),
            2
        );
    }

    #[test]
    fn the_debian_bundle_is_preferred_over_the_certificate_directory() {
        let debian = Path::new("/etc/ssl/certs/ca-certificates.crt");
        if !debian.exists() {
            return airlock_testkit::skip("needs the Debian CA bundle (package ca-certificates)");
        }
        if std::env::var_os(airlock_env::SSL_CERT_FILE).is_some()
            || std::env::var_os(airlock_env::SSL_CERT_DIR).is_some()
        {
            // The variables win over the probe (what rustls-native-certs does too).
            assert_eq!(SystemRoots::locate(), SystemRoots::FromEnv);
            return;
        }
        assert_eq!(
            SystemRoots::locate(),
            SystemRoots::Bundle(debian.to_path_buf())
        );
    }
}
