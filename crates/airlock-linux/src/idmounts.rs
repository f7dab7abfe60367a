//! Id-mapped mounts of a root invoker's sandbox (PRODUCT I2, I5; docs/security.md).
//!
//! A root invoker's sandbox maps no host id it did not claim ([`crate::idmap`]): host root's
//! files would appear as `nobody`, and the sandbox could neither use its workspace nor change
//! its system files. So the host process, which is privileged, shows each host directory the
//! sandbox needs through an id-mapped mount and passes the detached mounts to the init stage
//! with the `mapped` handshake line; the init stage attaches them in its own mount namespace
//! instead of bind-mounting host paths:
//! - `lower:<name>` (the `host` image's system directories and its package state in `/var`,
//!   `lower:var-lib-dpkg` …) and `image` (a directory image):
//!   through a user namespace with exactly the sandbox's own maps ([`prepare_image`]), so a
//!   file host root owns is owned by in-sandbox root (which can change it in the overlay) and
//!   every other host id appears as itself inside or as `nobody`; read-only. A plain `run`'s
//!   `host` image leaves out the sandbox user's ids (nothing there is masked, so no image file
//!   may be the sandbox user's: `rootfs/unreadable.rs`);
//! - `map:<i>` (workspaces and mounts, in mount order), `egress` and `bundle`: through a user
//!   namespace made for the purpose ([`crate::idmap::MountMaps`]): the invoker's files are the
//!   sandbox user's, and what the sandbox user writes belongs to the invoker on the host;
//!   read-only unless the mapping is writable.
//!
//! - `root-map:<i>` (the root view, when `--root` processes may run: `run --root`, `up`): the
//!   same workspaces and mounts through a namespace that shows the invoker as in-sandbox root
//!   ([`crate::idmap::MountMaps`] `root_*`), so what `--root` writes there belongs to the
//!   invoker too. The init stage attaches them in a mount namespace of their own, which
//!   `--root` processes join (`rootfs/root_view.rs`).
//!
//! Cost on the start path (issue 9's budget, B3): every clone is made while the init stage is
//! spawned and unshares, the image's on a thread of its own together with the scan for what
//! others may not read where `--root` may run ([`prepare_image`], [`scan_unreadable`]), the
//! rest on the main thread ([`prepare_owned`]); once the maps are written, [`prepare`] only
//! pairs them.
//!
//! Every mount is `nosuid,nodev`. A filesystem that cannot be id-mapped (NFS, FUSE, …) fails
//! the start with its path: showing it without a mapping would make it unusable, and showing it
//! with host root's identity is what this module exists to prevent.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::idmap::MountMaps;
use crate::rootfs::packages;
use crate::spec::{Image, SandboxSpec};
use crate::sys::idmount;

