//! The local image store: `$XDG_DATA_HOME/airlock/images/` (0700).
//!
//! Layout: `<name>/image.json` (metadata, 0600, written by the invoking user) and
//! `<name>/rootfs/` (the tree a sandbox uses as its lower layer). An import works in
//! `.import-<pid>-<n>/`, marked with the importing process's identity, and is published by one
//! `renameat2(RENAME_NOREPLACE)` to `<name>`: an interrupted import publishes nothing, and two
//! imports of one name cannot overwrite each other. Removal first renames `<name>` to
//! `.remove-<pid>-<n>/` (unpublished at once), then deletes it. Leftover `.import-*` and
//! `.remove-*` directories whose process is gone are swept by the next import or removal.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use airlock_core::{check_private_dir, ensure_private_dir, write_atomic, DirPresence};
use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::extract::Stats;
use crate::name::ImageName;
use crate::source::SourceKind;

pub const IMAGES_DIR: &str = "images";
const META: &str = "image.json";
pub const ROOTFS: &str = "rootfs";
const OWNER: &str = "owner";

#[derive(Debug, Error)]
pub enum StoreError {
    #[error(transparent)]
    Private(#[from] airlock_core::PrivateDirError),
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: airlock_core::AtomicWriteError,
    },
    #[error("an image named {name:?} already exists")]
    Exists { name: String },
    #[error("no image named {name:?}")]
    NotFound { name: String },
    #[error("image {name:?} is in use by a running sandbox (`airlock run`)")]
    InUse { name: String },
    #[error("image {name:?} is being removed")]
    Removing { name: String },
    #[error("the metadata of image {name:?} ({path}) is unreadable: {why}")]
    Corrupt {
        name: String,
        path: PathBuf,
        why: String,
    },
}

/// How the owners of an image's files relate to the host (docs/security.md, "Images").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ownership {
    /// Imported by root: the archive's owner ids as they are.
    Archive,
    /// Imported by an unprivileged user inside a user namespace mapped like the sandbox's: the
    /// archive's ids as the sandbox sees them, stored as the user's subordinate ids.
    Subordinate,
    /// Imported by an unprivileged user without subordinate ids: every file is the user's own.
    Invoker,
}

impl Ownership {
    /// Whether deleting the tree needs the user namespace it was written in.
    pub fn needs_namespace(self) -> bool {
        matches!(self, Ownership::Subordinate)
    }
}

/// What `image ls` shows and what a sandbox plan records (its digest, for L1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    pub name: String,
    pub source: SourceKind,
    /// `sha256:<hex>` (OCI: the manifest's; docker: the config's; rootfs: the file's).
    pub digest: String,
    /// Bytes of file content.
    pub size: u64,
    pub layers: usize,
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub imported_at: String,
    pub ownership: Ownership,
    pub stats: Stats,
}

pub struct Store {
    dir: PathBuf,
}

/// An import's working directory; the tree goes to [`Staging::rootfs`].
#[derive(Debug)]
pub struct Staging {
    pub dir: PathBuf,
}

impl Staging {
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join(ROOTFS)
    }
}

/// An open hold on an image ([`Store::hold`]); dropping it releases the hold.
#[derive(Debug)]
pub struct ImageHold {
    _dir: OwnedFd,
}

