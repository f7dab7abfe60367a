//! One import's work: read the archive, verify it, extract its layers into the staging root.
//!
//! Runs in the importing process (root, or a user without subordinate ids) or, for an
//! unprivileged user with subordinate ids, in a helper inside a user namespace mapped like the
//! sandbox's (`helper.rs`). It writes only beneath the staging directory.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, Write};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::extract::{Caps, ExtractError, ExtractOptions, Extractor, Stats};
use crate::outer::{Hashing, Outer, Tally};
use crate::source::{self, Layer, SourceError, SourceKind};
use crate::store::ROOTFS;

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
const DECOMPRESSED: &str = "archive.tar";

#[derive(Debug, Error)]
pub enum UnpackError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not a regular file (import reads a file, not a pipe or device)")]
    NotAFile { path: PathBuf },
    #[error("{path}: {why}")]
    Format { path: PathBuf, why: String },
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Extract(#[from] ExtractError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl UnpackError {
    /// Whether the archive itself is at fault (refused input), as opposed to the host failing.
    pub fn is_refusal(&self) -> bool {
        match self {
            UnpackError::NotAFile { .. } | UnpackError::Format { .. } => true,
            UnpackError::Source(e) => match e {
                SourceError::Read { .. } => false,
                SourceError::Missing { .. }
                | SourceError::Malformed { .. }
                | SourceError::DigestMismatch { .. }
                | SourceError::SizeMismatch { .. }
                | SourceError::Unsupported { .. } => true,
            },
            UnpackError::Extract(e) => match e {
                ExtractError::Fs { .. } => false,
                ExtractError::BadName { .. }
                | ExtractError::ThroughLink { .. }
                | ExtractError::ParentNotDir { .. }
                | ExtractError::BadHardLink { .. }
                | ExtractError::Unsupported { .. }
                | ExtractError::IdOutOfRange { .. }
                | ExtractError::TooLarge { .. }
                | ExtractError::TooManyEntries { .. }
                | ExtractError::Read { .. } => true,
            },
            UnpackError::Open { .. } | UnpackError::Write { .. } => false,
        }
    }
}

/// What to unpack where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnpackJob {
    pub archive: PathBuf,
    /// The staging directory; the tree goes to its `rootfs/`.
    pub staging: PathBuf,
    pub chown: bool,
    pub max_bytes: u64,
    pub max_entries: u64,
}

/// What was unpacked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unpacked {
    pub source: SourceKind,
    pub digest: String,
    pub layers: usize,
    pub stats: Stats,
}

pub fn unpack(job: &UnpackJob) -> Result<Unpacked, UnpackError> {
    let path = &job.archive;
    let file = open_regular(path)?;
    let mut head = [0u8; 4];
    let n = read_head(&file, &mut head).map_err(|source| UnpackError::Open {
        path: path.clone(),
        source,
    })?;
    if head[..n].starts_with(ZSTD_MAGIC) {
        return Err(UnpackError::Format {
            path: path.clone(),
            why: "zstd-compressed archives are not supported; decompress it first (`zstd -d`)"
                .into(),
        });
    }
    let (file, gz_digest) = if head[..n].starts_with(GZIP_MAGIC) {
        let (f, d) = decompress(file, &job.staging.join(DECOMPRESSED), job.max_bytes)?;
        (f, Some(d))
    } else {
        (file, None)
    };
    let root = job.staging.join(ROOTFS);
    std::fs::create_dir(&root).map_err(|source| UnpackError::Write {
        path: root.clone(),
        source,
    })?;
    let outer = Outer::index(file.try_clone().map_err(|source| UnpackError::Open {
        path: path.clone(),
        source,
    })?)
    // The tar reader's message quotes the bytes it choked on: not worth printing.
    .map_err(|_| UnpackError::Format {
        path: path.clone(),
        why: "not a tar archive, or a damaged one".into(),
    })?;
    let caps = Caps {
        max_bytes: job.max_bytes,
        max_entries: job.max_entries,
    };
    let result = match source::detect(&outer) {
        None => {
            // Indexing moved the shared file offset; the rootfs is read again from the start.
            let mut file = file;
            file.seek(io::SeekFrom::Start(0))
                .map_err(|source| UnpackError::Open {
                    path: path.clone(),
                    source,
                })?;
            unpack_rootfs(file, &root, job.chown, caps, gz_digest)
        }
        Some(kind) => unpack_layered(&outer, kind, &root, job.chown, caps),
    };
    let _ = std::fs::remove_file(job.staging.join(DECOMPRESSED));
    result
}

