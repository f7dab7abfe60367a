//! The secret store under `<data root>/secrets/` (N5, N8).
//!
//! Layout: `secrets/` (0700) holds one `NAME.json` record per secret (0600, written with
//! [`airlock_core::write_atomic`]) and `installation-salt` (0600, 32 random bytes in hex).
//! Record names are checked [`SecretName`]s, so a file name can never leave the directory, and
//! the salt's lowercase name can never collide with a record.
//!
//! Placeholders are `airlock-secret-` + the first 32 hex digits of
//! HMAC-SHA256(salt, name): stable across restarts and value changes, unique per installation,
//! and derived from nothing secret-bearing, so a placeholder reveals nothing about the value.
//!
//! Order of operations in [`SecretStore::open`]: create the data root's parent if missing,
//! make `<data root>` and `secrets/` private directories (0700, owned by us, no symlinks),
//! then read or create the salt. The salt is created by writing a temporary file atomically and
//! hard-linking it to its final name, so two concurrent first opens agree on one salt.
//!
//! Errors never contain a value: a record that does not parse is reported by path and position
//! only (serde messages may quote the offending text).

use std::io;
use std::path::{Path, PathBuf};

use airlock_config::policy::HostPattern;
use airlock_core::{
    check_private_dir, ensure_private_dir, write_atomic, AtomicWriteError, DirPresence,
    PrivateDirError,
};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::bindings::{Binding, SecretBindings, PLACEHOLDER_PREFIX};
use crate::name::{parse_header_name, HeaderTemplate, NameError, SecretName};
use crate::redacted::Redacted;

const SALT_FILE: &str = "installation-salt";
const RECORD_VERSION: u32 = 1;

/// What went wrong in the store. Never contains a secret value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The name or header template is invalid.
    #[error(transparent)]
    Name(#[from] NameError),
    /// `set` was given no host.
    #[error("secret {name} needs at least one host (`--host`)")]
    NoHosts {
        /// The secret.
        name: String,
    },
    /// The value is empty or holds characters that cannot go into an HTTP header.
    #[error("the value of secret {name} is {reason}")]
    InvalidValue {
        /// The secret.
        name: String,
        /// What is wrong (never the value itself).
        reason: &'static str,
    },
    /// No record of that name.
    #[error("no secret named {name}; `airlock secret ls` lists them")]
    NotFound {
        /// The secret.
        name: String,
    },
    /// The store directory is not private or cannot be created.
    #[error("secret store directory: {0}")]
    Dir(#[from] PrivateDirError),
    /// Creating the data root's parent failed.
    #[error("cannot create {path}: {source}")]
    CreateRoot {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading a record, the salt or the directory failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing a record or the salt failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: AtomicWriteError,
    },
    /// Publishing the salt under its final name failed.
    #[error("cannot publish the installation salt at {path}: {source}")]
    Link {
        /// The salt file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Removing a record failed.
    #[error("cannot remove {path}: {source}")]
    Remove {
        /// The record.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A record or the salt is not what this version writes.
    #[error("{path} is corrupt ({what}); remove it with `airlock secret rm` or by hand and set the secret again")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, without quoting the content.
        what: String,
    },
}

/// What `secret ls` shows: never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretInfo {
    /// The secret (and sandbox environment variable) name.
    pub name: String,
    /// The host patterns it is bound to.
    pub hosts: Vec<String>,
    /// The name of the header its template sets, if any.
    pub header: Option<String>,
    /// Every header its placeholder is replaced in (lowercase): `authorization`,
    /// `proxy-authorization`, the template's header, the agent catalogue's header for this
    /// name, and those named at `set`.
    pub headers: Vec<String>,
    /// The placeholder the sandbox sees.
    pub placeholder: String,
}

/// One record file. Only ever deserialized into, and serialized from, inside this module.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordFile {
    version: u32,
    name: String,
    hosts: Vec<String>,
    header: Option<String>,
    /// Extra headers named at `set` (absent in records that name none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<String>,
    value: String,
}

/// The store (see the module docs).
#[derive(Debug)]
pub struct SecretStore {
    dir: PathBuf,
    salt: Redacted<Vec<u8>>,
}

impl SecretStore {
    /// Opens (creating when absent) the store under `data_root`.
    pub fn open(data_root: &Path) -> Result<SecretStore, SecretError> {
        let anchor = data_root.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(anchor).map_err(|source| SecretError::CreateRoot {
            path: anchor.to_path_buf(),
            source,
        })?;
        let dir = data_root.join("secrets");
        ensure_private_dir(&dir, anchor)?;
        let salt = read_or_create_salt(&dir)?;
        Ok(SecretStore { dir, salt })
    }

