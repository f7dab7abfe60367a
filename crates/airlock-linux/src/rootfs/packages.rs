//! The package manager's state in the `host` image (P1, I2): without it `apt-get` inside finds
//! an empty `/var` and cannot even take its lock.
//!
//! Each of [`PACKAGE_STATE`] that is a real directory on the host becomes an overlay with the
//! host directory as lower layer and a per-sandbox upper layer, like the system directories:
//! packages installed inside (as the sandbox's root) change only the upper layer, which lives on
//! the scratch tmpfs and vanishes with the sandbox. A symbolic link or anything else at one of
//! these paths is skipped, never followed (it would be resolved against the host's root here).
//!
//! `/var/cache/debconf/passwords.dat` holds answers to password questions of package
//! configuration. It is masked by an empty 0600 file placed in the upper layer *before* the
//! overlay is mounted: the host file's content is never read (no copy-up), and debconf can still
//! rewrite the file inside.
//!
//! dpkg refuses to run when `/var/lib/dpkg/statoverride` names a user or group that does not
//! exist, and the sandbox's generated `passwd`/`group` list only root, the sandbox user and
//! nobody. The upper layer therefore gets a copy keeping only the overrides owned by
//! `root:root` (the dropped ones concern setuid/setgid helpers and group-private directories,
//! which mean nothing in a `nosuid` sandbox without those groups).

use std::fs;
use std::path::Path;

use nix::mount::MsFlags;

use super::{lower_layer, mkdir, mount_raw, write_file, Layers, RootfsError};
use crate::idmounts::Received;

/// `/var` directories of dpkg, apt and debconf, mapped from the host (relative to `/`).
pub const PACKAGE_STATE: &[&str] = &[
    "var/lib/dpkg",
    "var/lib/apt",
    "var/cache/apt",
    "var/cache/debconf",
    "var/log/apt",
];

/// Files of [`PACKAGE_STATE`] masked by an empty file: `(directory, file name)`.
pub const MASKED: &[(&str, &str)] = &[("var/cache/debconf", "passwords.dat")];

/// The label of the id-mapped mount a root invoker's host passes for `rel` (`idmounts.rs`).
pub fn lower_label(rel: &str) -> String {
    format!("lower:{}", rel.replace('/', "-"))
}

/// Whether the host has `rel` as a real directory (a link or anything else is skipped).
pub fn is_host_dir(rel: &str) -> bool {
    fs::symlink_metadata(Path::new("/").join(rel)).is_ok_and(|m| m.file_type().is_dir())
}

/// Overlays each package-state directory of the host (see the module docs); the lower layer
/// is the id-mapped mount the host passed when it passed any (a root invoker's sandbox).
pub(super) fn host_package_state(
    root: &Path,
    layers: &Layers,
    mounts: &mut Received,
) -> Result<(), RootfsError> {
    let scratch = layers.upper.parent().unwrap_or(Path::new("."));
    for rel in PACKAGE_STATE {
        if !is_host_dir(rel) {
            continue;
        }
        let host = Path::new("/").join(rel);
        let lower = lower_layer(&host, &lower_label(rel), scratch, mounts)?;
        let target = root.join(rel);
        create_parents(root, &target)?;
        mkdir(&target, 0o755)?;
        let name = rel.replace('/', "-");
        let upper = layers.upper.join(&name);
        let work = layers.work.join(&name);
        mkdir(&upper, 0o755)?;
        mkdir(&work, 0o755)?;
        for (_, file) in MASKED.iter().filter(|(dir, _)| dir == rel) {
            write_file(&upper.join(file), b"", 0o600)?;
        }
        if *rel == "var/lib/dpkg" {
            filter_statoverride(&lower.join(STATOVERRIDE), &upper.join(STATOVERRIDE))?;
        }
        mount_overlay(&lower, &target, &upper, &work)?;
    }
    Ok(())
}

/// An overlay of `lower` with the prepared `upper` (same options as the system directories).
fn mount_overlay(
    lower: &Path,
    target: &Path,
    upper: &Path,
    work: &Path,
) -> Result<(), RootfsError> {
    for p in [lower, upper, work] {
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
    mount_raw(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(&opts),
        "overlay",
    )
}

/// dpkg's list of owner and mode overrides, relative to `/var/lib/dpkg`.
const STATOVERRIDE: &str = "statoverride";

/// Largest `statoverride` read from the host.
const STATOVERRIDE_CAP: u64 = 1 << 20;

/// Writes the `root:root` lines of the host's `statoverride` (a regular file; absent: nothing).
fn filter_statoverride(host: &Path, upper: &Path) -> Result<(), RootfsError> {
    use std::io::Read;
    let inspect = |source| RootfsError::Inspect {
        path: host.to_path_buf(),
        source,
    };
    let (file, len) = match fs::symlink_metadata(host) {
        Ok(m) if m.file_type().is_file() => (fs::File::open(host).map_err(inspect)?, m.len()),
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(inspect(e)),
    };
    // Room for all of it (up to the cap) and one byte more: one read, and one finding the end.
    let room = usize::try_from(len.min(STATOVERRIDE_CAP)).unwrap_or(0) + 1;
    let mut text = String::with_capacity(room);
    file.take(STATOVERRIDE_CAP)
        .read_to_string(&mut text)
        .map_err(inspect)?;
    write_file(upper, root_overrides(&text).as_bytes(), 0o644)
}

/// The lines of a `statoverride` text whose owner and group are both root.
fn root_overrides(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let mut f = l.split_whitespace();
            matches!(
                (f.next(), f.next()),
                (Some("root" | "#0"), Some("root" | "#0"))
            )
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Creates the missing directories between `root` and `target` (exclusive), 0755.
fn create_parents(root: &Path, target: &Path) -> Result<(), RootfsError> {
    let Some(parent) = target.parent() else {
        return Ok(());
    };
    let missing: Vec<&Path> = parent
        .ancestors()
        .take_while(|p| *p != root && !p.exists())
        .collect();
    for dir in missing.into_iter().rev() {
        mkdir(dir, 0o755)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statoverride_keeps_only_root_owned_overrides() {
        let host = "root ssl-cert 710 /etc/ssl/private\nroot root 755 /usr/bin/x\n\
                    messagebus root 4754 /usr/lib/y\n#0 #0 700 /z\n";
        assert_eq!(
            root_overrides(host),
            "root root 755 /usr/bin/x\n#0 #0 700 /z\n"
        );
    }
}
