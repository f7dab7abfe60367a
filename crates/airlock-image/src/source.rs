//! What an archive holds: a plain root filesystem, a `docker save` archive or an OCI image
//! layout, and the ordered, digest-checked layers of the latter two.
//!
//! Digests (every one must match before the import is published):
//! - OCI layout: `index.json` → the manifest's descriptor (sha256 and size) → the config's and
//!   each layer blob's descriptor (sha256 and size of the stored, possibly compressed, bytes),
//!   and each layer's uncompressed sha256 against the config's `rootfs.diff_ids`. The image's
//!   digest is the manifest's.
//! - `docker save`: the config's file name is its sha256 (`<hex>.json` or `blobs/sha256/<hex>`),
//!   and each layer's uncompressed sha256 must equal the config's `rootfs.diff_ids` entry (a
//!   layer stored as `blobs/sha256/<hex>` is checked against its name too). The image's digest
//!   is the config's (Docker's image id).
//! - Plain rootfs tar: there is nothing to verify against; the digest is the file's sha256.

use std::io;

use oci_spec::image::{Descriptor, DigestAlgorithm, ImageIndex, ImageManifest, MediaType};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::outer::Outer;

#[derive(Debug, Error)]
pub enum SourceError {
    #[error("cannot read {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("the archive has no member {member:?}")]
    Missing { member: String },
    #[error("{what} is malformed: {why}")]
    Malformed { what: String, why: String },
    #[error("{what} does not match its digest: expected sha256:{expected}, found sha256:{actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what} does not match its size: expected {expected} bytes, found {actual}")]
    SizeMismatch {
        what: String,
        expected: u64,
        actual: u64,
    },
    #[error("{what} is not supported: {why}")]
    Unsupported { what: String, why: String },
}

/// The kind of archive an image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    Rootfs,
    DockerSave,
    OciLayout,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Rootfs => "rootfs",
            SourceKind::DockerSave => "docker-save",
            SourceKind::OciLayout => "oci-layout",
        }
    }
}

/// One layer to apply, with what it must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Member of the outer archive.
    pub member: String,
    /// sha256 (hex) of the stored bytes, when the format names it.
    pub blob: Option<String>,
    /// Size of the stored bytes, when the format names it.
    pub size: Option<u64>,
    /// sha256 (hex) of the uncompressed tar.
    pub diff_id: String,
}

/// A layered archive's image: its digest and its layers, bottom first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layered {
    pub kind: SourceKind,
    /// `sha256:<hex>`.
    pub digest: String,
    pub layers: Vec<Layer>,
}

/// Which layered format `outer` is, if any (a plain rootfs has neither marker file).
pub fn detect(outer: &Outer) -> Option<SourceKind> {
    if outer.has("oci-layout") && outer.has("index.json") {
        Some(SourceKind::OciLayout)
    } else if outer.has("manifest.json") {
        Some(SourceKind::DockerSave)
    } else {
        None
    }
}

pub fn read_layered(outer: &Outer, kind: SourceKind) -> Result<Layered, SourceError> {
    match kind {
        SourceKind::OciLayout => read_oci(outer),
        SourceKind::DockerSave => read_docker(outer),
        SourceKind::Rootfs => Err(SourceError::Unsupported {
            what: "a plain root filesystem".into(),
            why: "it has no layers".into(),
        }),
    }
}

#[derive(Deserialize)]
struct ConfigRootfs {
    rootfs: DiffIds,
}

#[derive(Deserialize)]
struct DiffIds {
    diff_ids: Vec<String>,
}

/// `rootfs.diff_ids` of an image config, as hex sha256 values.
fn diff_ids(what: &str, bytes: &[u8]) -> Result<Vec<String>, SourceError> {
    let c: ConfigRootfs = serde_json::from_slice(bytes).map_err(|e| SourceError::Malformed {
        what: what.to_owned(),
        why: e.to_string(),
    })?;
    c.rootfs
        .diff_ids
        .iter()
        .map(|d| sha256_hex(what, d))
        .collect()
}

/// The hex part of `sha256:<64 hex>`.
fn sha256_hex(what: &str, digest: &str) -> Result<String, SourceError> {
    match digest.strip_prefix("sha256:") {
        Some(h) if is_hex64(h) => Ok(h.to_owned()),
        _ => Err(SourceError::Unsupported {
            what: what.to_owned(),
            why: format!("digest {digest:?} is not a sha256 digest"),
        }),
    }
}

fn is_hex64(h: &str) -> bool {
    h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_digest(what: &str, bytes: &[u8], expected: &str) -> Result<(), SourceError> {
    let actual = hex::encode(Sha256::digest(bytes));
    if actual == expected {
        Ok(())
    } else {
        Err(SourceError::DigestMismatch {
            what: what.to_owned(),
            expected: expected.to_owned(),
            actual,
        })
    }
}

// ---- OCI image layout ----

fn blob_hex(d: &Descriptor, what: &str) -> Result<String, SourceError> {
    match d.digest().algorithm() {
        DigestAlgorithm::Sha256 => Ok(d.digest().digest().to_owned()),
        other => Err(SourceError::Unsupported {
            what: what.to_owned(),
            why: format!("digest algorithm {other} (only sha256 is supported)"),
        }),
    }
}

/// Reads a blob named by a descriptor, checking its size and digest.
fn read_blob(outer: &Outer, d: &Descriptor, what: &str) -> Result<Vec<u8>, SourceError> {
    let hex = blob_hex(d, what)?;
    let bytes = outer.read_small(&format!("blobs/sha256/{hex}"))?;
    if bytes.len() as u64 != d.size() {
        return Err(SourceError::SizeMismatch {
            what: what.to_owned(),
            expected: d.size(),
            actual: bytes.len() as u64,
        });
    }
    check_digest(what, &bytes, &hex)?;
    Ok(bytes)
}

fn malformed(what: &str) -> impl Fn(oci_spec::OciSpecError) -> SourceError + '_ {
    move |e| SourceError::Malformed {
        what: what.to_owned(),
        why: e.to_string(),
    }
}

