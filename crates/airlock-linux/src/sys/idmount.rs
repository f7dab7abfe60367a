//! Id-mapped mounts (PRODUCT I5) with the new mount API, and the helper user namespaces whose
//! maps they carry.
//!
//! The privileged host process clones a host directory as a detached mount
//! ([`clone_tree`]), gives it an id mapping and its flags ([`set_idmap`]) and passes the
//! descriptor to the sandbox's init stage, which attaches it inside its own mount namespace
//! ([`attach`]). A mapping comes from a user namespace: the sandbox's own, or one made only for
//! its map by [`user_namespace`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
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
    mount_setattr(tree.as_raw_fd(), c"", libc::AT_EMPTY_PATH, &attr)
}

/// Adds `attrs` (only `ro`, `nosuid`, `nodev`, `noexec`) to the mount whose root is `path`
/// (a link is followed, as `mount(2)` does), leaving every other flag as it is: one
/// `mount_setattr(2)` (Linux 5.12) instead of reading the flags and remounting with them
/// (in a user namespace the kernel refuses to clear a flag locked by a more privileged one,
/// and this call never clears any). `ENOSYS` on older kernels: the caller falls back.
pub fn add_mount_attrs(path: &Path, attrs: MountAttrFlags) -> io::Result<()> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let attr = MountAttr {
        attr_set: u64::from(attrs.bits()),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    mount_setattr(libc::AT_FDCWD, &path, 0, &attr)
}

