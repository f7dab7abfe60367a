//! Applies layer tars to an image root, refusing every hostile entry (docs/security.md, "Images").
//!
//! Per entry, in order: the name is checked ([`RelPath`]: no absolute name, no `..`); whiteouts
//! (`.wh.NAME`, `.wh..wh..opq`) are applied when the format has layers; the parent directory is
//! opened beneath the root without following any link (missing parents are created); whatever
//! occupies the name is removed unless a directory meets a directory; then the entry is created
//! with `O_EXCL`/`O_NOFOLLOW`, so nothing is ever written through an existing file or link.
//!
//! Decisions, each documented in docs/security.md:
//! - Symbolic links are stored as they are and never followed while extracting: a later entry
//!   whose path goes through one is refused (`ELOOP` from `openat2(RESOLVE_NO_SYMLINKS)`).
//! - Hard links must name an entry already extracted beneath the root (not a directory).
//! - Character and block devices are skipped and counted: the sandbox gets its own `/dev`, and the
//!   overlay is mounted `nodev` anyway. FIFOs are kept (anyone may create one).
//! - Setuid and setgid bits are stripped: image files live on the host, where a host user could
//!   otherwise run them, and inside the sandbox they would do nothing (`nosuid`, `no_new_privs`).
//! - Directory modes, owners and times are applied after the last layer, so a read-only
//!   directory (0555) does not stop later entries from landing in it.
//! - Sizes in headers are never trusted: bytes are counted as they are copied, against a cap.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;
use thiserror::Error;

use crate::entry_path::{BadName, RelPath};
use crate::tree::{self, BENEATH};

/// Highest owner id an image may use: the sandbox's user namespace maps 65536 ids.
pub const MAX_ID: u64 = 65535;

#[derive(Debug, Error)]
pub enum ExtractError {
    #[error("{layer}: entry {entry:?} is refused: {reason}")]
    BadName {
        layer: String,
        entry: String,
        reason: BadName,
    },
    #[error("{layer}: entry {entry:?} is refused: its path goes through a symbolic link or out of the image root")]
    ThroughLink { layer: String, entry: String },
    #[error("{layer}: entry {entry:?} is refused: its parent {parent:?} is not a directory")]
    ParentNotDir {
        layer: String,
        entry: String,
        parent: String,
    },
    #[error("{layer}: hard link {entry:?} is refused: its target {target:?} {reason}")]
    BadHardLink {
        layer: String,
        entry: String,
        target: String,
        reason: &'static str,
    },
    #[error("{layer}: entry {entry:?} is refused: {kind} entries are not supported")]
    Unsupported {
        layer: String,
        entry: String,
        kind: String,
    },
    #[error("{layer}: entry {entry:?} is refused: owner id {id} is above {MAX_ID}, the highest id a sandbox maps")]
    IdOutOfRange {
        layer: String,
        entry: String,
        id: u64,
    },
    #[error("the image is larger than the import limit of {limit} bytes (pass a larger --max-size if you trust it)")]
    TooLarge { limit: u64 },
    #[error("the image has more than {limit} entries, the import limit")]
    TooManyEntries { limit: u64 },
    #[error("{layer}: cannot read the archive: {source}")]
    Read {
        layer: String,
        #[source]
        source: io::Error,
    },
    #[error("{layer}: cannot {op} {entry:?}: {source}")]
    Fs {
        layer: String,
        entry: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

/// Caps on what one import may write (the archive's own sizes are never trusted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Bytes of file content, all layers together.
    pub max_bytes: u64,
    /// Entries, all layers together.
    pub max_entries: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            max_bytes: 32 << 30,
            max_entries: 4_000_000,
        }
    }
}

/// How one import extracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractOptions {
    /// Give entries the archive's owners (root, or root of a user namespace mapped like the
    /// sandbox's); `false` leaves everything owned by the extracting user.
    pub chown: bool,
    /// Honour `.wh.` whiteouts and `.wh..wh..opq` opaque markers (layered formats only).
    pub whiteouts: bool,
    pub caps: Caps,
}