fn read_oci(outer: &Outer) -> Result<Layered, SourceError> {
    let index_bytes = outer.read_small("index.json")?;
    let index = ImageIndex::from_reader(index_bytes.as_slice()).map_err(malformed("index.json"))?;
    let (manifest_desc, manifest) = select_manifest(outer, &index, 0)?;
    let config_bytes = read_blob(outer, manifest.config(), "the image config")?;
    let diff = diff_ids("the image config", &config_bytes)?;
    if diff.len() != manifest.layers().len() {
        return Err(SourceError::Malformed {
            what: "the image config".into(),
            why: format!(
                "it lists {} layers, the manifest {}",
                diff.len(),
                manifest.layers().len()
            ),
        });
    }
    let mut layers = Vec::new();
    for (i, (d, diff_id)) in manifest.layers().iter().zip(diff).enumerate() {
        let what = format!("layer {}", i + 1);
        let hex = blob_hex(d, &what)?;
        layers.push(Layer {
            member: format!("blobs/sha256/{hex}"),
            blob: Some(hex),
            size: Some(d.size()),
            diff_id,
        });
    }
    Ok(Layered {
        kind: SourceKind::OciLayout,
        digest: format!("sha256:{}", blob_hex(&manifest_desc, "the manifest")?),
        layers,
    })
}

/// The image manifest for this machine: the only one, or the one for linux and this
/// architecture; a nested index is followed once.
fn select_manifest(
    outer: &Outer,
    index: &ImageIndex,
    depth: u8,
) -> Result<(Descriptor, ImageManifest), SourceError> {
    let arch = host_arch();
    let candidates: Vec<&Descriptor> = index.manifests().iter().collect();
    let chosen = match candidates.as_slice() {
        [] => None,
        [one] => Some(*one),
        many => many.iter().copied().find(|d| {
            d.platform().as_ref().is_some_and(|p| {
                p.os().to_string() == "linux" && p.architecture().to_string() == arch
            })
        }),
    };
    let d = chosen.ok_or_else(|| SourceError::Unsupported {
        what: "index.json".into(),
        why: format!("it lists no image for linux/{arch}"),
    })?;
    let bytes = read_blob(outer, d, "the manifest")?;
    match d.media_type() {
        MediaType::ImageIndex if depth == 0 => {
            let nested =
                ImageIndex::from_reader(bytes.as_slice()).map_err(malformed("the nested index"))?;
            select_manifest(outer, &nested, 1)
        }
        _ => {
            let m =
                ImageManifest::from_reader(bytes.as_slice()).map_err(malformed("the manifest"))?;
            Ok((d.clone(), m))
        }
    }
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

// ---- docker save ----

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    layers: Vec<String>,
}

fn read_docker(outer: &Outer) -> Result<Layered, SourceError> {
    let bytes = outer.read_small("manifest.json")?;
    let manifests: Vec<DockerManifest> =
        serde_json::from_slice(&bytes).map_err(|e| SourceError::Malformed {
            what: "manifest.json".into(),
            why: e.to_string(),
        })?;
    let m = match manifests.as_slice() {
        [one] => one,
        other => {
            return Err(SourceError::Unsupported {
                what: "manifest.json".into(),
                why: format!(
                    "it holds {} images; save exactly one (`docker save IMAGE`)",
                    other.len()
                ),
            })
        }
    };
    let config_hex = named_digest(&m.config).ok_or_else(|| SourceError::Unsupported {
        what: format!("the config {:?}", m.config),
        why: "its name is not its sha256, so it cannot be verified".into(),
    })?;
    let config = outer.read_small(&m.config)?;
    check_digest("the image config", &config, &config_hex)?;
    let diff = diff_ids("the image config", &config)?;
    if diff.len() != m.layers.len() {
        return Err(SourceError::Malformed {
            what: "manifest.json".into(),
            why: format!(
                "it lists {} layers, the config {}",
                m.layers.len(),
                diff.len()
            ),
        });
    }
    let layers = m
        .layers
        .iter()
        .zip(diff)
        .map(|(member, diff_id)| Layer {
            member: member.clone(),
            blob: member.strip_prefix("blobs/sha256/").map(str::to_owned),
            size: None,
            diff_id,
        })
        .collect();
    Ok(Layered {
        kind: SourceKind::DockerSave,
        digest: format!("sha256:{config_hex}"),
        layers,
    })
}

/// The sha256 a member's name states: `<hex>.json` or `blobs/sha256/<hex>`.
fn named_digest(member: &str) -> Option<String> {
    let base = member.strip_prefix("blobs/sha256/").unwrap_or(member);
    let base = base.strip_suffix(".json").unwrap_or(base);
    is_hex64(base).then(|| base.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_that_are_digests_verify_a_docker_config() {
        let h = "a".repeat(64);
        assert_eq!(named_digest(&format!("{h}.json")), Some(h.clone()));
        assert_eq!(named_digest(&format!("blobs/sha256/{h}")), Some(h));
        assert_eq!(named_digest("config.json"), None);
    }

    #[test]
    fn only_sha256_diff_ids_are_accepted() {
        let ok = format!("sha256:{}", "0".repeat(64));
        assert!(sha256_hex("c", &ok).is_ok());
        assert!(sha256_hex("c", "sha512:00").is_err());
        assert!(sha256_hex("c", "sha256:XYZ").is_err());
    }
}
