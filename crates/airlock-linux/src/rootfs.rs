//! Assembles the sandbox's root filesystem from an allowlist (PRODUCT I2, I3) and pivots into it.
//!
//! Runs in PID 1 of the new namespaces, before `pivot_root`, with full capabilities of the
//! sandbox's user namespace. Order of operations (each step depends on the previous ones):
//! 1. Make every inherited mount private, so nothing mounted here propagates to the host.
//! 2. Mount a scratch tmpfs on the host-provided empty directory (the working directory, entered
//!    before unsharing: a root invoker's sandbox may not search the host path), sized from the
//!    memory limit (`budget.rs`); it holds the overlay upper and work directories, the generated
//!    files and the new root (a directory bound onto itself), so all of them share one budget.
//!    It lives only in this mount namespace: when the sandbox's last process exits, it vanishes.
//! 3. The image: for `host`, each allowlisted top-level entry is recreated as the symlink the
//!    host has, or as an overlay with the host directory as lower layer; nothing else of the host
//!    root is reachable. Overlays use `userxattr` (we are always in a user namespace). For a root
//!    invoker the lower layers, workspaces and mounts are the id-mapped mounts the host passed
//!    (`idmounts.rs`), and entries of the image others may not read are masked
//!    (`rootfs/unreadable.rs`).
//! 4. Empty top-level directories, then (`host` image) the package manager's state in `/var`
//!    as overlays of the host's (`rootfs/packages.rs`), then `$HOME` (the sandbox's own, at the
//!    host path), then
//!    workspaces and mounts in depth order (parents first), each bind remounted `nosuid,nodev`
//!    and `ro` when read-only; then the egress directory read-only at `/run/airlock` (the proxy
//!    sockets and CA bundle, N1/N6) and the generated trust bundle over the system one.
//! 5. Masks inside `/etc`, after the mappings so that a mapping under `/etc` cannot uncover a
//!    masked file, and before any sandbox process exists: shadow files and SSH host keys are
//!    covered by an empty read-only file, secret directories by an empty read-only tmpfs,
//!    `machine-id` by a fresh one, `passwd`/`group`/`hosts`/`hostname` by generated files.
//! 6. `/dev` (device nodes bind-mounted from the host, a private devpts, shm), then `/proc`
//!    (masked and partly read-only, after `/dev` because masks bind `/dev/null`), `/sys` ro,
//!    after entering the sandbox's network namespace (the caller's `enter_net`: sysfs shows the
//!    network namespace of the process that mounts it, and may only be mounted by one that
//!    owns that namespace).
//! 7. `pivot_root` into the new root and detach the old one; from here on no host path exists.
//!
//! Any failure aborts the start: a sandbox with a missing mask is never run (partial
//! enforcement is failure).

use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use thiserror::Error;

use crate::bootstrap::Bootstrap;
use crate::idmounts::{Received, HOST_IMAGE_ENTRIES};
use crate::spec::{Egress, Image, Mapping, EGRESS_DIR, SYSTEM_CA_BUNDLE};
use crate::sys::idmount;

pub mod accounts;
mod budget;
mod costs;
mod devproc;
mod etc;
mod image_links;
pub(crate) mod packages;
mod protect;
mod root_view;
mod unreadable;

pub use budget::TmpfsSizes;
pub use costs::Costs;
use costs::{timed, Cost};

pub use etc::sandbox_user_name;

