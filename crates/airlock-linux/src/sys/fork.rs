//! `fork(2)` for the init stage, which must fork to become PID 1 of its new PID namespace
//! (`unshare(CLONE_NEWPID)` only applies to children).

/// Which side of a fork this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    Parent { child: libc::pid_t },
    Child,
}

/// Forks the calling process.
///
/// Contract: only called from the single-threaded init stage (`airlock __init`), which has not
/// started any thread, so the child may keep running arbitrary code.
pub fn fork_single_threaded() -> std::io::Result<Forked> {
    // SAFETY: the init stage is single-threaded (see the contract above), so no lock can be held
    // by another thread at the moment of the fork and the child may allocate freely.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(std::io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        child => Ok(Forked::Parent { child }),
    }
}
