//! Masks and generated files inside the sandbox's `/etc` (PRODUCT I2).
//!
//! Masks are mounts over the overlay's merged view: an empty read-only file over a secret file,
//! an empty read-only tmpfs over a secret directory. Sandbox processes cannot remove them:
//! mounting and unmounting is denied by the seccomp filter and by the dropped capabilities.
//! Generated files (`passwd`, `group`, `hosts`, `hostname`, `machine-id`) are bind mounts of
//! files in the scratch tmpfs, so they never touch the host and need no write access to the
//! (possibly `nobody`-owned) lower layer.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::accounts::{self, Account};
use super::{bind, mount_raw, remount_bind, write_file, RootfsError};
use crate::bootstrap::Bootstrap;
use crate::spec::Image;

/// Secret files under `/etc`, masked when present.
const SECRET_FILES: &[&str] = &["shadow", "shadow-", "gshadow", "gshadow-"];
/// Secret directories under `/etc`, replaced by an empty read-only tmpfs when present.
const SECRET_DIRS: &[&str] = &["ssl/private", "NetworkManager/system-connections"];

/// Whether [`apply`] masks the image path `path` (absolute, as in the image) when it is a
/// directory (`dir`) or a file, whatever else is there: the secret files and directories and
/// the SSH host keys.
pub(super) fn masks(path: &Path, dir: bool) -> bool {
    let Ok(rel) = path.strip_prefix("/etc") else {
        return false;
    };
    if dir {
        return SECRET_DIRS.iter().any(|d| rel == Path::new(d));
    }
    let host_key = rel.parent() == Some(Path::new("ssh"))
        && rel
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("ssh_host_"));
    host_key || SECRET_FILES.iter().any(|f| rel == Path::new(f))
}

pub(super) fn apply(root: &Path, scratch: &Path, boot: &Bootstrap) -> Result<(), RootfsError> {
    let etc = root.join("etc");
    if !etc.is_dir() {
        return Ok(());
    }
    // The masks' source, made read-only once: a bind mount copies the flags of the mount it
    // binds, so each mask is `ro,nosuid,nodev` from the start (one mount call each, not two).
    let empty = scratch.join("empty");
    write_file(&empty, b"", 0o444)?;
    bind(&empty, &empty)?;
    remount_bind(
        &empty,
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
    )?;
    for name in SECRET_FILES {
        mask_file(&etc.join(name), &empty)?;
    }
    for key in ssh_host_keys(&etc.join("ssh"))? {
        mask_file(&key, &empty)?;
    }
    for dir in SECRET_DIRS {
        let path = etc.join(dir);
        if path.is_dir() {
            let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
            mount_raw(
                Some("airlock-mask"),
                &path,
                Some("tmpfs"),
                flags,
                Some("mode=0700"),
                "tmpfs",
            )?;
        }
    }
    let passwd = passwd(root, boot);
    let generated = [
        ("machine-id", machine_id()?),
        ("passwd", passwd.clone()),
        ("group", group(root, boot, &passwd)),
        ("hostname", format!("{}\n", boot.spec.hostname)),
        ("hosts", hosts(&boot.spec.hostname)),
    ];
    for (name, content) in generated {
        let src = scratch.join(format!("etc-{name}"));
        write_file(&src, content.as_bytes(), 0o644)?;
        let target = etc.join(name);
        if target.exists() {
            bind(&src, &target)?;
        }
    }
    Ok(())
}

/// Covers `path` with `empty`, a read-only `nosuid,nodev` bind mount whose flags the new mount
/// inherits.
fn mask_file(path: &Path, empty: &Path) -> Result<(), RootfsError> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    bind(empty, path)
}

/// `/etc/ssh/ssh_host_*` (private and public keys; the public ones identify the host too).
fn ssh_host_keys(dir: &Path) -> Result<Vec<PathBuf>, RootfsError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        // Unlistable even with PID 1's namespace capabilities: no sandbox process (which has
        // at most those) can reach the keys inside either.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(Vec::new()),
        Err(source) => {
            return Err(RootfsError::Inspect {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut keys = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| RootfsError::Inspect {
            path: dir.to_path_buf(),
            source,
        })?;
        if entry.file_name().to_string_lossy().starts_with("ssh_host_") {
            keys.push(entry.path());
        }
    }
    Ok(keys)
}