#[derive(Debug, Error)]
pub enum RootfsError {
    #[error("cannot mount {fstype} on {target}: {source}")]
    Mount {
        fstype: &'static str,
        target: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot bind-mount {src} on {target}: {source}")]
    Bind {
        src: PathBuf,
        target: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot remount {target} ({what}): {source}")]
    Remount {
        target: PathBuf,
        what: &'static str,
        #[source]
        source: nix::Error,
    },
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot inspect {path}: {source}")]
    Inspect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the path {path} cannot be used as an overlay layer (it contains ',', ':' or '\\')")]
    UnsafeLayerPath { path: PathBuf },
    #[error("pivot_root into {new_root} failed: {source}")]
    PivotRoot {
        new_root: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("the mapping target {path} must be an absolute path without '..'")]
    BadTarget { path: PathBuf },
    #[error("the host passed no id-mapped mount for {label}")]
    MissingMount { label: String },
    #[error("cannot protect {path}: {source}")]
    Protect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the protected path {path} is a symbolic link: airlock does not follow links in a \
         workspace; replace the link by what it points to, or lift the protection for this \
         project ([[unprotect]] in the user config)"
    )]
    ProtectedLink { path: PathBuf },
    #[error(
        "the image has a symbolic link at {path}, where airlock creates or mounts part of the \
         sandbox; an image must have real directories (or nothing) there"
    )]
    ImageLink { path: PathBuf },
    #[error("cannot build the root view of the workspaces ({what}): {source}")]
    RootView {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Top-level directories that start empty (I2).
const EMPTY_DIRS: &[(&str, u32)] = &[
    ("home", 0o755),
    ("root", 0o700),
    ("var", 0o755),
    ("var/tmp", 0o1777),
    ("srv", 0o755),
    ("mnt", 0o755),
    ("media", 0o755),
    ("run", 0o755),
    ("tmp", 0o1777),
    ("proc", 0o555),
    ("sys", 0o555),
    ("dev", 0o755),
];

/// Builds the root filesystem described by `boot` and pivots into it (steps 1–7 above).
/// The working directory is the host's empty scratch directory (entered before the sandbox's
/// identity applied); `mounts` are the id-mapped mounts the host passed (a root invoker's
/// sandbox). Returns the root view's mount namespace when the host passed one's mounts
/// (`rootfs/root_view.rs`): `--root` processes join it. `enter_net` moves the caller into the
/// sandbox's network namespace; it runs just before `/sys` is mounted (step 6), so the caller
/// can have that namespace made meanwhile.
pub fn build<E: From<RootfsError>>(
    boot: &Bootstrap,
    mounts: &mut Received,
    enter_net: impl FnOnce() -> Result<(), E>,
) -> Result<Option<OwnedFd>, E> {
    // 1. No propagation back to the host (or from it: later host mounts stay invisible).
    mount_raw(
        None,
        "/",
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
        "rprivate",
    )?;

    // 2. Scratch space and the new root, sized to the memory limit.
    let sizes = timed(Cost::Sizes, || {
        TmpfsSizes::for_memory(boot.spec.limits.memory_mb.map(|m| m.value))
    });
    let scratch = enter_scratch(boot, &sizes)?;
    let root = root_on_scratch(&scratch)?;
    let layers = Layers {
        upper: scratch.join("upper"),
        work: scratch.join("work"),
    };
    mkdir(&layers.upper, 0o755)?;
    mkdir(&layers.work, 0o755)?;
    if mounts.active() {
        // Where `lower_layer` attaches the passed lower layers (one directory for all of them).
        mkdir(&scratch.join(LOWERS), 0o700)?;
    }

    // 3. The image.
    match &boot.spec.image {
        Image::Host => host_image(&root, &layers, mounts)?,
        Image::Directory(dir) => {
            let lower = lower_layer(dir, "image", &scratch, mounts)?;
            overlay(&lower, &root, &layers, "root")?
        }
        Image::Imported(image) => {
            let lower = lower_layer(&image.rootfs, "image", &scratch, mounts)?;
            overlay(&lower, &root, &layers, "root")?
        }
    }
    // Until `pivot_root`, an absolute link in the image would resolve on the host: refuse an
    // image with a link anywhere airlock is about to create or mount something.
    if !matches!(boot.spec.image, Image::Host) {
        image_links::refuse_links(&root, boot)?;
    }

    // 3b. What others may not read in the image (host image directories), where in-sandbox root could
    //     (a root invoker's sandbox where `--root` may run: its root owns the id-mapped system
    //     files). The host sends an empty list otherwise (`rootfs/unreadable.rs`).
    if mounts.active() {
        timed(Cost::Masks, || {
            unreadable::mask(&root, &scratch, &mounts.unreadable)
        })?;
    }

    // 4. Empty directories, home, mappings.
    for (dir, mode) in EMPTY_DIRS {
        mkdir_unless_present(&root.join(dir), *mode)?;
    }
    if matches!(boot.spec.image, Image::Host) {
        packages::host_package_state(&root, &layers, mounts)?;
    }
    make_home(&root, boot)?;
    for (i, mapping) in boot.spec.mappings_in_mount_order().iter().enumerate() {
        let idmapped = passed_mount(mounts, &format!("map:{i}"))?;
        bind_mapping(&root, mapping, idmapped)?;
    }
    protect_workspaces(&root, boot, (boot.sandbox_uid, boot.sandbox_gid))?;
    if let Some(egress) = &boot.spec.egress {
        bind_egress(&root, egress, mounts)?;
    }

    // 5. /etc masks and generated files (on top of anything mapped under /etc).
    etc::apply(&root, &scratch, boot)?;

    // 6. /dev, /proc, /sys.
    devproc::mount_dev(&root, &sizes)?;
    devproc::mount_proc(&root, &scratch)?;
    enter_net()?;
    devproc::mount_sys(&root)?;

    // 6b. The root view: a copy of this namespace in which the workspaces show the invoker as
    //     in-sandbox root, for `--root` processes (a root invoker's `up` or `run --root`).
    let root_view = if root_view::possible(boot, mounts) {
        Some(root_view::build(&root, boot, mounts)?)
    } else {
        None
    };

    // 7. Enter the new root.
    pivot_into(&root)?;
    Ok(root_view)
}

/// The new root: a directory on the scratch tmpfs, bound onto itself so that it is a mount point
/// for `pivot_root`. The root, `/tmp`, `$HOME` and the overlay upper layers thereby share the
/// scratch tmpfs's one budget (see `budget.rs`).
fn root_on_scratch(scratch: &Path) -> Result<PathBuf, RootfsError> {
    let root = scratch.join("root");
    mkdir(&root, 0o755)?;
    bind(&root, &root)?;
    remount_bind(&root, MsFlags::MS_NOSUID | MsFlags::MS_NODEV)?;
    Ok(root)
}

/// Protected paths (issue 9.9) in every writable workspace; see `rootfs/protect.rs`. A path
/// created for a rule belongs to `owner` (inside ids).
fn protect_workspaces(root: &Path, boot: &Bootstrap, owner: (u32, u32)) -> Result<(), RootfsError> {
    if boot.spec.protect.is_empty() {
        return Ok(());
    }
    for workspace in boot.spec.workspaces.iter().filter(|w| w.writable) {
        let at = inside(root, &workspace.sandbox)?;
        protect::apply(&at, &boot.spec.protect, owner)?;
    }
    Ok(())
}

/// The directory of the scratch space where passed lower layers are attached.
const LOWERS: &str = "lower";

/// Where overlay upper and work directories are created.
struct Layers {
    upper: PathBuf,
    work: PathBuf,
}

fn host_image(root: &Path, layers: &Layers, mounts: &mut Received) -> Result<(), RootfsError> {
    let scratch = layers.upper.parent().unwrap_or(Path::new("."));
    for name in HOST_IMAGE_ENTRIES {
        let host = Path::new("/").join(name);
        let meta = match fs::symlink_metadata(&host) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(RootfsError::Inspect { path: host, source }),
        };
        let target = root.join(name);
        if meta.file_type().is_symlink() {
            let link = fs::read_link(&host).map_err(|source| RootfsError::Inspect {
                path: host.clone(),
                source,
            })?;
            symlink(&link, &target).map_err(|source| RootfsError::Create {
                path: target,
                source,
            })?;
        } else if meta.is_dir() {
            mkdir(&target, 0o755)?;
            let lower = lower_layer(&host, &format!("lower:{name}"), scratch, mounts)?;
            overlay(&lower, &target, layers, name)?;
        }
    }
    Ok(())
}

