//! The per-installation interception CA and its leaf certificates (N6).
//!
//! Files in the CA directory (created 0700): `ca-key.pem` (0600, never leaves the host, never
//! enters a sandbox) and `ca.pem` (the certificate the sandbox trusts). Creation order: the key
//! and certificate are written to temporaries atomically; the key is published with a hard link
//! (which fails if it exists), and only the creator whose link succeeded publishes its
//! certificate, so concurrent first uses agree on one pair. A loser discards its pair and
//! loads the winner's (waiting briefly for the winner's certificate).
//!
//! Signing leaves needs the issuer's distinguished name and key only; the name is derived from
//! the public key ([`ca_params`]), so the issuer is rebuilt from the key file alone and always
//! matches the certificate on disk. Leaves (one per host, ECDSA P-256, valid from yesterday for
//! 30 days, `serverAuth`) share one key per process and are cached in memory: at most
//! [`MAX_LEAVES`] hosts, oldest first out, so a sandbox naming ever new hosts under a wildcard
//! rule cannot grow the proxy; and a cached leaf is issued again once it is
//! [`REISSUE_AFTER_DAYS`] old, long before it expires, so a proxy that runs for months keeps
//! presenting valid certificates.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_core::{write_atomic, AtomicWriteError};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

use airlock_core::records::civil_from_days;

use crate::clock::{date_from_today, today};
use crate::host_cache::HostCache;

const KEY_FILE: &str = "ca-key.pem";
const CERT_FILE: &str = "ca.pem";

/// What went wrong with the CA.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Creating the CA directory failed.
    #[error("cannot create CA directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading a CA file failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing a CA file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: AtomicWriteError,
    },
    /// Publishing a CA file failed.
    #[error("cannot publish {path}: {source}")]
    Link {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The key file is not a usable key, or certificate generation failed.
    #[error("{what} ({path}): {source}")]
    Crypto {
        /// The file concerned.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: rcgen::Error,
    },
    /// rustls refused the generated leaf key.
    #[error("cannot load the leaf key for {host}: {source}")]
    LeafKey {
        /// The host.
        host: String,
        /// The cause.
        #[source]
        source: rustls::Error,
    },
}

/// The CA (see the module docs).
pub struct CertificateAuthority {
    dir: PathBuf,
    cert_pem: String,
    issuer: rcgen::Certificate,
    issuer_key: KeyPair,
    leaf_key: KeyPair,
    leaves: HostCache<Issued>,
}

/// Hosts whose leaf the CA keeps (see the module docs).
pub(crate) const MAX_LEAVES: usize = 256;

/// Days a leaf is valid after the day it is issued.
const LEAF_DAYS: i64 = 30;

/// Days after which a cached leaf (valid [`LEAF_DAYS`]) is issued again.
pub(crate) const REISSUE_AFTER_DAYS: i64 = 14;

/// A cached leaf and the day (since the Unix epoch) it was issued.
#[derive(Clone)]
struct Issued {
    leaf: Arc<CertifiedKey>,
    day: i64,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Loads the CA in `dir`, generating it on first use.
    pub fn load_or_create(dir: &Path) -> Result<CertificateAuthority, CaError> {
        create_private_dir(dir)?;
        let key_path = dir.join(KEY_FILE);
        if !key_path.exists() {
            create(dir)?;
        }
        let key_pem = std::fs::read_to_string(&key_path).map_err(|source| CaError::Read {
            path: key_path.clone(),
            source,
        })?;
        let cert_pem = read_cert(&dir.join(CERT_FILE))?;
        let crypto = |what| {
            let path = key_path.clone();
            move |source| CaError::Crypto { path, what, source }
        };
        let issuer_key = KeyPair::from_pem(&key_pem).map_err(crypto("invalid CA key"))?;
        let issuer = ca_params(&issuer_key)
            .self_signed(&issuer_key)
            .map_err(crypto("cannot rebuild the CA issuer"))?;
        let leaf_key = KeyPair::generate().map_err(crypto("cannot generate a leaf key"))?;
        Ok(CertificateAuthority {
            dir: dir.to_path_buf(),
            cert_pem,
            issuer,
            issuer_key,
            leaf_key,
            leaves: HostCache::new(MAX_LEAVES),
        })
    }

