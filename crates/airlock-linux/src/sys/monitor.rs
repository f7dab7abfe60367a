//! The last steps before the `vm` backend's monitor (QEMU) runs: leave the caller's
//! privileges behind and die with the process that owns the VM.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Registers, after any hook already on `cmd` (e.g. [`super::fd::join_before_exec`], which
/// must run while the child still has the caller's rights), the monitor's own pre-exec steps:
///
/// 1. with `identity = Some((uid, gid))`: no supplementary groups, then `setresgid`,
///    `setresuid` (all three ids each), so nothing of the caller's identity is left to regain;
/// 2. `no_new_privs` (a set-id or file-capability helper QEMU might exec gains nothing);
/// 3. `PR_SET_PDEATHSIG` = SIGKILL, set *after* the identity switch (a credential change
///    clears it), then a check that the parent is still `parent` (it may have died before the
///    setting took effect, and then no signal would ever come).
///
/// A failing step fails the spawn with its error: the monitor never runs half set up.
pub fn before_exec(cmd: &mut Command, identity: Option<(u32, u32)>) {
    before_exec_with_parent(cmd, identity, std::process::id());
}

/// [`before_exec`] for a process that replaces itself with the monitor (`Command::exec`, the
/// hooks run in the calling process): `parent` is the process it must die with, which is then
/// the caller's own parent rather than the caller.
pub fn before_exec_with_parent(cmd: &mut Command, identity: Option<(u32, u32)>, parent: u32) {
    let parent = parent as libc::pid_t;
    // SAFETY: the closure runs in the forked child (or, for `exec`, in the caller just before
    // execve) and only makes raw syscalls (setgroups, setresgid, setresuid, prctl, getppid) on
    // values copied in before, without allocating or taking locks, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let check = |rc: libc::c_int| {
                if rc == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            if let Some((uid, gid)) = identity {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setresgid(gid, gid, gid))?;
                check(libc::setresuid(uid, uid, uid))?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            check(libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Moves the calling process into a mount namespace of its own in which every mount is
/// private: what it mounts never reaches the host's namespace, and nothing mounted on the host
/// later appears in it. Needs `CAP_SYS_ADMIN`.
pub fn private_mount_namespace() -> std::io::Result<()> {
    use rustix::mount::{mount_change, MountPropagationFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(std::io::Error::from)?;
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    Ok(())
}