/// Mounts an overlay of `lower` (read-only layer) with a fresh upper layer named `name`.
fn overlay(lower: &Path, target: &Path, layers: &Layers, name: &str) -> Result<(), RootfsError> {
    let upper = layers.upper.join(name);
    let work = layers.work.join(name);
    mkdir(&upper, 0o755)?;
    mkdir(&work, 0o755)?;
    for p in [lower, &upper, &work] {
        if p.to_string_lossy().contains([',', ':', '\\']) {
            return Err(RootfsError::UnsafeLayerPath {
                path: p.to_path_buf(),
            });
        }
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        upper.display(),
        work.display()
    );
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_raw(
        Some("overlay"),
        target,
        Some("overlay"),
        flags,
        Some(&opts),
        "overlay",
    )
}

fn make_home(root: &Path, boot: &Bootstrap) -> Result<(), RootfsError> {
    let home = inside(root, &boot.spec.user.home)?;
    fs::create_dir_all(&home).map_err(|source| RootfsError::Create {
        path: home.clone(),
        source,
    })?;
    set_mode(&home, 0o700)?;
    nix::unistd::chown(
        &home,
        Some(nix::unistd::Uid::from_raw(boot.sandbox_uid)),
        Some(nix::unistd::Gid::from_raw(boot.sandbox_gid)),
    )
    .map_err(|e| RootfsError::Create {
        path: home,
        source: e.into(),
    })
}