    /// The certificate (PEM) of the CA in `dir`, generating the CA on first use, without
    /// loading it: no key is parsed, nothing is signed or generated (B3: every `run` places
    /// the certificate in its sandbox; only the proxy needs the key, and it loads it itself).
    pub fn public_cert_pem(dir: &Path) -> Result<String, CaError> {
        create_private_dir(dir)?;
        if !dir.join(KEY_FILE).exists() {
            create(dir)?;
        }
        read_cert(&dir.join(CERT_FILE))
    }

    /// The CA certificate (PEM) to install into the sandbox trust store.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The path of the CA certificate file.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    /// A leaf for `host` (a DNS name or IP address), cached per host.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        self.leaf_on(host, today())
    }

    /// [`Self::leaf`] as on day `today` (days since the Unix epoch).
    fn leaf_on(&self, host: &str, today: i64) -> Result<Arc<CertifiedKey>, CaError> {
        let issued = self.leaves.get_or_try_insert_if(
            host,
            |cached| today - cached.day < REISSUE_AFTER_DAYS,
            || {
                Ok(Issued {
                    leaf: Arc::new(self.issue(host, today)?),
                    day: today,
                })
            },
        )?;
        Ok(issued.leaf)
    }

    fn issue(&self, host: &str, today: i64) -> Result<CertifiedKey, CaError> {
        let crypto = |source| CaError::Crypto {
            path: self.dir.join(KEY_FILE),
            what: "cannot issue a leaf certificate",
            source,
        };
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![match host.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.to_owned().try_into().map_err(crypto)?),
        }];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        let (y, m, d) = civil_from_days(today - 1);
        params.not_before = rcgen::date_time_ymd(y, m, d);
        let (y, m, d) = civil_from_days(today + LEAF_DAYS);
        params.not_after = rcgen::date_time_ymd(y, m, d);
        let cert = params
            .signed_by(&self.leaf_key, &self.issuer, &self.issuer_key)
            .map_err(crypto)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|source| CaError::LeafKey {
                host: host.to_owned(),
                source,
            })?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        Ok(CertifiedKey::new(chain, signing))
    }
}

/// The CA's parameters; the name is derived from the key so it can be rebuilt from it.
fn ca_params(key: &KeyPair) -> CertificateParams {
    let fingerprint = hex::encode(&Sha256::digest(key.public_key_der())[..8]);
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "airlock");
    dn.push(
        DnType::CommonName,
        format!("airlock sandbox interception CA {fingerprint}"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn random_serial() -> SerialNumber {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut seed = [0u8; 16];
    // Serials need only be unique per issuer: the random bytes, the time and a counter are
    // hashed together, so a failing random source still yields distinct serials.
    let _ = getrandom::getrandom(&mut seed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut hasher = Sha256::new();
    hasher.update(seed);
    hasher.update(nanos.to_be_bytes());
    hasher.update(n.to_be_bytes());
    let mut bytes: [u8; 16] = hasher.finalize()[..16].try_into().expect("16 bytes");
    bytes[0] &= 0x7f; // a positive INTEGER (RFC 5280 §4.1.2.2)
    SerialNumber::from_slice(&bytes)
}

fn create_private_dir(dir: &Path) -> Result<(), CaError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir_err = |source| CaError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(dir_err(e)),
    }
}

/// Generates a CA and publishes it (see the module docs for the order).
fn create(dir: &Path) -> Result<(), CaError> {
    let key_path = dir.join(KEY_FILE);
    let crypto = |what| {
        let path = key_path.clone();
        move |source| CaError::Crypto { path, what, source }
    };
    let key = KeyPair::generate().map_err(crypto("cannot generate the CA key"))?;
    let mut params = ca_params(&key);
    params.serial_number = Some(random_serial());
    let (y, m, d) = date_from_today(-1);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = date_from_today(3650);
    params.not_after = rcgen::date_time_ymd(y, m, d);
    let cert = params
        .self_signed(&key)
        .map_err(crypto("cannot self-sign the CA"))?;
    // Unique per creator (process, thread, attempt): two creators never share a temporary.
    let unique = hex::encode(&random_serial().to_bytes()[..8]);
    let temp_key = dir.join(format!(".{KEY_FILE}.new.{unique}"));
    let temp_cert = dir.join(format!(".{CERT_FILE}.new.{unique}"));
    let write = |path: &Path, text: &str| {
        write_atomic(path, text.as_bytes(), 0o600).map_err(|source| CaError::Write {
            path: path.to_path_buf(),
            source,
        })
    };
    write(&temp_key, &key.serialize_pem())?;
    write(&temp_cert, &cert.pem())?;
    let result = publish(&temp_cert, &temp_key, dir);
    let _ = std::fs::remove_file(&temp_key);
    let _ = std::fs::remove_file(&temp_cert);
    result
}

fn publish(temp_cert: &Path, temp_key: &Path, dir: &Path) -> Result<(), CaError> {
    let key_path = dir.join(KEY_FILE);
    match std::fs::hard_link(temp_key, &key_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()), // lost the race
        Err(source) => {
            return Err(CaError::Link {
                path: key_path,
                source,
            })
        }
    }
    let cert_path = dir.join(CERT_FILE);
    std::fs::rename(temp_cert, &cert_path).map_err(|source| CaError::Link {
        path: cert_path,
        source,
    })
}

