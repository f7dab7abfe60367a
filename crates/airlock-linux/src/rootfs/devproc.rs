//! `/dev`, `/proc` and `/sys` of the sandbox (PRODUCT I4).
//!
//! `/dev` is a tmpfs with only harmless device nodes bind-mounted from the host (device nodes
//! cannot be created in a user namespace), a private devpts instance (so sandbox PTYs are not
//! the host's, and host terminals are not reachable), and a tmpfs `/dev/shm`.
//! `/proc` is a fresh instance for the new PID namespace, with the masks runc applies: files
//! that leak host kernel state or allow host-wide actions are covered by `/dev/null`, host-wide
//! directories by an empty read-only tmpfs, and kernel tunables are read-only.
//! `/sys` is a fresh read-only sysfs (it shows the sandbox's network namespace only).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use nix::mount::MsFlags;

use super::{bind, mkdir, mount_raw, remount_bind, write_file, RootfsError, TmpfsSizes};

const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
const DEV_LINKS: &[(&str, &str)] = &[
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];
/// Files in `/proc` covered by `/dev/null`.
const PROC_MASKED_FILES: &[&str] = &[
    "kcore",
    "keys",
    "timer_list",
    "sysrq-trigger",
    "latency_stats",
    "timer_stats",
    "sched_debug",
];
/// Directories in `/proc` replaced by an empty read-only tmpfs.
const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi"];
/// Directories in `/sys` replaced by an empty read-only tmpfs, as Docker does: firmware tables
/// (ACPI, DMI, EFI variables: host identifiers, readable by a root invoker's sandbox user, who is
/// host root on disk) and the RAPL energy counters (the PLATYPUS side channel, CVE-2020-8694).
const SYS_MASKED_DIRS: &[&str] = &["firmware", "devices/virtual/powercap", "class/powercap"];
/// Directories in `/proc` made read-only.
const PROC_READ_ONLY: &[&str] = &["sys", "bus", "fs", "irq"];

pub(super) fn mount_dev(root: &Path, sizes: &TmpfsSizes) -> Result<(), RootfsError> {
    let dev = root.join("dev");
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    mount_raw(
        Some("airlock-dev"),
        &dev,
        Some("tmpfs"),
        flags,
        Some(&format!("mode=0755{}", sizes.dev_option())),
        "tmpfs",
    )?;
    // The nodes are the host's own inodes: a read-only bind keeps them usable (opening a device
    // for writing is not a write to the filesystem) while chmod/chown/utimes on them fail with
    // EROFS. Without it, a root invoker's sandbox user (host root on disk) could chmod the host's
    // /dev/null.
    let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    for name in DEVICES {
        let target = dev.join(name);
        write_file(&target, b"", 0o666)?;
        bind(&Path::new("/dev").join(name), &target)?;
        remount_bind(&target, ro)?;
    }
    let pts = dev.join("pts");
    mkdir(&pts, 0o755)?;
    mount_raw(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
        "devpts",
    )?;
    let shm = dev.join("shm");
    mkdir(&shm, 0o1777)?;
    let shm_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_raw(
        Some("shm"),
        &shm,
        Some("tmpfs"),
        shm_flags,
        Some(&format!("mode=1777{}", sizes.shm_option())),
        "tmpfs",
    )?;
    for (name, target) in DEV_LINKS {
        let path = dev.join(name);
        symlink(target, &path).map_err(|source| RootfsError::Create { path, source })?;
    }
    Ok(())
}

/// `scratch` holds the masks' source (outside the new root: it is gone after `pivot_root`).
pub(super) fn mount_proc(root: &Path, scratch: &Path) -> Result<(), RootfsError> {
    let proc_dir = root.join("proc");
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_raw(Some("proc"), &proc_dir, Some("proc"), flags, None, "proc")?;
    // The masks' source: the host's /dev/null bound once outside the new root and made
    // read-only (for the same reason as the device nodes) and `nosuid,nodev,noexec`; a bind
    // mount copies the flags of the mount it binds, so each mask has them from the start.
    let null = scratch.join("proc-mask");
    write_file(&null, b"", 0o600)?;
    bind(Path::new("/dev/null"), &null)?;
    remount_bind(&null, MsFlags::MS_RDONLY | flags)?;
    for name in PROC_MASKED_FILES {
        let path = proc_dir.join(name);
        if fs::symlink_metadata(&path).is_ok() {
            bind(&null, &path)?;
        }
    }
    for name in PROC_MASKED_DIRS {
        let path = proc_dir.join(name);
        if path.is_dir() {
            let ro = MsFlags::MS_RDONLY | flags;
            mount_raw(
                Some("airlock-mask"),
                &path,
                Some("tmpfs"),
                ro,
                None,
                "tmpfs",
            )?;
        }
    }
    for name in PROC_READ_ONLY {
        let path = proc_dir.join(name);
        if path.is_dir() {
            bind(&path, &path)?;
            remount_bind(&path, MsFlags::MS_RDONLY | flags)?;
        }
    }
    Ok(())
}

pub(super) fn mount_sys(root: &Path) -> Result<(), RootfsError> {
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let sys = root.join("sys");
    mount_raw(Some("sysfs"), &sys, Some("sysfs"), flags, None, "sysfs")?;
    for name in SYS_MASKED_DIRS {
        let path = sys.join(name);
        if path.is_dir() {
            mount_raw(
                Some("airlock-mask"),
                &path,
                Some("tmpfs"),
                flags,
                None,
                "tmpfs",
            )?;
        }
    }
    Ok(())
}