/// Binds one workspace or mount at its sandbox path: `nosuid,nodev`, plus `ro` when read-only.
/// A mapping names a directory, or a single non-directory file (e.g. the Unix socket of a
/// host-side service), whose mount point is then an empty file.
fn bind_mapping(root: &Path, m: &Mapping, idmapped: Option<OwnedFd>) -> Result<(), RootfsError> {
    let target = inside(root, &m.sandbox)?;
    let inspect = |source| RootfsError::Inspect {
        path: m.host.clone(),
        source,
    };
    // A passed mount is inspected through its descriptor: the host path may not be searchable.
    let is_dir = match &idmapped {
        Some(tree) => rustix::fs::FileType::from_raw_mode(
            rustix::fs::fstat(tree)
                .map_err(|e| inspect(e.into()))?
                .st_mode,
        )
        .is_dir(),
        None => fs::metadata(&m.host).map_err(inspect)?.is_dir(),
    };
    let dir = if is_dir {
        target.as_path()
    } else {
        target.parent().unwrap_or(root)
    };
    fs::create_dir_all(dir).map_err(|source| RootfsError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    if !is_dir && !target.exists() {
        write_file(&target, b"", 0o600)?;
    }
    if let Some(tree) = idmapped {
        // Cloned by the host without submounts, flags already set (idmounts.rs).
        return attach_tree(&tree, &m.host, &target);
    }
    // Not recursive: host mounts below a mapping stay invisible (only what was named is mapped).
    bind(&m.host, &target)?;
    let mut extra = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if !m.writable {
        extra |= MsFlags::MS_RDONLY;
    }
    remount_bind(&target, extra)
}

/// The egress directory, read-only at [`EGRESS_DIR`], and the generated trust bundle over the
/// image's system bundle. The bundle replaces only a regular file: a symlink there would be
/// followed by the bind mount, and resolved against the host's root at this stage.
fn bind_egress(root: &Path, egress: &Egress, mounts: &mut Received) -> Result<(), RootfsError> {
    bind_mapping(
        root,
        &Mapping {
            host: egress.host_dir.clone(),
            sandbox: PathBuf::from(EGRESS_DIR),
            writable: false,
        },
        passed_mount(mounts, "egress")?,
    )?;
    let bundle_tree = match egress.trust_bundle {
        Some(_) => passed_mount(mounts, "bundle")?,
        None => None,
    };
    let Some(bundle) = &egress.trust_bundle else {
        return Ok(());
    };
    let target = inside(root, Path::new(SYSTEM_CA_BUNDLE))?;
    match fs::symlink_metadata(&target) {
        Ok(meta) if meta.file_type().is_file() => bind_mapping(
            root,
            &Mapping {
                host: egress.host_dir.join(bundle),
                sandbox: PathBuf::from(SYSTEM_CA_BUNDLE),
                writable: false,
            },
            bundle_tree,
        ),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RootfsError::Inspect {
            path: target,
            source,
        }),
    }
}

/// Mounts the scratch tmpfs (sized by `sizes`) on the working directory (the host's scratch
/// directory) and enters it; returns the path the rest of the build uses for it (`.`). No host
/// path is walked: a root invoker's sandbox may not search the directories above it any more.
fn enter_scratch(boot: &Bootstrap, sizes: &TmpfsSizes) -> Result<PathBuf, RootfsError> {
    let err = |source: std::io::Error| RootfsError::Mount {
        fstype: "tmpfs",
        target: boot.scratch_dir.clone(),
        source: nix::Error::from_raw(source.raw_os_error().unwrap_or(libc::EIO)),
    };
    let fs = idmount::tmpfs_context(&[("mode", "0700")]).map_err(err)?;
    timed(Cost::Sizes, || match sizes.scratch_size() {
        Some(size) => idmount::set_option(fs.as_fd(), "size", &size),
        None => Ok(()),
    })
    .map_err(err)?;
    let mnt = idmount::mount_on_cwd(fs).map_err(err)?;
    rustix::process::fchdir(&mnt).map_err(|e| err(e.into()))?;
    Ok(PathBuf::from("."))
}