/// `mount_setattr(2)` on `path` relative to `dirfd` (the descriptor itself with an empty path
/// and `AT_EMPTY_PATH`).
fn mount_setattr(
    dirfd: RawFd,
    path: &std::ffi::CStr,
    flags: libc::c_int,
    attr: &MountAttr,
) -> io::Result<()> {
    // SAFETY: `dirfd` is an open descriptor (or AT_FDCWD) held by the caller for the call,
    // `path` is a NUL-terminated string borrowed for the call, and `attr` is a valid, fully
    // initialised `struct mount_attr` whose size is passed alongside; the kernel only reads
    // them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            attr as *const MountAttr,
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

/// A tmpfs filesystem context (`fsopen`) with `options` set, to be completed with
/// [`set_option`] and mounted with [`mount_on_cwd`].
pub fn tmpfs_context(options: &[(&str, &str)]) -> io::Result<OwnedFd> {
    let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    fsconfig_set_string(fs.as_fd(), "source", "airlock")?;
    for (key, value) in options {
        set_option(fs.as_fd(), key, value)?;
    }
    Ok(fs)
}

/// Sets one string option of the filesystem context `fs`.
pub fn set_option(fs: BorrowedFd<'_>, key: &str, value: &str) -> io::Result<()> {
    Ok(fsconfig_set_string(fs, key, value)?)
}

/// Creates the filesystem of the context `fs`, mounts it (`nosuid,nodev`) on the working
/// directory and returns a descriptor of the new mount's root: the caller can enter it with
/// `fchdir` without walking any path (the working directory itself may not be searchable by
/// the caller).
pub fn mount_on_cwd(fs: OwnedFd) -> io::Result<OwnedFd> {
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
/// namespace is opened, then exits. It shares our memory (`CLONE_VM`: no page tables to copy,
/// which is what makes this cheap enough for the start path) and runs only [`hold_namespace`]
/// on a stack of its own.
pub fn user_namespace(uid_map: &str, gid_map: &str) -> io::Result<(OwnedFd, NsChild)> {
    let (hold_r, hold_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let mut child = NsChild {
        pid: 0,
        fds: Box::new([hold_r.as_raw_fd(), hold_w.as_raw_fd()]),
        stack: vec![0u8; CHILD_STACK],
    };
    // The stack grows down on every architecture Linux runs this on; keep the top 16-aligned.
    let top = (child.stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: `hold_namespace` runs on `child.stack`, which outlives the child (NsChild's drop
    // reaps it before the stack is freed), and reads only `child.fds`, which also outlives it.
    // It calls only the async-signal-safe `close` and `read` and returns (the clone wrapper then
    // exits the child); it touches no other memory, so sharing our address space without
    // synchronisation is sound.
    let pid = unsafe {
        libc::clone(
            hold_namespace,
            top as *mut libc::c_void,
            libc::CLONE_NEWUSER | libc::CLONE_VM | libc::SIGCHLD,
            child.fds.as_mut_ptr().cast(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    child.pid = pid;
    drop(hold_r);
    let result = write_maps_and_open(pid, uid_map, gid_map);
    // The child exits at EOF, concurrently with our caller; NsChild reaps it.
    drop(hold_w);
    result.map(|ns| (ns, child))
}

/// The child of [`user_namespace`], reaped (waited for) on drop. Keep it until a moment where
/// waiting costs nothing (it exits as soon as the namespace is opened).
pub struct NsChild {
    pid: libc::pid_t,
    fds: Box<[libc::c_int; 2]>,
    stack: Vec<u8>,
}

impl Drop for NsChild {
    fn drop(&mut self) {
        if self.pid > 0 {
            let mut status = 0;
            // SAFETY: reaps the child cloned by `user_namespace` (ours; nothing else waits for
            // it); only after this may its stack and `fds` be freed.
            unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) };
        }
        let _ = (&self.fds, &self.stack);
    }
}

impl std::fmt::Debug for NsChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NsChild({})", self.pid)
    }
}

/// Stack size of the namespace-holding child (it calls three syscalls).
const CHILD_STACK: usize = 16 * 1024;

/// Body of the child of [`user_namespace`]: `arg` points to `[read end, write end]` of the
/// hold pipe. Closes every descriptor but the read end, then waits for EOF (the parent is done
/// or gone).
///
/// Every descriptor: the child got a copy of the whole descriptor table, and the host makes
/// helpers from two threads at once (the image's and the workspaces' mounts) while it spawns
/// the init stage. A copy of another helper's write end would keep that helper waiting while it
/// holds ours (both for ever), a copy of the bootstrap pipe's would keep the init stage from
/// reading its message to the end, and a copy of the id-range lock would keep the range.
/// `close_range` (Linux 5.9; id-mapped mounts need 5.12) failing ends the child at once: the
/// parent then fails to write its maps and the start fails with that error instead of hanging.
extern "C" fn hold_namespace(arg: *mut libc::c_void) -> libc::c_int {
    let fds = arg.cast::<[libc::c_int; 2]>();
    // SAFETY: `arg` is the `fds` array of `user_namespace`, alive until this child is reaped;
    // close_range and read are async-signal-safe raw syscalls that only touch this process's
    // descriptor table (its own copy: no CLONE_FILES) and the one-byte local buffer.
    unsafe {
        let [hold, _release] = *fds;
        // close_range(first, last, flags) takes unsigned ints; pass them as the C `long` the
        // variadic `syscall` reads.
        let (h, max) = (
            libc::c_long::from(hold),
            libc::c_long::from(libc::c_uint::MAX),
        );
        let below =
            h == 0 || libc::syscall(libc::SYS_close_range, 0 as libc::c_long, h - 1, 0) == 0;
        let above = libc::syscall(libc::SYS_close_range, h + 1, max, 0 as libc::c_long) == 0;
        if !(below && above) {
            return 1;
        }
        let mut byte = 0u8;
        libc::read(hold, (&mut byte as *mut u8).cast(), 1);
    }
    0
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The host makes helper namespaces from two threads at once (the image's on the
    /// background thread, the workspaces' on the main thread). A helper that kept a copy of
    /// another helper's hold pipe (or of the init stage's bootstrap pipe) never saw EOF: seen
    /// as a `run` hung for ever, two helpers each waiting for the other's pipe to close and the
    /// init stage for its bootstrap message to end. Every helper must exit.
    #[test]
    fn helpers_made_from_two_threads_at_once_all_exit() {
        if !airlock_testkit::needs_root("writing a helper namespace's maps needs root") {
            return;
        }
        let (done, finished) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let done = done.clone();
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let map = "0 1500000000 1\n";
                    let (ns, child) = user_namespace(map, map).unwrap();
                    drop(ns);
                    drop(child);
                }
                let _ = done.send(());
            });
        }
        for _ in 0..2 {
            finished
                .recv_timeout(std::time::Duration::from_secs(120))
                .expect("a helper never exited: it holds another's hold pipe");
        }
    }
}