fn open_regular(path: &Path) -> Result<File, UnpackError> {
    let file = File::open(path).map_err(|source| UnpackError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let meta = file.metadata().map_err(|source| UnpackError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(UnpackError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    Ok(file)
}

fn read_head(file: &File, head: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < head.len() {
        match file.read_at(&mut head[n..], n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Decompresses a gzip archive into the staging directory (capped), returning the plain tar
/// and the sha256 of the compressed file.
fn decompress(file: File, to: &Path, max: u64) -> Result<(File, String), UnpackError> {
    let tally = Tally::default();
    let mut gz = GzDecoder::new(Hashing::new(&file, &tally));
    let werr = |source| UnpackError::Write {
        path: to.to_path_buf(),
        source,
    };
    let mut out = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(werr)?;
    let copied =
        io::copy(&mut (&mut gz).take(max + 1), &mut out).map_err(|e| UnpackError::Format {
            path: to.to_path_buf(),
            why: format!("not a valid gzip stream ({e})"),
        })?;
    if copied > max {
        return Err(ExtractError::TooLarge { limit: max }.into());
    }
    out.flush().map_err(werr)?;
    let mut rest = gz.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(werr)?;
    Ok((out, format!("sha256:{}", tally.finish().0)))
}

fn unpack_rootfs(
    file: File,
    root: &Path,
    chown: bool,
    caps: Caps,
    gz_digest: Option<String>,
) -> Result<Unpacked, UnpackError> {
    let opts = ExtractOptions {
        chown,
        whiteouts: false,
        caps,
    };
    let mut ex = Extractor::new(root, opts)?;
    let tally = Tally::default();
    ex.apply_layer("the archive", Hashing::new(&file, &tally))?;
    let stats = ex.finish()?;
    let digest = gz_digest.unwrap_or_else(|| format!("sha256:{}", tally.finish().0));
    Ok(Unpacked {
        source: SourceKind::Rootfs,
        digest,
        layers: 1,
        stats,
    })
}

fn unpack_layered(
    outer: &Outer,
    kind: SourceKind,
    root: &Path,
    chown: bool,
    caps: Caps,
) -> Result<Unpacked, UnpackError> {
    let image = source::read_layered(outer, kind)?;
    let opts = ExtractOptions {
        chown,
        whiteouts: true,
        caps,
    };
    let mut ex = Extractor::new(root, opts)?;
    let n = image.layers.len();
    for (i, layer) in image.layers.iter().enumerate() {
        apply_layer(&mut ex, outer, &format!("layer {} of {n}", i + 1), layer)?;
    }
    let stats = ex.finish()?;
    Ok(Unpacked {
        source: kind,
        digest: image.digest,
        layers: n,
        stats,
    })
}

/// Extracts one layer blob (gzip or plain) and checks its digests and size.
fn apply_layer(
    ex: &mut Extractor,
    outer: &Outer,
    label: &str,
    layer: &Layer,
) -> Result<(), UnpackError> {
    let (blob, diff) = (Tally::default(), Tally::default());
    let mut buf = BufReader::new(Hashing::new(outer.open(&layer.member)?, &blob));
    let read_err = |source| SourceError::Read {
        what: format!("{label} ({})", layer.member),
        source,
    };
    let head = buf.fill_buf().map_err(read_err)?.to_vec();
    if head.starts_with(ZSTD_MAGIC) {
        return Err(SourceError::Unsupported {
            what: label.to_owned(),
            why: "zstd-compressed layers are not supported; save the image with gzip layers \
                  (e.g. `skopeo copy --dest-compress-format gzip`)"
                .into(),
        }
        .into());
    }
    if head.starts_with(GZIP_MAGIC) {
        let done = ex.apply_layer(label, Hashing::new(GzDecoder::new(buf), &diff))?;
        let mut rest = done.into_inner().into_inner();
        io::copy(&mut rest, &mut io::sink()).map_err(read_err)?;
    } else {
        ex.apply_layer(label, Hashing::new(buf, &diff))?;
    }
    let (blob_hex, blob_len) = blob.finish();
    let what = format!("{label} ({})", layer.member);
    if let Some(size) = layer.size.filter(|s| *s != blob_len) {
        return Err(SourceError::SizeMismatch {
            what,
            expected: size,
            actual: blob_len,
        }
        .into());
    }
    if let Some(expected) = layer.blob.as_ref().filter(|e| **e != blob_hex) {
        return Err(SourceError::DigestMismatch {
            what,
            expected: expected.clone(),
            actual: blob_hex,
        }
        .into());
    }
    let (diff_hex, _) = diff.finish();
    if diff_hex != layer.diff_id {
        return Err(SourceError::DigestMismatch {
            what: format!("{what}, uncompressed"),
            expected: layer.diff_id.clone(),
            actual: diff_hex,
        }
        .into());
    }
    Ok(())
}