/// The exclusive lock `image rm` takes before it checks that no sandbox uses the image
/// ([`Store::lock_for_removal`]): while it is held no sandbox can take a hold, so a sandbox
/// record written under a hold is either seen by that check or never written.
#[derive(Debug)]
pub struct RemovalLock {
    name: String,
    _dir: OwnedFd,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl Store {
    /// The store under `data_root`, created (0700) when absent.
    pub fn open(data_root: &Path) -> Result<Store, StoreError> {
        let anchor = data_root.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(anchor).map_err(io_err("create", anchor))?;
        let dir = data_root.join(IMAGES_DIR);
        ensure_private_dir(&dir, anchor)?;
        Ok(Store { dir })
    }

    /// The store if it exists, creating nothing (`plan`, `ls`).
    pub fn open_existing(data_root: &Path) -> Result<Option<Store>, StoreError> {
        let anchor = data_root.parent().unwrap_or(Path::new("/"));
        if !anchor.exists() {
            return Ok(None);
        }
        let dir = data_root.join(IMAGES_DIR);
        Ok(match check_private_dir(&dir, anchor)? {
            DirPresence::Present => Some(Store { dir }),
            DirPresence::Absent => None,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The tree of image `name` (whether or not it exists).
    pub fn rootfs(&self, name: &ImageName) -> PathBuf {
        self.dir.join(name.as_str()).join(ROOTFS)
    }

    pub fn get(&self, name: &ImageName) -> Result<ImageInfo, StoreError> {
        let path = self.dir.join(name.as_str()).join(META);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound {
                    name: name.as_str().to_owned(),
                })
            }
            Err(source) => {
                return Err(StoreError::Io {
                    op: "read",
                    path,
                    source,
                })
            }
        };
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            name: name.as_str().to_owned(),
            path,
            why: e.to_string(),
        })
    }

    /// Every published image, by name; a corrupt entry is returned as its error.
    pub fn list(&self) -> Result<Vec<Result<ImageInfo, StoreError>>, StoreError> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))? {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Ok(n) = ImageName::parse(&name) {
                names.push(n);
            }
        }
        names.sort();
        Ok(names.iter().map(|n| self.get(n)).collect())
    }

    /// A fresh working directory for an import, marked with this process's identity.
    pub fn begin_import(&self) -> Result<Staging, StoreError> {
        let dir = self.fresh(".import")?;
        write_atomic(&dir.join(OWNER), owner_text().as_bytes(), 0o600).map_err(|source| {
            StoreError::Write {
                path: dir.join(OWNER),
                source,
            }
        })?;
        Ok(Staging { dir })
    }

    /// Writes the metadata and publishes the staged import under `info.name`.
    pub fn publish(&self, staging: &Staging, info: &ImageInfo) -> Result<(), StoreError> {
        let meta = staging.dir.join(META);
        let json = serde_json::to_vec_pretty(info).unwrap_or_default();
        write_atomic(&meta, &json, 0o600).map_err(|source| StoreError::Write {
            path: meta.clone(),
            source,
        })?;
        let target = self.dir.join(&info.name);
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            &staging.dir,
            rustix::fs::CWD,
            &target,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => {
                let _ = std::fs::remove_file(target.join(OWNER));
                Ok(())
            }
            Err(rustix::io::Errno::EXIST) => Err(StoreError::Exists {
                name: info.name.clone(),
            }),
            Err(e) => Err(StoreError::Io {
                op: "publish",
                path: target,
                source: e.into(),
            }),
        }
    }

    /// A shared hold on image `name`, for a sandbox that uses it without a lifecycle record
    /// (`airlock run`): while any hold is open, [`Store::unpublish`] refuses. It is a `flock`
    /// on the image's directory, so it ends with the holding process however that ends.
    pub fn hold(&self, name: &ImageName) -> Result<ImageHold, StoreError> {
        let dir = self.lock(name, FlockOperation::NonBlockingLockShared)?;
        dir.ok_or_else(|| StoreError::Removing {
            name: name.to_string(),
        })
    }

    /// Opens the directory of image `name` and takes `op` on it; `None` when another process
    /// holds a conflicting lock.
    fn lock(&self, name: &ImageName, op: FlockOperation) -> Result<Option<ImageHold>, StoreError> {
        let path = self.dir.join(name.as_str());
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = match rustix::fs::open(&path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                return Err(StoreError::NotFound {
                    name: name.to_string(),
                })
            }
            Err(e) => return Err(io_err("open", &path)(e.into())),
        };
        match rustix::fs::flock(&dir, op) {
            Ok(()) => Ok(Some(ImageHold { _dir: dir })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(io_err("lock", &path)(e.into())),
        }
    }

    /// The exclusive lock on image `name` that [`Store::unpublish`] needs; refused while a
    /// sandbox holds the image ([`Store::hold`]).
    pub fn lock_for_removal(&self, name: &ImageName) -> Result<RemovalLock, StoreError> {
        self.get(name)?;
        let held = self
            .lock(name, FlockOperation::NonBlockingLockExclusive)?
            .ok_or_else(|| StoreError::InUse {
                name: name.to_string(),
            })?;
        Ok(RemovalLock {
            name: name.to_string(),
            _dir: held._dir,
        })
    }

    /// Unpublishes image `name` at once (a rename) and returns the directory left to delete;
    /// the caller holds its [`RemovalLock`] (and has checked, under it, that nothing uses it).
    pub fn unpublish(&self, name: &ImageName, lock: &RemovalLock) -> Result<PathBuf, StoreError> {
        if lock.name != name.as_str() {
            return Err(StoreError::InUse {
                name: name.to_string(),
            });
        }
        let to = self.fresh_name(".remove");
        let from = self.dir.join(name.as_str());
        std::fs::rename(&from, &to).map_err(io_err("unpublish", &from))?;
        write_atomic(&to.join(OWNER), owner_text().as_bytes(), 0o600).map_err(|source| {
            StoreError::Write {
                path: to.join(OWNER),
                source,
            }
        })?;
        Ok(to)
    }

    /// Working directories (`.import-*`, `.remove-*`) whose owning process is gone.
    pub fn abandoned(&self) -> Result<Vec<PathBuf>, StoreError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))? {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.starts_with(".import-") || name.starts_with(".remove-")) {
                continue;
            }
            let owner = std::fs::read_to_string(entry.path().join(OWNER)).unwrap_or_default();
            if !owner_alive(&owner) {
                out.push(entry.path());
            }
        }
        Ok(out)
    }

    fn fresh_name(&self, prefix: &str) -> PathBuf {
        let n: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.dir
            .join(format!("{prefix}-{}-{n:x}", std::process::id()))
    }

    fn fresh(&self, prefix: &str) -> Result<PathBuf, StoreError> {
        let dir = self.fresh_name(prefix);
        std::fs::create_dir(&dir).map_err(io_err("create", &dir))?;
        Ok(dir)
    }
}

/// `<pid> <start time>` of this process (R2: a pid alone can be reused).
fn owner_text() -> String {
    let pid = std::process::id();
    format!("{pid} {}\n", start_time(pid).unwrap_or(0))
}

fn owner_alive(text: &str) -> bool {
    let mut parts = text.split_whitespace();
    // Without a readable marker ownership cannot be proven (R2): leave it alone.
    let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
        return true;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return true;
    };
    start_time(pid) == Some(start)
}

/// Field 22 of `/proc/PID/stat`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}
