//! The host image shows only what the host makes world-readable (PRODUCT I2; docs/security.md).
//!
//! Who could read more than "others" may, and how each case is closed:
//! - An unprivileged invoker's sandbox: host files appear as `nobody`'s except the invoker's own,
//!   and no capability applies to `nobody`'s files, so the kernel already gives every sandbox
//!   process exactly the "others" permission (the invoker's own files are its own anyway).
//! - A root invoker's sandbox user: the system directories are id-mapped through the sandbox's
//!   namespace (`idmounts.rs`), so host root's files belong to in-sandbox root, not to the
//!   sandbox user, which again gets the "others" permission — for free, on every directory.
//! - A root invoker's in-sandbox root (`--root`) owns those files and holds `CAP_DAC_OVERRIDE`
//!   over them (it must: I2 lets it change system files in the overlay). Only masking stops it.
//!   So every entry of the image without read permission for others — or a directory without
//!   search permission for others — is covered: a file by an empty read-only file, a directory
//!   by an empty read-only tmpfs (nothing below it is visited). `/etc` and `/opt`, where hosts
//!   keep secrets (e.g. `/etc/wireguard`, `/etc/mysql/debian.cnf`, `/etc/security/opasswd`, an
//!   application's 0600 key under `/opt`), are walked at every start; `/usr` and `/lib*`
//!   (~130,000 entries, ~0.5 s) through a walk cached in the runtime root
//!   (`idmounts/wide_scan.rs`), which sees a `chmod` in place or a file added deep in the tree
//!   only once the cache expires (docs/security.md lists this as a limitation).

use std::path::Path;

use nix::mount::MsFlags;

use super::{bind, inside, mount_raw, remount_bind, write_file, RootfsError};
use crate::idmounts::Unreadable;

/// Covers each entry of `list` (host paths of the image that others may not read, found by the
/// host while the namespaces were being made) at its place in `root`:
/// a file by an empty read-only file, a directory by an empty read-only tmpfs.
pub(super) fn mask(root: &Path, scratch: &Path, list: &[Unreadable]) -> Result<(), RootfsError> {
    if list.is_empty() {
        return Ok(());
    }
    let empty = scratch.join("unreadable");
    write_file(&empty, b"", 0o400)?;
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for entry in list {
        let path = inside(root, &entry.path)?;
        // Gone since the scan (or below an entry already masked): nothing left to hide.
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        if entry.dir {
            let opts = Some("mode=0700,size=4k");
            mount_raw(
                Some("airlock-mask"),
                &path,
                Some("tmpfs"),
                flags,
                opts,
                "tmpfs",
            )?;
        } else {
            bind(&empty, &path)?;
            remount_bind(&path, flags)?;
        }
    }
    Ok(())
}
