//! Check `idmapped_mounts`: whether the filesystems a root invoker's sandbox shows can be
//! id-mapped (`idmounts.rs`). A root-invoked sandbox refuses to start on one that cannot (NFS,
//! FUSE, …) rather than showing it with host root's identity; this names them in advance.
//! The probe clones each location as a detached mount and id-maps the copy: nothing on the
//! host changes, and the copies vanish with their descriptors.

use std::path::{Path, PathBuf};

use super::{Check, Invoker, Status};
use crate::idmounts::HOST_IMAGE_ENTRIES;
use crate::sys::idmount;

const ID: &str = "idmapped_mounts";
const TITLE: &str = "id-mapped mounts for a root invoker's sandboxes (I5)";

/// Where a root invoker's sandboxes usually show host files: the image's system directories,
/// the current directory (a project), `$HOME` and the runtime directory.
fn locations() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = HOST_IMAGE_ENTRIES
        .iter()
        .map(|n| Path::new("/").join(n))
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
        .collect();
    paths.extend(std::env::current_dir().ok());
    for var in [airlock_env::HOME, airlock_env::XDG_RUNTIME_DIR] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            paths.push(PathBuf::from(v));
        }
    }
    paths.retain(|p| p.is_dir());
    paths.dedup();
    paths
}

pub(super) fn check(invoker: &Invoker) -> Check {
    if !invoker.is_root() {
        return Check::ok(
            ID,
            TITLE,
            false,
            "not needed: an unprivileged invoker's sandbox shows host files under its own ids",
        );
    }
    let map = "0 2147483648 1\n";
    let (ns, _child) = match idmount::user_namespace(map, map) {
        Ok(ns) => ns,
        Err(e) => {
            return Check::not_ok(
                ID,
                TITLE,
                Status::Missing,
                true,
                format!("cannot create a user namespace for id-mapped mounts: {e}"),
                "use a kernel of 5.12 or later with user namespaces enabled",
            )
        }
    };
    let mut failed = Vec::new();
    let paths = locations();
    for path in &paths {
        let result = idmount::clone_tree(path).and_then(|tree| {
            idmount::set_idmap(
                std::os::fd::AsFd::as_fd(&tree),
                std::os::fd::AsFd::as_fd(&ns),
                true,
            )
        });
        if let Err(e) = result {
            failed.push(format!("{} ({e})", path.display()));
        }
    }
    if failed.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Check::ok(
            ID,
            TITLE,
            true,
            format!("these filesystems can be id-mapped: {}", shown.join(", ")),
        );
    }
    Check::not_ok(
        ID,
        TITLE,
        Status::Missing,
        true,
        format!(
            "cannot be id-mapped (NFS and FUSE cannot): {}; a root-invoked sandbox that shows \
             them refuses to start rather than show them as host root's",
            failed.join(", ")
        ),
        "keep projects and mounts on a local filesystem (ext4, xfs, btrfs, tmpfs), or run \
         airlock as a regular user",
    )
}