/// The id-mapped mount passed as `label`; `None` when the host passed none at all (an
/// unprivileged invoker's sandbox binds host paths itself). Once the host passed mounts, a
/// missing one is an error: falling back to the host path would show it as `nobody`'s.
fn passed_mount(mounts: &mut Received, label: &str) -> Result<Option<OwnedFd>, RootfsError> {
    if !mounts.active() {
        return Ok(None);
    }
    mounts
        .take(label)
        .map(Some)
        .ok_or_else(|| RootfsError::MissingMount {
            label: label.to_owned(),
        })
}

/// The overlay lower layer for the host directory `host`: the id-mapped mount passed as `label`,
/// attached under the scratch space, or `host` itself when no mounts were passed.
fn lower_layer(
    host: &Path,
    label: &str,
    scratch: &Path,
    mounts: &mut Received,
) -> Result<PathBuf, RootfsError> {
    let Some(tree) = passed_mount(mounts, label)? else {
        return Ok(host.to_path_buf());
    };
    // The attached copy's path is ours, but the same image must not work for one invoker and
    // fail for another: refuse what the host path itself could not be.
    if host.to_string_lossy().contains([',', ':', '\\']) {
        return Err(RootfsError::UnsafeLayerPath {
            path: host.to_path_buf(),
        });
    }
    // Made by `build` as soon as the scratch space exists, when mounts were passed.
    let lowers = scratch.join(LOWERS);
    let target = lowers.join(label.trim_start_matches("lower:"));
    mkdir(&target, 0o755)?;
    attach_tree(&tree, host, &target)?;
    Ok(target)
}

fn attach_tree(tree: &OwnedFd, src: &Path, target: &Path) -> Result<(), RootfsError> {
    timed(Cost::Attach, || idmount::attach(tree.as_fd(), target)).map_err(|source| {
        RootfsError::Bind {
            src: src.to_path_buf(),
            target: target.to_path_buf(),
            source: nix::Error::from_raw(source.raw_os_error().unwrap_or(libc::EIO)),
        }
    })
}

/// `root` joined with an absolute sandbox path, refusing `..` components.
fn inside(root: &Path, path: &Path) -> Result<PathBuf, RootfsError> {
    use std::path::Component;
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(RootfsError::BadTarget {
            path: path.to_path_buf(),
        });
    }
    Ok(root.join(path.strip_prefix("/").unwrap_or(path)))
}

/// `pivot_root(".", ".")` then detach the old root, as runc does: no directory for the old root
/// is needed and nothing of the host root stays reachable.
fn pivot_into(root: &Path) -> Result<(), RootfsError> {
    let err = |source| RootfsError::PivotRoot {
        new_root: root.to_path_buf(),
        source,
    };
    nix::unistd::chdir(root).map_err(err)?;
    nix::unistd::pivot_root(".", ".").map_err(err)?;
    umount2(".", MntFlags::MNT_DETACH).map_err(err)?;
    nix::unistd::chdir("/").map_err(err)
}

// ---- small helpers shared by the submodules ----

fn mount_raw<P: AsRef<Path>>(
    source: Option<&str>,
    target: P,
    fstype: Option<&'static str>,
    flags: MsFlags,
    data: Option<&str>,
    what: &'static str,
) -> Result<(), RootfsError> {
    let target = target.as_ref();
    mount(source, target, fstype, flags, data).map_err(|source| RootfsError::Mount {
        fstype: fstype.unwrap_or(what),
        target: target.to_path_buf(),
        source,
    })
}

fn bind(src: &Path, target: &Path) -> Result<(), RootfsError> {
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|source| RootfsError::Bind {
        src: src.to_path_buf(),
        target: target.to_path_buf(),
        source,
    })
}

/// Adds `extra` (`ro`, `nosuid`, `nodev`, `noexec`) to the bind mount at `target`, keeping the
/// flags it already has (in a user namespace the kernel refuses to clear flags locked by a more
/// privileged namespace): one `mount_setattr`, or on a kernel without it (before 5.12) the
/// current flags read and a remount with them plus `extra`.
fn remount_bind(target: &Path, extra: MsFlags) -> Result<(), RootfsError> {
    use rustix::mount::MountAttrFlags;
    let mut attrs = MountAttrFlags::empty();
    for (ms, attr) in [
        (MsFlags::MS_RDONLY, MountAttrFlags::MOUNT_ATTR_RDONLY),
        (MsFlags::MS_NOSUID, MountAttrFlags::MOUNT_ATTR_NOSUID),
        (MsFlags::MS_NODEV, MountAttrFlags::MOUNT_ATTR_NODEV),
        (MsFlags::MS_NOEXEC, MountAttrFlags::MOUNT_ATTR_NOEXEC),
    ] {
        if extra.contains(ms) {
            attrs |= attr;
        }
    }
    let known = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if extra.difference(known).is_empty() {
        match idmount::add_mount_attrs(target, attrs) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
            done => {
                return done.map_err(|e| RootfsError::Remount {
                    target: target.to_path_buf(),
                    what: "bind flags",
                    source: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                })
            }
        }
    }
    remount_bind_legacy(target, extra)
}