/// Reads the certificate, waiting briefly for a concurrent creator that published the key but
/// not yet the certificate.
fn read_cert(path: &Path) -> Result<String, CaError> {
    for _ in 0..100 {
        match std::fs::read_to_string(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => {
                return other.map_err(|source| CaError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
    Err(CaError::Read {
        path: path.to_path_buf(),
        source: io::ErrorKind::NotFound.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::{ServerName, UnixTime};
    use rustls::RootCertStore;
    use std::time::Duration;

    /// Whether a client trusting only this CA accepts `leaf` for `host` at noon on `day`.
    fn valid_on(ca: &CertificateAuthority, leaf: &CertifiedKey, host: &str, day: i64) -> bool {
        let mut roots = RootCertStore::empty();
        roots.add(pem_der(ca.cert_pem())).unwrap();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let noon = UnixTime::since_unix_epoch(Duration::from_secs((day * 86_400 + 43_200) as u64));
        let name = ServerName::try_from(host.to_owned()).unwrap();
        verifier
            .verify_server_cert(&leaf.cert[0], &[], &name, &[], noon)
            .is_ok()
    }

    fn pem_der(pem: &str) -> CertificateDer<'static> {
        use base64::Engine;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        CertificateDer::from(der)
    }

    #[test]
    fn a_cached_leaf_is_issued_again_long_before_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::load_or_create(&dir.path().join("ca")).unwrap();
        let host = "api.example.test";
        let day = today();
        let first = ca.leaf_on(host, day).unwrap();
        assert!(valid_on(&ca, &first, host, day));
        assert!(valid_on(&ca, &first, host, day + LEAF_DAYS - 1));
        assert!(
            !valid_on(&ca, &first, host, day + LEAF_DAYS + 1),
            "it does expire"
        );
        let later = ca.leaf_on(host, day + REISSUE_AFTER_DAYS - 1).unwrap();
        assert!(Arc::ptr_eq(&first, &later), "kept while young");
        // Whatever day a leaf is asked for, the one handed out is valid that day and still
        // for days after it: a proxy running for months never presents an expired one.
        for ask in day..day + 3 * LEAF_DAYS {
            let leaf = ca.leaf_on(host, ask).unwrap();
            assert!(valid_on(&ca, &leaf, host, ask), "day {}", ask - day);
            let margin = LEAF_DAYS - REISSUE_AFTER_DAYS - 1;
            assert!(
                valid_on(&ca, &leaf, host, ask + margin),
                "day {}",
                ask - day
            );
        }
    }

    #[test]
    fn the_leaf_cache_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::load_or_create(&dir.path().join("ca")).unwrap();
        let day = today();
        let first = ca.leaf_on("h0.test", day).unwrap();
        for n in 1..=MAX_LEAVES {
            ca.leaf_on(&format!("h{n}.test"), day).unwrap();
        }
        assert_eq!(ca.leaves.len(), MAX_LEAVES);
        let again = ca.leaf_on("h0.test", day).unwrap();
        assert!(
            !Arc::ptr_eq(&first, &again),
            "the oldest host was forgotten"
        );
    }
}
