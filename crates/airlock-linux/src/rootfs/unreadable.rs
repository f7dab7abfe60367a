//! The host image shows only what the host makes world-readable (PRODUCT I2; docs/security.md).
//!
//! Who could read more than "others" may, and how each case is closed:
//! - An unprivileged invoker's sandbox: host files appear as `nobody`'s except the invoker's own,
//!   and no capability applies to `nobody`'s files, so the kernel already gives every sandbox
//!   process exactly the "others" permission (the invoker's own files are its own anyway).
//! - A root invoker's sandbox user (uid and gid 1000 inside, every capability dropped,
//!   `no_new_privs`, image mounts `nosuid`): the system directories are id-mapped
//!   (`idmounts.rs`), so host root's files belong to in-sandbox root, not to the sandbox user,
//!   which again gets the "others" permission — for free, on every directory. In a plain `run`
//!   the `host` image's map also leaves out the sandbox user's ids
//!   (`IdPlan::image_map_texts_without_sandbox_user`): a host file of host user or group 1000
//!   is `nobody`'s there, not the sandbox user's.
//! - A root invoker's in-sandbox root (`--root`) owns those files and holds `CAP_DAC_OVERRIDE`
//!   over them (it must: I2 lets it change system files in the overlay). Only masking stops it.
//!   So where a process can hold in-sandbox root — `run --root`, and every persistent sandbox
//!   (`exec --root`, provisioning): `StartOptions::root_view` — every entry of the image without
//!   read permission for others, or a directory without search permission for others, is
//!   covered: a file by an empty read-only file, a directory by an empty read-only tmpfs
//!   (nothing below it is visited). `/etc` and `/opt`, where hosts keep secrets (e.g.
//!   `/etc/wireguard`, `/etc/mysql/debian.cnf`, `/etc/security/opasswd`, an application's 0600
//!   key under `/opt`), are walked at every such start; `/usr` and `/lib*`
//!   (~130,000 entries, ~0.5 s) through a walk cached in the runtime root
//!   (`idmounts/wide_scan.rs`), which sees a `chmod` in place or a file added deep in the tree
//!   only once the cache expires (docs/security.md lists this as a limitation).
//! - A root invoker's plain `run` has no process that holds in-sandbox root but airlock's own
//!   init stage and the guest's PID 1 (whose transfer threads take the sandbox user's
//!   identity); its PID 1 refuses `--root` processes (`Bootstrap::root_processes`), and no
//!   other step of a run (provisioning, agent setup) runs one. So it is neither scanned nor
//!   masked: every process of it gets the kernel's "others" permission on the image, as in an
//!   unprivileged invoker's sandbox (issue 9's budget: the walk of `/etc` and `/opt` competed
//!   with the spawn of the init stage on a small machine).
//!
//! Cost (issue 9's budget, `rootfs/costs.rs`): each mask is one bind mount, of one of two
//! templates made once per sandbox (a mount's `ro,nosuid,nodev` flags carry over to its binds),
//! and entries that the `/etc` masks cover anyway (`etc.rs`: `shadow`, `ssl/private`, the SSH
//! host keys, …) are left to them rather than masked twice.

use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::{bind, etc, inside, mkdir, mount_raw, remount_bind, write_file, RootfsError};
use crate::idmounts::Unreadable;

/// Covers each entry of `list` (host paths of the image that others may not read, found by the
/// host while the namespaces were being made) at its place in `root`:
/// a file by an empty read-only file, a directory by an empty read-only tmpfs.
pub(super) fn mask(root: &Path, scratch: &Path, list: &[Unreadable]) -> Result<(), RootfsError> {
    let mut templates = Templates {
        scratch,
        file: None,
        dir: None,
    };
    for entry in list {
        // Masked by `etc::apply` later in the build, before any sandbox process exists.
        if etc::masks(&entry.path, entry.dir) {
            continue;
        }
        let path = inside(root, &entry.path)?;
        // Gone since the scan (or below an entry already masked): nothing left to hide.
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let template = templates.get(entry.dir)?;
        bind(&template, &path)?;
    }
    Ok(())
}

/// The two masks, each made on first use under the scratch space (outside the new root) as its
/// own `ro,nosuid,nodev` mount, so that a bind of it is one more such mount.
struct Templates<'a> {
    scratch: &'a Path,
    file: Option<PathBuf>,
    dir: Option<PathBuf>,
}

impl Templates<'_> {
    fn get(&mut self, dir: bool) -> Result<PathBuf, RootfsError> {
        let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        if dir {
            if let Some(t) = &self.dir {
                return Ok(t.clone());
            }
            let t = self.scratch.join("unreadable-dir");
            mkdir(&t, 0o700)?;
            let opts = Some("mode=0700,size=4k");
            mount_raw(
                Some("airlock-mask"),
                &t,
                Some("tmpfs"),
                flags,
                opts,
                "tmpfs",
            )?;
            Ok(self.dir.insert(t).clone())
        } else {
            if let Some(t) = &self.file {
                return Ok(t.clone());
            }
            let t = self.scratch.join("unreadable");
            write_file(&t, b"", 0o400)?;
            bind(&t, &t)?;
            remount_bind(&t, flags)?;
            Ok(self.file.insert(t).clone())
        }
    }
}
