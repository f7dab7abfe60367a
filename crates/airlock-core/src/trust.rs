//! The trust store (PRODUCT C6): which projects may widen network policy.
//!
//! One state record, `trust.json`, maps a project's canonical root path to the SHA-256 of its
//! project config file at the time the user ran `airlock trust` (computed by the caller with
//! `airlock_config::config_hash`). A project is trusted only
//! while both match, so editing the config (a `git pull` bringing new rules) revokes trust
//! until the user looks at it and trusts again.
//!
//! Paths are canonicalised here when they exist (`canonicalize` only reads), so callers that
//! pass a spelling with symlinks or `..` hit the same entry. [`TrustStore::is_trusted`] and
//! [`TrustStore::list`] only read: they create no file or directory (`plan` calls them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::state::{StateError, StateStore};

/// The record name of the trust map inside the state store.
pub const TRUST_RECORD: &str = "trust.json";

/// One trusted project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// Canonical project root.
    pub root: PathBuf,
    /// Lowercase hex SHA-256 of the project config that was trusted.
    pub config_sha256: String,
    /// When it was trusted, seconds since the Unix epoch.
    pub trusted_at_unix: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustMap {
    projects: BTreeMap<String, TrustedConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustedConfig {
    config_sha256: String,
    trusted_at_unix: u64,
}

/// Failures of the trust store.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("project root {path} is not an absolute path")]
    NotAbsolute { path: PathBuf },
    #[error("project root {path} is not valid UTF-8, so it cannot be recorded as trusted")]
    NonUtf8Path { path: PathBuf },
    #[error("cannot resolve project root {path}: {source}")]
    Canonicalize {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{hash:?} is not a SHA-256 digest (64 lowercase hex characters)")]
    InvalidHash { hash: String },
    #[error(transparent)]
    State(#[from] StateError),
}

/// Trusted projects, stored in a [`StateStore`].
#[derive(Debug, Clone)]
pub struct TrustStore {
    store: StateStore,
}

impl TrustStore {
    /// A trust store inside `store` (normally the state root). Touches nothing.
    pub fn new(store: StateStore) -> Self {
        TrustStore { store }
    }

    /// A trust store in the state root `state_root` (absolute). Touches nothing.
    pub fn open(state_root: impl Into<PathBuf>) -> Result<Self, TrustError> {
        Ok(TrustStore::new(StateStore::open(state_root)?))
    }

    /// Records `root` as trusted with the config digest `config_sha256` (replacing an older
    /// digest for the same root).
    pub fn trust(&self, root: &Path, config_sha256: &str) -> Result<TrustEntry, TrustError> {
        validate_hash(config_sha256)?;
        let (key, root) = canonical_key(root)?;
        let trusted = TrustedConfig {
            config_sha256: config_sha256.to_string(),
            trusted_at_unix: now_unix(),
        };
        self.store.update(TRUST_RECORD, |map: Option<TrustMap>| {
            let mut map = map.unwrap_or_default();
            map.projects.insert(key.clone(), trusted.clone());
            map
        })?;
        Ok(TrustEntry {
            root,
            config_sha256: trusted.config_sha256,
            trusted_at_unix: trusted.trusted_at_unix,
        })
    }

    /// Forgets `root`; returns whether it was trusted. Writes nothing when it was not.
    pub fn untrust(&self, root: &Path) -> Result<bool, TrustError> {
        let (key, _) = canonical_key(root)?;
        let written = self
            .store
            .update_if(TRUST_RECORD, |map: Option<TrustMap>| {
                let mut map = map?;
                map.projects.remove(&key).is_some().then_some(map)
            })?;
        Ok(written.is_some())
    }

    /// True only when `root` is trusted with exactly this config digest. Creates nothing.
    pub fn is_trusted(&self, root: &Path, config_sha256: &str) -> Result<bool, TrustError> {
        let (key, _) = canonical_key(root)?;
        let Some(record) = self.store.read::<TrustMap>(TRUST_RECORD)? else {
            return Ok(false);
        };
        Ok(record
            .data
            .projects
            .get(&key)
            .is_some_and(|t| t.config_sha256 == config_sha256))
    }

    /// Every trusted project, sorted by path. Creates nothing.
    pub fn list(&self) -> Result<Vec<TrustEntry>, TrustError> {
        let Some(record) = self.store.read::<TrustMap>(TRUST_RECORD)? else {
            return Ok(Vec::new());
        };
        Ok(record
            .data
            .projects
            .into_iter()
            .map(|(root, t)| TrustEntry {
                root: PathBuf::from(root),
                config_sha256: t.config_sha256,
                trusted_at_unix: t.trusted_at_unix,
            })
            .collect())
    }
}

fn validate_hash(hash: &str) -> Result<(), TrustError> {
    let ok = hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(TrustError::InvalidHash {
            hash: hash.to_string(),
        })
    }
}

/// The map key for `root`: its canonical path when it exists, else the path as given (so a
/// deleted project can still be untrusted).
fn canonical_key(root: &Path) -> Result<(String, PathBuf), TrustError> {
    if !root.is_absolute() {
        return Err(TrustError::NotAbsolute {
            path: root.to_path_buf(),
        });
    }
    let canonical = match std::fs::canonicalize(root) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => root.to_path_buf(),
        Err(source) => {
            return Err(TrustError::Canonicalize {
                path: root.to_path_buf(),
                source,
            })
        }
    };
    match canonical.to_str() {
        Some(s) => Ok((s.to_string(), canonical.clone())),
        None => Err(TrustError::NonUtf8Path { path: canonical }),
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