    /// Opens the store only if it exists, creating and changing nothing (for read-only commands
    /// such as `plan`): `None` when there is no store directory or no salt yet (no secret can
    /// have been stored then). The directory is checked like [`SecretStore::open`] checks it.
    pub fn open_existing(data_root: &Path) -> Result<Option<SecretStore>, SecretError> {
        let anchor = data_root.parent().unwrap_or(Path::new("/"));
        let dir = data_root.join("secrets");
        match std::fs::symlink_metadata(anchor) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SecretError::Read {
                    path: anchor.to_path_buf(),
                    source,
                })
            }
        }
        if check_private_dir(&dir, anchor)? == DirPresence::Absent {
            return Ok(None);
        }
        let path = dir.join(SALT_FILE);
        let salt = match std::fs::read_to_string(&path) {
            Ok(text) => parse_salt(&path, &text)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(SecretError::Read { path, source }),
        };
        Ok(Some(SecretStore { dir, salt }))
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The stable placeholder for `name` (see the module docs).
    pub fn placeholder(&self, name: &SecretName) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.salt.expose())
            .expect("HMAC-SHA256 accepts keys of any length");
        mac.update(b"airlock placeholder v1\0");
        mac.update(name.as_str().as_bytes());
        let digest = hex::encode(mac.finalize().into_bytes());
        format!("{PLACEHOLDER_PREFIX}{}", &digest[..32])
    }

    /// Creates or replaces the secret `name`; its placeholder is replaced only in the default
    /// headers, the template's and the catalogue's ([`SecretStore::set_with_headers`]).
    pub fn set(
        &self,
        name: &str,
        hosts: &[HostPattern],
        header: Option<&str>,
        value: Redacted<String>,
    ) -> Result<SecretInfo, SecretError> {
        self.set_with_headers(name, hosts, header, &[], value)
    }

    /// [`set`](Self::set), also naming `headers` the placeholder may be replaced in (e.g.
    /// `x-api-key`). Everything is checked before anything is written.
    pub fn set_with_headers(
        &self,
        name: &str,
        hosts: &[HostPattern],
        header: Option<&str>,
        headers: &[&str],
        value: Redacted<String>,
    ) -> Result<SecretInfo, SecretError> {
        let name = SecretName::parse(name)?;
        if hosts.is_empty() {
            return Err(SecretError::NoHosts {
                name: name.to_string(),
            });
        }
        let header = header.map(HeaderTemplate::parse).transpose()?;
        let mut extra: Vec<String> = Vec::new();
        for h in headers {
            let h = parse_header_name(h)?;
            if !extra.contains(&h) {
                extra.push(h);
            }
        }
        check_value(&name, value.expose())?;
        let record = RecordFile {
            version: RECORD_VERSION,
            name: name.to_string(),
            hosts: hosts.iter().map(ToString::to_string).collect(),
            header: header.as_ref().map(ToString::to_string),
            headers: extra.clone(),
            value: value.expose().clone(),
        };
        let bytes = Redacted::new(serde_json::to_vec_pretty(&record).expect("records serialize"));
        drop(Redacted::new(record.value));
        let path = self.record_path(&name);
        write_atomic(&path, bytes.expose(), 0o600)
            .map_err(|source| SecretError::Write { path, source })?;
        let binding = Binding {
            placeholder: self.placeholder(&name),
            headers: with_catalogue_headers(&name, extra),
            name,
            value: Redacted::new(String::new()),
            hosts: hosts.to_vec(),
            header,
        };
        Ok(info_of(&binding))
    }

    /// Every secret, sorted by name, without values.
    pub fn list(&self) -> Result<Vec<SecretInfo>, SecretError> {
        Ok(self.load_all()?.iter().map(info_of).collect())
    }

    /// Removes the secret `name`.
    pub fn remove(&self, name: &str) -> Result<(), SecretError> {
        let name = SecretName::parse(name)?;
        let path = self.record_path(&name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(SecretError::NotFound {
                name: name.to_string(),
            }),
            Err(source) => Err(SecretError::Remove { path, source }),
        }
    }

    /// The table the proxy uses: placeholder ↔ value ↔ hosts for every secret.
    pub fn bindings(&self) -> Result<SecretBindings, SecretError> {
        Ok(SecretBindings::new(self.load_all()?))
    }

    fn record_path(&self, name: &SecretName) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    fn load_all(&self) -> Result<Vec<Binding>, SecretError> {
        let read_err = |source| SecretError::Read {
            path: self.dir.clone(),
            source,
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(read_err)? {
            let entry = entry.map_err(read_err)?;
            let file_name = entry.file_name();
            let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue; // the salt and atomic-write temporaries (`.NAME.json.tmp.*`)
            };
            let Ok(name) = SecretName::parse(stem) else {
                continue;
            };
            out.push(self.load(&name)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn load(&self, name: &SecretName) -> Result<Binding, SecretError> {
        let path = self.record_path(name);
        let bytes = Redacted::new(std::fs::read(&path).map_err(|source| SecretError::Read {
            path: path.clone(),
            source,
        })?);
        let corrupt = |what: String| SecretError::Corrupt {
            path: path.clone(),
            what,
        };
        let record: RecordFile = serde_json::from_slice(bytes.expose()).map_err(|e| {
            corrupt(format!(
                "invalid record at line {} column {}",
                e.line(),
                e.column()
            ))
        })?;
        let value = Redacted::new(record.value);
        if record.version != RECORD_VERSION || record.name != name.as_str() {
            return Err(corrupt("unexpected version or name".into()));
        }
        let hosts = record
            .hosts
            .iter()
            .map(|h| HostPattern::parse(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| corrupt(e.to_string()))?;
        let header = record
            .header
            .as_deref()
            .map(HeaderTemplate::parse)
            .transpose()
            .map_err(|e| corrupt(e.to_string()))?;
        let headers = record
            .headers
            .iter()
            .map(|h| parse_header_name(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(Binding {
            name: name.clone(),
            placeholder: self.placeholder(name),
            value,
            hosts,
            header,
            headers: with_catalogue_headers(name, headers),
        })
    }
}

/// What `ls` and `set` show of a binding: never the value.
fn info_of(b: &Binding) -> SecretInfo {
    SecretInfo {
        name: b.name.to_string(),
        hosts: b.hosts.iter().map(ToString::to_string).collect(),
        header: b.header.as_ref().map(|h| h.name().to_owned()),
        headers: b.carrier_headers(),
        placeholder: b.placeholder.clone(),
    }
}

/// `extra` plus the headers the agent catalogue names for a key called `name` (e.g.
/// `x-api-key` for `ANTHROPIC_API_KEY`).
fn with_catalogue_headers(name: &SecretName, mut extra: Vec<String>) -> Vec<String> {
    for h in airlock_config::agents::api_key_headers(name.as_str()) {
        if !extra.iter().any(|e| e == h) {
            extra.push((*h).to_owned());
        }
    }
    extra
}

/// A value must be non-empty and fit in an HTTP header (RFC 9110 §5.5: no CR, LF, NUL).
fn check_value(name: &SecretName, value: &str) -> Result<(), SecretError> {
    let reason = if value.is_empty() {
        Some("empty")
    } else if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        Some("not usable in an HTTP header (it contains CR, LF or NUL)")
    } else if value.contains(PLACEHOLDER_PREFIX) {
        Some("itself a placeholder")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(SecretError::InvalidValue {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn read_or_create_salt(dir: &Path) -> Result<Redacted<Vec<u8>>, SecretError> {
    let path = dir.join(SALT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => return parse_salt(&path, &text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(SecretError::Read { path, source }),
    }
    let mut salt = [0u8; 32];
    let mut tag = [0u8; 8];
    getrandom::getrandom(&mut salt)
        .and_then(|()| getrandom::getrandom(&mut tag))
        .map_err(|e| SecretError::Link {
            path: path.clone(),
            source: io::Error::other(e.to_string()),
        })?;
    // Unique per creator (random), so concurrent first opens never share a temporary.
    let temp = dir.join(format!(".{SALT_FILE}.new.{}", hex::encode(tag)));
    write_atomic(&temp, hex::encode(salt).as_bytes(), 0o600).map_err(|source| {
        SecretError::Write {
            path: temp.clone(),
            source,
        }
    })?;
    let linked = std::fs::hard_link(&temp, &path);
    let _ = std::fs::remove_file(&temp); // best effort: the name is ours alone
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {} // a concurrent open won
        Err(source) => return Err(SecretError::Link { path, source }),
    }
    let text = std::fs::read_to_string(&path).map_err(|source| SecretError::Read {
        path: path.clone(),
        source,
    })?;
    parse_salt(&path, &text)
}

fn parse_salt(path: &Path, text: &str) -> Result<Redacted<Vec<u8>>, SecretError> {
    match hex::decode(text.trim()) {
        Ok(bytes) if bytes.len() == 32 => Ok(Redacted::new(bytes)),
        Ok(_) | Err(_) => Err(SecretError::Corrupt {
            path: path.to_path_buf(),
            what: "the salt is not 64 hex digits".into(),
        }),
    }
}