/// [`remount_bind`] with `statvfs` and `mount(MS_REMOUNT)`.
fn remount_bind_legacy(target: &Path, extra: MsFlags) -> Result<(), RootfsError> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let current = statvfs(target).map_err(|source| RootfsError::Remount {
        target: target.to_path_buf(),
        what: "statvfs",
        source,
    })?;
    let f = current.flags();
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | extra;
    for (st, ms) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(st) {
            flags |= ms;
        }
    }
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(|source| {
        RootfsError::Remount {
            target: target.to_path_buf(),
            what: "bind flags",
            source,
        }
    })
}

/// Creates `path` with exactly `mode`: `mkdir(2)` applies it (less the umask), and a `chmod`
/// follows only when the umask took bits away (or `mode` has bits `mkdir` ignores). Under the
/// usual umask 022 the directories of a root filesystem (0755, 0700) need no `chmod`: some sixty
/// fewer syscalls per sandbox start.
fn mkdir(path: &Path, mode: u32) -> Result<(), RootfsError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(|source| RootfsError::Create {
            path: path.to_path_buf(),
            source,
        })?;
    if mkdir_needs_chmod(mode, process_umask()) {
        set_mode(path, mode)?;
    }
    Ok(())
}

/// [`mkdir`], unless something is already at `path` (anything `Path::exists` accepts: a link
/// to an existing directory counts, a dangling one does not). One `mkdir` call in the usual
/// case (a fresh tmpfs, an image without the directory) instead of a `stat` before it: the
/// existence check runs only when `mkdir` found something there.
fn mkdir_unless_present(path: &Path, mode: u32) -> Result<(), RootfsError> {
    match mkdir(path, mode) {
        Err(RootfsError::Create { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists && path.exists() =>
        {
            Ok(())
        }
        other => other,
    }
}

/// Whether a directory made by `mkdir(path, mode)` under `umask` lacks bits of `mode`.
fn mkdir_needs_chmod(mode: u32, umask: u32) -> bool {
    mode & umask & 0o777 != 0 || mode & !0o1777 != 0
}

/// This process's umask, read once (it is only read, never changed, while the root is built).
fn process_umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        // Reading the umask means setting it: put the old value straight back.
        let old = rustix::process::umask(rustix::fs::Mode::empty());
        rustix::process::umask(old);
        old.bits()
    })
}

fn set_mode(path: &Path, mode: u32) -> Result<(), RootfsError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|source| {
        RootfsError::Create {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Writes `content` to the file `path` with exactly `mode`. The usual case, a new file, takes
/// one `open` with that mode (less the umask) and the write, plus an `fchmod` only when the umask
/// took bits away (the 0666 device-node mount points under umask 022); a file already there is
/// truncated, rewritten and given `mode` as before.
fn write_file(path: &Path, content: &[u8], mode: u32) -> Result<(), RootfsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| RootfsError::Create {
        path: path.to_path_buf(),
        source,
    };
    let created = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path);
    let mut file = match created {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::write(path, content).map_err(err)?;
            return set_mode(path, mode);
        }
        Err(e) => return Err(err(e)),
    };
    file.write_all(content).map_err(err)?;
    if create_needs_chmod(mode, process_umask()) {
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(err)?;
    }
    Ok(())
}

