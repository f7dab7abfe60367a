//! The root view of a root invoker's sandbox (issue 9.5; docs/security.md, "Identities").
//!
//! A root invoker's workspaces are id-mapped so that the sandbox user is the invoker on disk
//! (`idmounts.rs`); in-sandbox root is then the sandbox's subordinate base id, and a file
//! `--root` writes into a workspace would belong to that id on the host. A mount's id mapping
//! is fixed once it is attached, and only the host (privileged over the workspace's
//! filesystem) can make one, so `--root` processes get a mount namespace of their own: a copy
//! of the sandbox's, made just before `pivot_root`, in which every workspace and mount is
//! replaced by the clone the host id-mapped with in-sandbox root as the invoker
//! (`root-map:<i>`), and the protected paths (`rootfs/protect.rs`: `.git/hooks`, `.git/config`,
//! `.airlock`, … read-only, their ancestors pinned) are applied again through those clones.
//! Everything else (the image with its overlays and masks, `/tmp`, `/dev` with its devpts and
//! shm, `/proc`, `/sys`, `/etc`'s generated files) is the same mounts as the sandbox's, so the
//! two views differ only in who owns a workspace file.
//!
//! Mappings at or below `/etc`, `/run`, `/dev`, `/proc` or `/sys` would hide mounts airlock
//! places on top of them (masks, the egress directory, the trust bundle), which this copy does
//! not rebuild: with such a mapping there is no root view and `--root` processes share the
//! sandbox's namespace, as before (docs/security.md lists it).
//!
//! The guest's PID 1 keeps the namespace's descriptor; `--root` processes join it
//! (`setns`) before anything else (`sys/process.rs`). No sandbox process can join it on its
//! own: that takes `CAP_SYS_ADMIN`, and `setns` and every mount call are denied by seccomp.

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::mount::{umount2, MntFlags};
use nix::sched::{setns, unshare, CloneFlags};
use rustix::fs::{Mode, OFlags};

use super::{bind_mapping, inside, passed_mount, pivot_into, protect_workspaces, RootfsError};
use crate::bootstrap::Bootstrap;
use crate::idmounts::{Received, ROOT_VIEW_PREFIX};

/// Where airlock mounts over the image after the mappings: a mapping here rules the view out.
const BUILT_OVER: &[&str] = &["/etc", "/run", "/dev", "/proc", "/sys"];

/// Whether the root view can be built for `boot` (see the module docs).
pub(super) fn possible(boot: &Bootstrap, mounts: &Received) -> bool {
    mounts.has_root_view()
        && boot
            .spec
            .mappings_in_mount_order()
            .iter()
            .all(|m| !BUILT_OVER.iter().any(|b| m.sandbox.starts_with(b)))
}

/// Builds the root view from the finished tree at `root` (before `pivot_root`) and returns
/// its mount namespace; the calling process is back in its own namespace and working
/// directory afterwards, whatever happened.
pub(super) fn build(
    root: &Path,
    boot: &Bootstrap,
    mounts: &mut Received,
) -> Result<OwnedFd, RootfsError> {
    let err = |what: &'static str| {
        move |e: rustix::io::Errno| RootfsError::RootView {
            what,
            source: e.into(),
        }
    };
    let nix_err = |what: &'static str| {
        move |e: nix::Error| RootfsError::RootView {
            what,
            source: e.into(),
        }
    };
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let own = rustix::fs::open("/proc/thread-self/ns/mnt", flags, Mode::empty())
        .map_err(err("open /proc/thread-self/ns/mnt"))?;
    let dir = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let cwd =
        rustix::fs::open(".", dir, Mode::empty()).map_err(err("open the scratch directory"))?;
    unshare(CloneFlags::CLONE_NEWNS).map_err(nix_err("unshare(CLONE_NEWNS)"))?;
    let built = in_copy(root, boot, mounts);
    // Back into the sandbox's namespace (setns also resets the root and working directory).
    setns(&own, CloneFlags::CLONE_NEWNS).map_err(nix_err("setns(mount namespace)"))?;
    rustix::process::fchdir(&cwd).map_err(err("fchdir"))?;
    built
}

/// In the copy: swaps every mapping for its root-view clone, protects the workspaces again,
/// pivots, and returns the copy's namespace.
fn in_copy(root: &Path, boot: &Bootstrap, mounts: &mut Received) -> Result<OwnedFd, RootfsError> {
    let mappings = boot.spec.mappings_in_mount_order();
    // Innermost first; a detach takes the protected paths' mounts below a workspace along.
    for m in mappings.iter().rev() {
        let at = inside(root, &m.sandbox)?;
        umount2(&at, MntFlags::MNT_DETACH).map_err(|e| RootfsError::RootView {
            what: "umount2",
            source: e.into(),
        })?;
    }
    for (i, m) in mappings.iter().enumerate() {
        let tree = passed_mount(mounts, &format!("{ROOT_VIEW_PREFIX}{i}"))?;
        bind_mapping(root, m, tree)?;
    }
    // In-sandbox root is the invoker here: a path created now belongs to the invoker on disk.
    protect_workspaces(root, boot, (0, 0))?;
    pivot_into(root)?;
    rustix::fs::open(
        "/proc/thread-self/ns/mnt",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| RootfsError::RootView {
        what: "open /proc/thread-self/ns/mnt",
        source: e.into(),
    })
}