/// What an import wrote and what it left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub entries: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Character and block device entries skipped.
    pub devices_skipped: u64,
    /// Entries whose setuid/setgid bits were removed.
    pub setid_stripped: u64,
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
}

/// Extracts layers, in order, into one root directory.
pub struct Extractor {
    root: OwnedFd,
    opts: ExtractOptions,
    stats: Stats,
    /// Paths created by the layer being applied (whiteouts only hide lower layers).
    layer_paths: HashSet<RelPath>,
    /// Directory metadata, applied by [`Extractor::finish`].
    dirs: HashMap<RelPath, Meta>,
    layer: String,
}

impl Extractor {
    /// `root` must be an existing, empty directory (the staging root).
    pub fn new(root: &Path, opts: ExtractOptions) -> Result<Self, ExtractError> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| ExtractError::Fs {
            layer: "image root".into(),
            entry: root.display().to_string(),
            op: "open",
            source: e.into(),
        })?;
        Ok(Self {
            root: fd,
            opts,
            stats: Stats::default(),
            layer_paths: HashSet::new(),
            dirs: HashMap::new(),
            layer: String::new(),
        })
    }

    /// Applies one layer tar, read to its end (so a caller hashing the stream sees every byte).
    pub fn apply_layer<R: Read>(&mut self, layer: &str, reader: R) -> Result<R, ExtractError> {
        self.layer = layer.to_owned();
        self.layer_paths.clear();
        let mut archive = tar::Archive::new(reader);
        let read_err = |source| ExtractError::Read {
            layer: layer.to_owned(),
            source,
        };
        for entry in archive.entries().map_err(read_err)? {
            let entry = entry.map_err(read_err)?;
            self.entry(entry)?;
        }
        let mut reader = archive.into_inner();
        io::copy(&mut reader, &mut io::sink()).map_err(read_err)?;
        Ok(reader)
    }

    /// Applies directory modes, owners and times (deepest first), and returns the counts.
    pub fn finish(self) -> Result<Stats, ExtractError> {
        let mut dirs: Vec<_> = self.dirs.iter().collect();
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().len()));
        for (rel, meta) in dirs {
            // Replaced by a file or a link in a later layer, or whited out: nothing to do.
            let fd = match tree::open_dir(self.root.as_fd(), rel) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => continue,
                Err(e) => return Err(self.fs_err(rel, "open", e)),
            };
            self.set_meta(&fd, rel, *meta)?;
        }
        Ok(self.stats)
    }

    fn entry<R: Read>(&mut self, mut e: tar::Entry<'_, R>) -> Result<(), ExtractError> {
        use tar::EntryType as T;
        let raw = e.path_bytes().into_owned();
        let shown = crate::entry_path::escape_controls(&String::from_utf8_lossy(&raw));
        let rel = RelPath::parse(&raw).map_err(|reason| ExtractError::BadName {
            layer: self.layer.clone(),
            entry: shown.clone(),
            reason,
        })?;
        let kind = e.header().entry_type();
        if matches!(
            kind,
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink
        ) {
            return Ok(());
        }
        self.stats.entries += 1;
        if self.stats.entries > self.opts.caps.max_entries {
            return Err(ExtractError::TooManyEntries {
                limit: self.opts.caps.max_entries,
            });
        }
        let meta = self.meta(&e, &rel)?;
        if self.opts.whiteouts && rel.file_name().is_some_and(|n| n.starts_with(b".wh.")) {
            return self.whiteout(&rel);
        }
        if rel.is_root() {
            return match kind {
                T::Directory => {
                    self.dirs.insert(rel, meta);
                    Ok(())
                }
                other => Err(self.unsupported(&rel, &format!("{other:?} at the root"))),
            };
        }
        let parent = self.ensure_parent(&rel)?;
        let name = rel.file_name().unwrap_or_default().to_vec();
        match kind {
            T::Directory => self.make_dir(&parent, &name, &rel, meta)?,
            T::Regular | T::Continuous => self.make_file(&parent, &name, &rel, meta, &mut e)?,
            T::Symlink => {
                let target = e.link_name_bytes().map(|t| t.into_owned());
                let target = target.ok_or_else(|| self.unsupported(&rel, "target-less link"))?;
                self.clear_slot(&parent, &name, &rel, false)?;
                rustix::fs::symlinkat(target.as_slice(), &parent, name.as_slice())
                    .map_err(|e| self.fs_err(&rel, "create the symlink", e))?;
                self.chown_at(&parent, &name, &rel, meta)?;
            }
            T::Link => self.make_hard_link(&parent, &name, &rel, &e)?,
            T::Char | T::Block => {
                self.stats.devices_skipped += 1;
                return Ok(());
            }
            T::Fifo => {
                self.clear_slot(&parent, &name, &rel, false)?;
                let mode = Mode::from_raw_mode(meta.mode & 0o777);
                rustix::fs::mknodat(&parent, name.as_slice(), FileType::Fifo, mode, 0)
                    .map_err(|e| self.fs_err(&rel, "create the fifo", e))?;
                self.chown_at(&parent, &name, &rel, meta)?;
            }
            other => return Err(self.unsupported(&rel, &format!("{other:?}"))),
        }
        self.layer_paths.insert(rel);
        Ok(())
    }

    fn meta<R: Read>(
        &mut self,
        e: &tar::Entry<'_, R>,
        rel: &RelPath,
    ) -> Result<Meta, ExtractError> {
        let h = e.header();
        let bad = |source: io::Error| ExtractError::Read {
            layer: self.layer.clone(),
            source,
        };
        let mode = h.mode().map_err(bad)?;
        let (uid, gid) = (h.uid().map_err(bad)?, h.gid().map_err(bad)?);
        if self.opts.chown {
            for id in [uid, gid] {
                if id > MAX_ID {
                    return Err(ExtractError::IdOutOfRange {
                        layer: self.layer.clone(),
                        entry: rel.display(),
                        id,
                    });
                }
            }
        }
        let is_link = matches!(
            h.entry_type(),
            tar::EntryType::Symlink | tar::EntryType::Link
        );
        if mode & 0o6000 != 0 && !is_link {
            self.stats.setid_stripped += 1;
        }
        Ok(Meta {
            mode: mode & 0o1777,
            uid,
            gid,
            mtime: h.mtime().unwrap_or(0),
        })
    }

    /// Opens the entry's parent beneath the root, creating missing directories (root-owned
    /// 0755, as other tools do); a link or a non-directory on the way refuses the entry.
    fn ensure_parent(&mut self, rel: &RelPath) -> Result<OwnedFd, ExtractError> {
        let parent = rel.parent();
        match tree::open_dir(self.root.as_fd(), &parent) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(self.resolve_err(rel, &parent, e)),
        }
        let mut cur = rustix::io::dup(&self.root).map_err(|e| self.fs_err(rel, "open", e))?;
        let mut sofar = RelPath::root();
        for comp in parent.components() {
            sofar = sofar.join(comp);
            let open = |dir: &OwnedFd| {
                rustix::fs::openat2(
                    dir,
                    comp.as_slice(),
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                    BENEATH,
                )
            };
            cur = match open(&cur) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    rustix::fs::mkdirat(&cur, comp.as_slice(), Mode::from_raw_mode(0o700))
                        .map_err(|e| self.fs_err(&sofar, "create the directory", e))?;
                    let meta = Meta {
                        mode: 0o755,
                        uid: 0,
                        gid: 0,
                        mtime: 0,
                    };
                    self.dirs.insert(sofar.clone(), meta);
                    self.layer_paths.insert(sofar.clone());
                    open(&cur).map_err(|e| self.resolve_err(rel, &sofar, e))?
                }
                Err(e) => return Err(self.resolve_err(rel, &sofar, e)),
            };
        }
        Ok(cur)
    }

    /// Empties the slot `name` for a new entry; an existing directory stays when a directory
    /// arrives (its contents merge, as layers do).
    fn clear_slot(
        &self,
        parent: &OwnedFd,
        name: &[u8],
        rel: &RelPath,
        new_is_dir: bool,
    ) -> Result<bool, ExtractError> {
        match tree::kind_at(parent.as_fd(), name) {
            Ok(None) => Ok(false),
            Ok(Some(FileType::Directory)) if new_is_dir => Ok(true),
            Ok(Some(_)) => tree::remove_at(parent.as_fd(), name)
                .map(|()| false)
                .map_err(|e| self.fs_err(rel, "replace", e)),
            Err(e) => Err(self.fs_err(rel, "inspect", e)),
        }
    }

    fn make_dir(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        rel: &RelPath,
        meta: Meta,
    ) -> Result<(), ExtractError> {
        if !self.clear_slot(parent, name, rel, true)? {
            rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700))
                .map_err(|e| self.fs_err(rel, "create the directory", e))?;
        }
        self.dirs.insert(rel.clone(), meta);
        Ok(())
    }

    fn make_file<R: Read>(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        rel: &RelPath,
        meta: Meta,
        data: &mut R,
    ) -> Result<(), ExtractError> {
        self.clear_slot(parent, name, rel, false)?;
        let fd = rustix::fs::openat(
            parent,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| self.fs_err(rel, "create", e))?;
        let mut file = std::fs::File::from(fd);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match data.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(ExtractError::Read {
                        layer: self.layer.clone(),
                        source,
                    })
                }
            };
            self.stats.bytes += n as u64;
            if self.stats.bytes > self.opts.caps.max_bytes {
                return Err(ExtractError::TooLarge {
                    limit: self.opts.caps.max_bytes,
                });
            }
            file.write_all(&buf[..n])
                .map_err(|source| ExtractError::Fs {
                    layer: self.layer.clone(),
                    entry: rel.display(),
                    op: "write",
                    source,
                })?;
        }
        self.set_meta(&OwnedFd::from(file), rel, meta)
    }

    fn make_hard_link<R: Read>(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        rel: &RelPath,
        e: &tar::Entry<'_, R>,
    ) -> Result<(), ExtractError> {
        let raw = e
            .link_name_bytes()
            .map(|t| t.into_owned())
            .unwrap_or_default();
        let shown = crate::entry_path::escape_controls(&String::from_utf8_lossy(&raw));
        let refuse = |reason| ExtractError::BadHardLink {
            layer: self.layer.clone(),
            entry: rel.display(),
            target: shown.clone(),
            reason,
        };
        let target = RelPath::parse(&raw).map_err(|_| refuse("leaves the image root"))?;
        if target.is_root() {
            return Err(refuse("is the image root"));
        }
        if target == *rel {
            return Ok(());
        }
        let tparent = tree::open_dir(self.root.as_fd(), &target.parent()).map_err(|e| match e {
            Errno::NOENT => refuse("does not exist in the image"),
            _ => refuse("goes through a symbolic link or out of the image root"),
        })?;
        let tname = target.file_name().unwrap_or_default();
        match tree::kind_at(tparent.as_fd(), tname) {
            Ok(None) => return Err(refuse("does not exist in the image")),
            Ok(Some(FileType::Directory)) => return Err(refuse("is a directory")),
            Ok(Some(_)) => {}
            Err(e) => return Err(self.fs_err(&target, "inspect", e)),
        }
        self.clear_slot(parent, name, rel, false)?;
        rustix::fs::linkat(&tparent, tname, parent, name, AtFlags::empty())
            .map_err(|e| self.fs_err(rel, "create the hard link", e))
    }

    /// `.wh.NAME` removes NAME from lower layers; `.wh..wh..opq` empties its directory of
    /// everything lower layers put there (OCI image spec, "Whiteouts").
    fn whiteout(&mut self, rel: &RelPath) -> Result<(), ExtractError> {
        let dir = rel.parent();
        let fd = match tree::open_dir(self.root.as_fd(), &dir) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(self.resolve_err(rel, &dir, e)),
        };
        let name = rel.file_name().unwrap_or_default();
        if name == b".wh..wh..opq" {
            return self.opaque(&dir, fd.as_fd());
        }
        let hidden = &name[4..];
        if hidden.is_empty() || hidden == b"." || hidden == b".." {
            return Err(self.unsupported(rel, "malformed whiteout"));
        }
        if self.layer_paths.contains(&dir.join(hidden)) {
            return Ok(());
        }
        tree::remove_at(fd.as_fd(), hidden).map_err(|e| self.fs_err(rel, "apply the whiteout", e))
    }

    fn opaque(&self, dir: &RelPath, fd: BorrowedFd<'_>) -> Result<(), ExtractError> {
        let names = tree::children(fd).map_err(|e| self.fs_err(dir, "list", e))?;
        for name in names {
            let path = dir.join(&name);
            if !self.layer_paths.contains(&path) {
                tree::remove_at(fd, &name).map_err(|e| self.fs_err(&path, "remove", e))?;
            } else if let Ok(Some(FileType::Directory)) = tree::kind_at(fd, &name) {
                let sub = tree::open_dir(self.root.as_fd(), &path)
                    .map_err(|e| self.fs_err(&path, "open", e))?;
                self.opaque(&path, sub.as_fd())?;
            }
        }
        Ok(())
    }

    fn set_meta(&self, fd: &OwnedFd, rel: &RelPath, meta: Meta) -> Result<(), ExtractError> {
        if self.opts.chown {
            let (uid, gid) = ids(meta);
            rustix::fs::fchown(fd, Some(uid), Some(gid))
                .map_err(|e| self.fs_err(rel, "set the owner of", e))?;
        }
        rustix::fs::fchmod(fd, Mode::from_raw_mode(meta.mode))
            .map_err(|e| self.fs_err(rel, "set the mode of", e))?;
        let t = Timespec {
            tv_sec: i64::try_from(meta.mtime).unwrap_or(0),
            tv_nsec: 0,
        };
        rustix::fs::futimens(
            fd,
            &Timestamps {
                last_access: t,
                last_modification: t,
            },
        )
        .map_err(|e| self.fs_err(rel, "set the times of", e))
    }

    fn chown_at(
        &self,
        parent: &OwnedFd,
        name: &[u8],
        rel: &RelPath,
        meta: Meta,
    ) -> Result<(), ExtractError> {
        if !self.opts.chown {
            return Ok(());
        }
        let (uid, gid) = ids(meta);
        rustix::fs::chownat(
            parent,
            name,
            Some(uid),
            Some(gid),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| self.fs_err(rel, "set the owner of", e))
    }

    fn resolve_err(&self, rel: &RelPath, at: &RelPath, e: Errno) -> ExtractError {
        match e {
            Errno::LOOP | Errno::XDEV => ExtractError::ThroughLink {
                layer: self.layer.clone(),
                entry: rel.display(),
            },
            Errno::NOTDIR => ExtractError::ParentNotDir {
                layer: self.layer.clone(),
                entry: rel.display(),
                parent: at.display(),
            },
            e => self.fs_err(at, "open", e),
        }
    }

    fn unsupported(&self, rel: &RelPath, kind: &str) -> ExtractError {
        ExtractError::Unsupported {
            layer: self.layer.clone(),
            entry: rel.display(),
            kind: kind.to_owned(),
        }
    }

    fn fs_err(&self, rel: &RelPath, op: &'static str, e: Errno) -> ExtractError {
        ExtractError::Fs {
            layer: self.layer.clone(),
            entry: rel.display(),
            op,
            source: e.into(),
        }
    }
}

fn ids(meta: Meta) -> (rustix::fs::Uid, rustix::fs::Gid) {
    // Checked against MAX_ID when the entry was read.
    let uid = u32::try_from(meta.uid).unwrap_or(u32::MAX);
    let gid = u32::try_from(meta.gid).unwrap_or(u32::MAX);
    (
        rustix::fs::Uid::from_raw(uid),
        rustix::fs::Gid::from_raw(gid),
    )
}