#[derive(Debug, Error)]
pub enum IdMountError {
    #[error("cannot create the user namespace for the sandbox's mounts: {source}")]
    OwnerNamespace {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open {path} as a mount: {source}")]
    Clone {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot show {path} with an id mapping ({source}): its filesystem does not support \
         id-mapped mounts (NFS and FUSE do not). A root-invoked sandbox never sees host files \
         as host root: move it to a local filesystem (ext4, xfs, btrfs, tmpfs) or run airlock \
         as a regular user; `airlock doctor` checks the usual locations"
    )]
    Unsupported {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot scan {path} for files others may not read: {source}")]
    Scan {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the host sent id-mapped mounts the sandbox cannot match: {0}")]
    Mismatch(String),
}

/// Top-level host entries the `host` image exposes (I2). Everything else stays invisible.
pub const HOST_IMAGE_ENTRIES: &[&str] = &[
    "usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
];

/// What the host prepared: one label per descriptor, in order, and the image entries to mask.
/// Drop it once the sandbox is ready: that reaps the short-lived child that made the mounts'
/// user namespace.
pub struct Prepared {
    pub labels: Vec<String>,
    pub fds: Vec<OwnedFd>,
    pub unreadable: Vec<Unreadable>,
    _ns_child: idmount::NsChild,
    _root_ns_child: Option<idmount::NsChild>,
    _image_ns_child: Option<idmount::NsChild>,
}

/// The JSON payload of the `mapped` line when mounts are passed.
#[derive(serde::Serialize, serde::Deserialize)]
struct MappedPayload {
    labels: Vec<String>,
    unreadable: Vec<Unreadable>,
}

impl Prepared {
    /// The `mapped` handshake line carrying these mounts (the descriptors go alongside).
    pub fn line(&self) -> String {
        let payload = MappedPayload {
            labels: self.labels.clone(),
            unreadable: self.unreadable.clone(),
        };
        // Serialising strings and paths of this shape cannot fail.
        let json = serde_json::to_string(&payload).unwrap_or_default();
        format!("mapped {json}")
    }
}

/// Host side, first half: the mounts shown through the owner's namespace (`map:<i>`, `egress`,
/// `bundle`) and, with `root_view`, through the root view's (`root-map:<i>`), which do not
/// depend on the sandbox. Made while the init stage execs and unshares (B3: off the critical
/// path); [`prepare`] adds the image's.
pub fn prepare_owned(
    spec: &SandboxSpec,
    maps: &MountMaps,
    root_view: bool,
) -> Result<Prepared, IdMountError> {
    let (owner_ns, ns_child) =
        idmount::user_namespace(&maps.owner_uid_text(), &maps.owner_gid_text())
            .map_err(|source| IdMountError::OwnerNamespace { source })?;
    let root = if root_view {
        let (ns, child) = idmount::user_namespace(&maps.root_uid_text(), &maps.root_gid_text())
            .map_err(|source| IdMountError::OwnerNamespace { source })?;
        Some((ns, child))
    } else {
        None
    };
    let mut out = Prepared {
        labels: Vec::new(),
        fds: Vec::new(),
        unreadable: Vec::new(),
        _ns_child: ns_child,
        _root_ns_child: None,
        _image_ns_child: None,
    };
    for (i, m) in spec.mappings_in_mount_order().iter().enumerate() {
        out.add(format!("map:{i}"), &m.host, &owner_ns, !m.writable)?;
        if let Some((root_ns, _)) = &root {
            out.add(
                format!("{ROOT_VIEW_PREFIX}{i}"),
                &m.host,
                root_ns,
                !m.writable,
            )?;
        }
    }
    if let Some(egress) = &spec.egress {
        out.add("egress".to_owned(), &egress.host_dir, &owner_ns, true)?;
        if let Some(bundle) = &egress.trust_bundle {
            out.add(
                "bundle".to_owned(),
                &egress.host_dir.join(bundle),
                &owner_ns,
                true,
            )?;
        }
    }
    out._root_ns_child = root.map(|(_, child)| child);
    Ok(out)
}

/// The image's mounts (`lower:<name>`, `image`), id-mapped through a user namespace carrying
/// the sandbox's own maps, made by the host while the init stage starts ([`prepare_image`]).
pub struct ImageMounts {
    labels: Vec<String>,
    fds: Vec<OwnedFd>,
    _ns_child: idmount::NsChild,
}

/// Host side, made off the start's critical path (on the thread that also scans for
/// [`Unreadable`] entries, while the init stage is spawned): the image's mounts, id-mapped
/// through a user namespace made for the purpose with exactly the sandbox's maps (`uid_map`,
/// `gid_map`: the texts written to the init stage's `/proc/PID/uid_map` and `gid_map`). An
/// id-mapped mount translates ids by its namespace's maps alone, so a file host root owns is
/// owned by in-sandbox root, as through the sandbox's own namespace, which does not exist yet.
pub fn prepare_image(
    image: &Image,
    uid_map: &str,
    gid_map: &str,
) -> Result<ImageMounts, IdMountError> {
    let (ns, ns_child) = idmount::user_namespace(uid_map, gid_map)
        .map_err(|source| IdMountError::OwnerNamespace { source })?;
    let mut out = ImageMounts {
        labels: Vec::new(),
        fds: Vec::new(),
        _ns_child: ns_child,
    };
    match image {
        Image::Host => {
            for name in HOST_IMAGE_ENTRIES {
                let host = Path::new("/").join(name);
                let is_dir = std::fs::symlink_metadata(&host).is_ok_and(|m| m.is_dir());
                if is_dir {
                    out.add(format!("lower:{name}"), &host, &ns, true)?;
                }
            }
            // The package manager's state in `/var` (`rootfs/packages.rs`).
            for rel in packages::PACKAGE_STATE {
                if packages::is_host_dir(rel) {
                    let host = Path::new("/").join(rel);
                    out.add(packages::lower_label(rel), &host, &ns, true)?;
                }
            }
        }
        Image::Directory(dir) => out.add("image".to_owned(), dir, &ns, true)?,
        Image::Imported(image) => out.add("image".to_owned(), &image.rootfs, &ns, true)?,
    }
    Ok(out)
}

impl ImageMounts {
    fn add(
        &mut self,
        label: String,
        path: &Path,
        ns: &OwnedFd,
        read_only: bool,
    ) -> Result<(), IdMountError> {
        self.fds.push(clone_mapped(path, ns, read_only)?);
        self.labels.push(label);
        Ok(())
    }
}

/// Host side, once the init stage's maps are written: adds to `out` ([`prepare_owned`]) the
/// image's mounts ([`prepare_image`]) and what to mask. Nothing here makes a mount: the
/// critical path of the start only pairs what was made meanwhile.
pub fn prepare(mut out: Prepared, image: ImageMounts, unreadable: Vec<Unreadable>) -> Prepared {
    out.unreadable = unreadable;
    out.labels.extend(image.labels);
    out.fds.extend(image.fds);
    out._image_ns_child = Some(image._ns_child);
    out
}

impl Prepared {
    /// Clones `path` as a detached mount, id-mapped through `ns`, labelled `label`.
    fn add(
        &mut self,
        label: String,
        path: &Path,
        ns: &OwnedFd,
        read_only: bool,
    ) -> Result<(), IdMountError> {
        self.fds.push(clone_mapped(path, ns, read_only)?);
        self.labels.push(label);
        Ok(())
    }
}

/// `path` as a detached mount (without its submounts), id-mapped through `ns`, `nosuid,nodev`
/// and `ro` when `read_only`.
fn clone_mapped(path: &Path, ns: &OwnedFd, read_only: bool) -> Result<OwnedFd, IdMountError> {
    let tree = idmount::clone_tree(path).map_err(|source| IdMountError::Clone {
        path: path.to_path_buf(),
        source,
    })?;
    idmount::set_idmap(tree.as_fd(), ns.as_fd(), read_only).map_err(|source| {
        IdMountError::Unsupported {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok(tree)
}

/// Label prefix of the root view's mounts (`root-map:<i>`, as `map:<i>`).
pub const ROOT_VIEW_PREFIX: &str = "root-map:";

/// Init-stage side: the detached mounts the host passed, by label, and what to mask.
#[derive(Debug, Default)]
pub struct Received {
    mounts: HashMap<String, OwnedFd>,
    pub unreadable: Vec<Unreadable>,
    /// Whether the host passed any (fixed at arrival; taking mounts does not change it).
    active: bool,
}

impl Received {
    /// Reads the rest of the `mapped` line (empty: no mounts) and pairs its labels with the
    /// descriptors that came with it.
    pub fn new(rest: &str, fds: Vec<OwnedFd>) -> Result<Received, IdMountError> {
        if rest.is_empty() && fds.is_empty() {
            return Ok(Received::default());
        }
        let payload: MappedPayload =
            serde_json::from_str(rest).map_err(|e| IdMountError::Mismatch(e.to_string()))?;
        if payload.labels.len() != fds.len() {
            return Err(IdMountError::Mismatch(format!(
                "{} labels, {} descriptors",
                payload.labels.len(),
                fds.len()
            )));
        }
        let mounts = payload
            .labels
            .into_iter()
            .zip(fds)
            .collect::<HashMap<_, _>>();
        Ok(Received {
            active: !mounts.is_empty(),
            mounts,
            unreadable: payload.unreadable,
        })
    }

    /// Whether the host passed id-mapped mounts (a root invoker's sandbox).
    pub fn active(&self) -> bool {
        self.active
    }

    /// Whether the host passed the root view's mounts (`root-map:<i>`).
    pub fn has_root_view(&self) -> bool {
        self.mounts.keys().any(|l| l.starts_with(ROOT_VIEW_PREFIX))
    }

    /// Takes the mount passed as `label`.
    pub fn take(&mut self, label: &str) -> Option<OwnedFd> {
        self.mounts.remove(label)
    }
}

mod wide_scan;
pub use wide_scan::{CACHE_FILE as SCAN_CACHE_FILE, VALIDITY as SCAN_CACHE_VALIDITY, WIDE};

/// Directories of the image the host walks for entries others may not read at every start;
/// the wider [`WIDE`] ones are walked through a cache (`idmounts/wide_scan.rs`).
pub const WALKED: &[&str] = &["/etc", "/opt"];

/// A host path others may not read (a file) or not list and enter (a directory).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unreadable {
    pub path: PathBuf,
    pub dir: bool,
}

/// Whether others may not use an entry of this mode: read a file, or list and enter a directory.
pub fn hidden_from_others(mode: u32, is_dir: bool) -> bool {
    let unreadable = mode & 0o004 == 0;
    unreadable || (is_dir && mode & 0o001 == 0)
}

/// Host side: every entry of the image others may not read, outermost only (nothing below a
/// hidden directory is listed): under [`WALKED`] by a walk now, under [`WIDE`] from the walk
/// cached in `cache` while it is valid (`idmounts/wide_scan.rs`; `None`: walk them too).
/// Symbolic links are not followed: a link shows nothing itself. Unreadable directories below
/// the tops are reported, never skipped silently.
///
/// On the start path (run on a thread of its own, overlapping the spawn of the init stage), so
/// it works relative to directory descriptors: one `getdents` per directory and one `statx`
/// per entry, no path resolution from `/`.
pub fn scan_unreadable(cache: Option<&Path>) -> Result<Vec<Unreadable>, IdMountError> {
    let mut found = Vec::new();
    for top in WALKED {
        walk_top(Path::new(top), &mut found)?;
    }
    found.extend(wide_scan::wide_unreadable(
        cache,
        std::time::SystemTime::now(),
    )?);
    Ok(found)
}

/// Walks the directory `top` (nothing when it is absent or a symbolic link).
fn walk_top(top: &Path, found: &mut Vec<Unreadable>) -> Result<(), IdMountError> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(top, flags, Mode::empty()) {
        Ok(dir) => walk(dir, top, found),
        // Absent, or a symbolic link (the image recreates it as one, pointing elsewhere).
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
            Ok(())
        }
        Err(e) => Err(scan_err(top)(e.into())),
    }
}

fn scan_err(path: &Path) -> impl FnOnce(std::io::Error) -> IdMountError {
    let path = path.to_path_buf();
    move |source| IdMountError::Scan { path, source }
}

/// Walks the open directory `dir` (whose path is `path`). The directory stream takes `dir`
/// itself (`Dir::new`; `Dir::read_from` would reopen it: two more syscalls per directory).
fn walk(dir: OwnedFd, path: &Path, found: &mut Vec<Unreadable>) -> Result<(), IdMountError> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let err = |e: rustix::io::Errno| scan_err(path)(e.into());
    let mut entries = rustix::fs::Dir::new(dir).map_err(err)?;
    while let Some(entry) = entries.read() {
        let entry = entry.map_err(err)?;
        // For `*at` calls only, which do not use the stream's position.
        let dir = entries.fd().map_err(err)?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if entry.file_type() == FileType::Symlink {
            continue;
        }
        // An entry removed since it was listed (a package upgrade, another process) is nothing
        // to mask: skip it rather than fail every sandbox start that walks meanwhile.
        let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => continue,
            other => other.map_err(err)?,
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft == FileType::Symlink {
            continue;
        }
        let child = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let is_dir = ft == FileType::Directory;
        if hidden_from_others(st.st_mode, is_dir) {
            found.push(Unreadable {
                path: child,
                dir: is_dir,
            });
        } else if is_dir {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let sub = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Err(rustix::io::Errno::NOENT) => continue,
                other => other.map_err(|e| scan_err(&child)(e.into()))?,
            };
            walk(sub, &child, found)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 9.5b: the image's mounts are made before the sandbox's own namespace has its maps,
    /// through a namespace given the same map texts: on them host root's files are in-sandbox
    /// root's (the first id of the sandbox's range, seen from the host), another id of the map
    /// is shifted the same way, and an id outside the map is nobody's, as through the
    /// sandbox's namespace; the mount is read-only.
    #[test]
    fn image_mounts_map_ids_exactly_as_the_sandbox_maps_do() {
        use std::os::unix::fs::MetadataExt;
        if !airlock_testkit::needs_root("id-mapped mounts and chown need root") {
            return;
        }
        let base = 1_500_000_000u32;
        let map = format!("0 {base} 65536\n");
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        for (name, owner) in [("root", 0), ("user", 1000), ("outside", 70_000)] {
            let path = image.join(name);
            std::fs::create_dir_all(&path).unwrap();
            std::os::unix::fs::chown(&path, Some(owner), Some(owner)).unwrap();
        }
        std::os::unix::fs::chown(&image, Some(0), Some(0)).unwrap();
        let mounts = prepare_image(&Image::Directory(image.clone()), &map, &map).unwrap();
        assert_eq!(mounts.labels, ["image"]);
        let tree = &mounts.fds[0];
        let seen = |name: &str| {
            let st = rustix::fs::statat(tree, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
            (st.st_uid, st.st_gid)
        };
        assert_eq!(seen("."), (base, base));
        assert_eq!(seen("root"), (base, base));
        assert_eq!(seen("user"), (base + 1000, base + 1000));
        assert_eq!(
            seen("outside"),
            (65534, 65534),
            "an unmapped id shows as the overflow id"
        );
        // On the host, nothing changed.
        let meta = std::fs::metadata(image.join("user")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
        let write = rustix::fs::mkdirat(tree, "new", rustix::fs::Mode::from_raw_mode(0o755));
        assert_eq!(write, Err(rustix::io::Errno::ROFS));
    }

    /// A host where files come and go during the walk (a package upgrade; seen in CI as a
    /// failed start: "cannot scan /usr/lib …: No such file or directory") still starts: an
    /// entry removed between listing and `stat`/`open` is skipped.
    #[test]
    fn entries_removed_during_the_walk_do_not_fail_the_scan() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().to_path_buf();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let (top, stop) = (top.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for i in 0..64 {
                        let _ = std::fs::write(top.join(format!("f{i}")), b"x");
                        let _ = std::fs::create_dir(top.join(format!("d{i}")));
                    }
                    for i in 0..64 {
                        let _ = std::fs::remove_file(top.join(format!("f{i}")));
                        let _ = std::fs::remove_dir(top.join(format!("d{i}")));
                    }
                }
            })
        };
        let mut failures = Vec::new();
        for _ in 0..2000 {
            let mut found = Vec::new();
            if let Err(e) = walk_top(&top, &mut found) {
                failures.push(e.to_string());
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().unwrap();
        assert!(
            failures.is_empty(),
            "{} walks failed, e.g. {}",
            failures.len(),
            failures[0]
        );
    }

    #[test]
    fn entries_others_cannot_read_or_enter_are_hidden() {
        assert!(hidden_from_others(0o600, false));
        assert!(hidden_from_others(0o640, false));
        assert!(hidden_from_others(0o700, true));
        assert!(
            hidden_from_others(0o754, true),
            "listable but not enterable"
        );
        assert!(
            hidden_from_others(0o711, true),
            "enterable but not listable"
        );
        assert!(!hidden_from_others(0o644, false));
        assert!(!hidden_from_others(0o755, true));
        assert!(!hidden_from_others(0o4755, false));
    }
}
