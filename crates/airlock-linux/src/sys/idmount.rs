//! Id-mapped mounts (PRODUCT I5) with the new mount API, and the helper user namespaces whose
//! maps they carry.
//!
//! The privileged host process clones a host directory as a detached mount
//! ([`clone_tree`]), gives it an id mapping and its flags ([`set_idmap`]) and passes the
//! descriptor to the sandbox's init stage, which attaches it inside its own mount namespace
//! ([`attach`]). A mapping comes from a user namespace: the sandbox's own, or one made only for
//! its map by [`user_namespace`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::mount::{
    fsconfig_create, fsconfig_set_string, fsmount, fsopen, move_mount, open_tree, FsMountFlags,
    FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags,
};

/// `struct mount_attr` of `mount_setattr(2)` (version 0, 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// A detached copy of the mount at `path` (not its submounts: only what was named is shown),
/// close-on-exec. `path` is not followed if it is a symbolic link.
pub fn clone_tree(path: &Path) -> io::Result<OwnedFd> {
    Ok(open_tree(
        rustix::fs::CWD,
        path,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    )?)
}

/// Makes the detached mount `tree` show ids through `userns`'s maps (an on-disk id `k` appears
/// as whatever `k` inside `userns` is outside it), `nosuid,nodev`, and `ro` when `read_only`.
pub fn set_idmap(tree: BorrowedFd<'_>, userns: BorrowedFd<'_>, read_only: bool) -> io::Result<()> {
    let mut set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if read_only {
        set |= MOUNT_ATTR_RDONLY;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: `tree` and `userns` are open descriptors borrowed for the call, the path is a
    // NUL-terminated empty string with AT_EMPTY_PATH, and `attr` is a valid, fully initialised
    // `struct mount_attr` whose size is passed alongside; the kernel only reads it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Attaches the detached mount `tree` at `target` in the caller's mount namespace.
pub fn attach(tree: BorrowedFd<'_>, target: &Path) -> io::Result<()> {
    Ok(move_mount(
        tree,
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?)
}

/// Mounts a fresh tmpfs (`nosuid,nodev`, with `options`) on the working directory and returns
/// a descriptor of the new mount's root: the caller can enter it with `fchdir` without walking
/// any path (the working directory itself may not be searchable by the caller).
pub fn tmpfs_on_cwd(options: &[(&str, &str)]) -> io::Result<OwnedFd> {
    let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    fsconfig_set_string(fs.as_fd(), "source", "airlock")?;
    for (key, value) in options {
        fsconfig_set_string(fs.as_fd(), *key, *value)?;
    }
    fsconfig_create(fs.as_fd())?;
    let mnt = fsmount(
        fs.as_fd(),
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )?;
    move_mount(
        mnt.as_fd(),
        "",
        rustix::fs::CWD,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?;
    Ok(mnt)
}

/// A new user namespace (owned by the caller's) whose uid and gid maps are the given
/// `/proc/PID/uid_map` texts, held by the returned descriptor only. Needs the privilege to write
/// those maps (root in the caller's namespace).
///
/// A child is cloned into the namespace, holds it while the maps are written and the
/// namespace is opened, then exits; it runs nothing but `read` and `_exit`.
pub fn user_namespace(uid_map: &str, gid_map: &str) -> io::Result<OwnedFd> {
    let (hold_r, hold_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (hold, release) = (hold_r.as_raw_fd(), hold_w.as_raw_fd());
    // SAFETY: a raw fork-like clone (no new stack, SIGCHLD on exit) into a new user namespace.
    // The child touches no Rust runtime state: it only calls the async-signal-safe `close` and
    // `read` on an inherited pipe (returns at EOF, when the parent is done or gone) and `_exit`,
    // so it is sound even though the parent may be multi-threaded.
    let pid = unsafe {
        let pid = libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        );
        if pid == 0 {
            // The child's copy of the write end would keep its own read from ever ending.
            libc::close(release);
            let mut byte = 0u8;
            libc::read(hold, (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0);
        }
        pid
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(hold_r);
    let result = write_maps_and_open(pid as libc::pid_t, uid_map, gid_map);
    drop(hold_w);
    let mut status = 0;
    // SAFETY: reaps the child cloned above (ours; nothing else waits for it).
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::__WALL) };
    result
}

fn write_maps_and_open(pid: libc::pid_t, uid_map: &str, gid_map: &str) -> io::Result<OwnedFd> {
    let dir = format!("/proc/{pid}");
    std::fs::write(format!("{dir}/uid_map"), uid_map)?;
    std::fs::write(format!("{dir}/gid_map"), gid_map)?;
    open_namespace(Path::new(&format!("{dir}/ns/user")))
}

/// Opens a namespace file such as `/proc/PID/ns/user` (read-only, close-on-exec).
pub fn open_namespace(path: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}