/// Whether a file made by `open(path, O_CREAT, mode)` under `umask` lacks bits of `mode`.
fn create_needs_chmod(mode: u32, umask: u32) -> bool {
    mode & umask & 0o777 != 0 || mode & !0o777 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_targets_stay_under_the_new_root() {
        let root = Path::new("/scratch/root");
        assert_eq!(
            inside(root, Path::new("/home/u/proj")).unwrap(),
            PathBuf::from("/scratch/root/home/u/proj")
        );
        for bad in ["relative/path", "/home/../../etc", "/a/.."] {
            assert!(inside(root, Path::new(bad)).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn parents_are_mounted_before_nested_mappings() {
        use crate::spec::*;
        let m = |p: &str| Mapping {
            host: p.into(),
            sandbox: p.into(),
            writable: true,
        };
        let user = HostUser {
            uid: 1,
            gid: 1,
            name: "u".into(),
            home: "/home/u".into(),
        };
        let spec = SandboxSpec {
            workspaces: vec![m("/home/u/proj/sub")],
            mounts: vec![m("/home/u/proj"), m("/opt/x")],
            ..SandboxSpec::bare("t", user)
        };
        let order: Vec<_> = spec
            .mappings_in_mount_order()
            .iter()
            .map(|m| m.sandbox.clone())
            .collect();
        let pos = |p: &str| order.iter().position(|o| o == Path::new(p)).unwrap();
        assert!(pos("/home/u/proj") < pos("/home/u/proj/sub"));
    }

    #[test]
    fn a_skeleton_directory_is_made_only_where_nothing_is() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let at = |n: &str| tmp.path().join(n);
        mkdir_unless_present(&at("new"), 0o700).unwrap();
        let mode = fs::metadata(at("new")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        // Whatever is there stays as it is, as with the `exists()` check this replaces.
        fs::create_dir(at("dir")).unwrap();
        fs::set_permissions(at("dir"), fs::Permissions::from_mode(0o750)).unwrap();
        mkdir_unless_present(&at("dir"), 0o1777).unwrap();
        let mode = fs::metadata(at("dir")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750, "an existing directory's mode was changed");
        fs::write(at("file"), b"x").unwrap();
        mkdir_unless_present(&at("file"), 0o755).unwrap();
        assert!(fs::metadata(at("file")).unwrap().is_file());
        symlink(at("dir"), at("link")).unwrap();
        mkdir_unless_present(&at("link"), 0o755).unwrap();
        // A dangling link is still an error (mkdir cannot make it, exists() says no).
        symlink(at("absent"), at("dangling")).unwrap();
        assert!(mkdir_unless_present(&at("dangling"), 0o755).is_err());
        assert!(!at("absent").exists(), "the link was followed");
    }

    #[test]
    fn generated_files_get_exactly_their_mode_and_content() {
        use std::os::unix::fs::PermissionsExt;
        assert!(!create_needs_chmod(0o644, 0o022));
        assert!(!create_needs_chmod(0o600, 0o077));
        assert!(create_needs_chmod(0o666, 0o022), "a device mount point");
        assert!(create_needs_chmod(0o644, 0o077), "a strict umask");
        let tmp = tempfile::tempdir().unwrap();
        for (name, mode) in [("a", 0o644), ("b", 0o666), ("c", 0o600), ("d", 0o444)] {
            let path = tmp.path().join(name);
            write_file(&path, name.as_bytes(), mode).unwrap();
            let got = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(got, mode, "{name}: {got:o} instead of {mode:o}");
            assert_eq!(fs::read(&path).unwrap(), name.as_bytes());
        }
        // A file already there is rewritten and given the mode.
        let path = tmp.path().join("old");
        fs::write(&path, b"a longer old content").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        write_file(&path, b"new", 0o644).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        let got = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, 0o644);
    }

    #[test]
    fn root_directories_get_exactly_their_mode_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        // The decision: a chmod only where mkdir's mode lost bits to the umask.
        assert!(!mkdir_needs_chmod(0o755, 0o022));
        assert!(!mkdir_needs_chmod(0o700, 0o077));
        assert!(
            mkdir_needs_chmod(0o1777, 0o022),
            "/tmp would lose group/other write"
        );
        assert!(
            mkdir_needs_chmod(0o755, 0o077),
            "a strict umask would leave 0700"
        );
        assert!(
            mkdir_needs_chmod(0o2755, 0),
            "setgid is not applied by mkdir"
        );
        // And for real, under this process's umask.
        let tmp = tempfile::tempdir().unwrap();
        for (name, mode) in [("a", 0o755), ("b", 0o700), ("c", 0o1777), ("d", 0o555)] {
            let path = tmp.path().join(name);
            mkdir(&path, mode).unwrap();
            let got = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(got, mode, "{name}: {got:o} instead of {mode:o}");
        }
    }
}