/// A fresh 128-bit id, as systemd writes it (32 lowercase hex digits and a newline).
fn machine_id() -> Result<String, RootfsError> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| RootfsError::Create {
        path: PathBuf::from("/etc/machine-id"),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(format!("{}\n", hex_lower(&bytes)))
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sandbox user's name: the invoker's, except that a root invoker's sandbox user (a
/// non-root uid) cannot be called `root`.
pub fn sandbox_user_name(host_name: &str) -> String {
    if host_name == "root" || host_name.is_empty() {
        "airlock".to_owned()
    } else {
        host_name.to_owned()
    }
}

/// The login shell of root and the sandbox user: bash when the image has it. Checked without
/// following any link (before `pivot_root` an image's absolute link would resolve on the host).
fn shell(root: &Path) -> &'static str {
    let real_file = |rel: &str| {
        let mut at = root.to_path_buf();
        let parts: Vec<&str> = rel.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            match fs::symlink_metadata(&at) {
                Ok(m) if i + 1 == parts.len() => return m.is_file(),
                Ok(m) if m.is_dir() => {}
                _ => return false,
            }
        }
        false
    };
    if real_file("bin/bash") || real_file("usr/bin/bash") {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// Whether only the image's system accounts join (the host image: its people's accounts are
/// the host's, see `accounts.rs`).
fn system_only(boot: &Bootstrap) -> bool {
    matches!(boot.spec.image, Image::Host)
}

/// root, the sandbox user, nobody, then the image's own accounts (`accounts.rs`).
fn passwd(root: &Path, boot: &Bootstrap) -> String {
    let name = sandbox_user_name(&boot.spec.user.name);
    let generated = [
        Account {
            name: "root",
            id: 0,
        },
        Account {
            name: &name,
            id: boot.sandbox_uid,
        },
        Account {
            name: "nobody",
            id: 65534,
        },
    ];
    let image = accounts::read_image_db(root, "passwd").unwrap_or_default();
    format!(
        "root:x:0:0:root:/root:{sh}\n{name}:x:{uid}:{gid}:{name}:{home}:{sh}\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n{merged}",
        sh = shell(root),
        uid = boot.sandbox_uid,
        gid = boot.sandbox_gid,
        home = boot.spec.user.home.display(),
        merged = accounts::merge_passwd(&generated, &image, system_only(boot)),
    )
}

/// root, the sandbox user's group, nogroup, then the image's own groups; `passwd` is the
/// generated passwd (whose names are the members a host image's groups may keep).
fn group(root: &Path, boot: &Bootstrap, passwd: &str) -> String {
    let name = sandbox_user_name(&boot.spec.user.name);
    let generated = [
        Account {
            name: "root",
            id: 0,
        },
        Account {
            name: &name,
            id: boot.sandbox_gid,
        },
        Account {
            name: "nogroup",
            id: 65534,
        },
    ];
    let users: BTreeSet<String> = passwd
        .lines()
        .filter_map(|l| l.split(':').next())
        .map(str::to_owned)
        .collect();
    let image = accounts::read_image_db(root, "group").unwrap_or_default();
    format!(
        "root:x:0:\n{name}:x:{gid}:\nnogroup:x:65534:\n{merged}",
        gid = boot.sandbox_gid,
        merged = accounts::merge_group(&generated, &image, system_only(boot), &users),
    )
}

fn hosts(hostname: &str) -> String {
    format!("127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unreadable-entry masks leave to `apply` exactly what it masks whatever the host
    /// holds; anything else (another file, a directory where a file is masked, a path outside
    /// `/etc`) is still masked by them.
    #[test]
    fn masks_names_only_what_apply_masks_whatever_is_there() {
        for (path, dir) in [
            ("/etc/shadow", false),
            ("/etc/gshadow-", false),
            ("/etc/ssl/private", true),
            ("/etc/NetworkManager/system-connections", true),
            ("/etc/ssh/ssh_host_ed25519_key", false),
        ] {
            assert!(masks(Path::new(path), dir), "{path}");
        }
        for (path, dir) in [
            ("/etc/shadow", true),
            ("/etc/ssl/private", false),
            ("/etc/ssl/private/key.pem", false),
            ("/etc/ssh/sshd_config", false),
            ("/etc/ssh/keys/ssh_host_rsa_key", false),
            ("/etc/ssh", true),
            ("/etc/security/opasswd", false),
            ("/opt/shadow", false),
            ("/usr/etc/shadow", false),
            ("/etcetera/shadow", false),
        ] {
            assert!(!masks(Path::new(path), dir), "{path}");
        }
    }

    #[test]
    fn every_ssh_host_key_is_found_for_masking() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "ssh_host_ed25519_key",
            "ssh_host_rsa_key.pub",
            "ssh_config",
            "moduli",
        ] {
            fs::write(dir.path().join(f), "x").unwrap();
        }
        let mut keys: Vec<String> = ssh_host_keys(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        keys.sort();
        assert_eq!(keys, ["ssh_host_ed25519_key", "ssh_host_rsa_key.pub"]);
        assert!(ssh_host_keys(&dir.path().join("absent"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_root_invoker_sandbox_user_is_not_called_root() {
        assert_eq!(sandbox_user_name("root"), "airlock");
        assert_eq!(sandbox_user_name(""), "airlock");
        assert_eq!(sandbox_user_name("dev"), "dev");
    }
}
