//! The monitor helper: how a root caller's VM gets a QEMU that is never host root
//! (docs/vm.md, "The monitor's identity for a root invoker").
//!
//! `airlock __vm-monitor <plan>` is spawned by [`crate::machine::Machine::boot`] (as root, in
//! the sandbox's cgroup, with `PR_SET_PDEATHSIG`) and becomes QEMU in place (same pid):
//!
//! 1. a mount namespace of its own, every mount private (nothing reaches the host's);
//! 2. a small tmpfs over its working directory (the VM's private directory), entered through
//!    the new mount's descriptor; QEMU is given paths relative to it, so no directory of the
//!    host above it (root's 0700 home, runtime or cache) has to be searchable by QEMU;
//! 3. each [`Bind`] cloned from the host (`open_tree`, the named mount only) and id-mapped
//!    through a user namespace that maps the monitor's id Q to host id 0 and nothing else
//!    (`nosuid,nodev`, read-only unless writable), then attached under its name: QEMU's
//!    writes as Q land as root (the invoker) on disk, root's files appear as Q's to it, every
//!    other owner as the overflow id. The kernel and the initramfs are bound the same way,
//!    read-only, so Q can read them where they live (root's cache);
//! 4. the switch to Q (no supplementary groups, `setresgid`/`setresuid`), `no_new_privs`,
//!    `PR_SET_PDEATHSIG` again (the switch clears it) and a check that its parent is still
//!    the process that spawned it, then `execve` of QEMU. The channel and the console are the
//!    descriptors it inherited (3 and 4).
//!
//! Any failure ends the helper before QEMU runs, with its reason on stderr (QEMU's log, which
//! the boot error quotes).

use std::convert::Infallible;
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_linux::sys::idmount;
use serde::{Deserialize, Serialize};

/// The hidden verb of the `airlock` executable that runs [`main`].
pub const VERB: &str = "__vm-monitor";

/// What the helper does, as JSON in its one argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The monitor's uid and gid (never 0).
    pub uid: u32,
    pub gid: u32,
    /// QEMU's executable (reachable by `uid`).
    pub qemu: PathBuf,
    /// QEMU's arguments: the binds by their names, relative to the working directory.
    pub args: Vec<String>,
    pub binds: Vec<Bind>,
}

/// A host file or directory shown to QEMU, id-mapped, under `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bind {
    pub source: PathBuf,
    /// One path component (no `/`, not `.` or `..`).
    pub name: String,
    pub writable: bool,
}

/// Entry point of [`VERB`]; returns only on failure (exit status 70, reason on stderr).
pub fn main(plan: &OsStr) -> i32 {
    // The process to die with: the one that spawned us (QEMU keeps this pid).
    let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
    let result = serde_json::from_slice::<Plan>(plan.as_encoded_bytes())
        .map_err(|e| format!("not a monitor plan: {e}"))
        .and_then(|plan| run(&plan, parent));
    match result {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("airlock vm monitor: {e}");
            70
        }
    }
}

fn run(plan: &Plan, parent: u32) -> Result<Infallible, String> {
    check(plan)?;
    airlock_linux::sys::monitor::private_mount_namespace()
        .map_err(|e| format!("cannot make a private mount namespace: {e}"))?;
    let (uid_map, gid_map) = (format!("0 {} 1\n", plan.uid), format!("0 {} 1\n", plan.gid));
    let (userns, holder) = idmount::user_namespace(&uid_map, &gid_map)
        .map_err(|e| format!("cannot make the id-mapping namespace: {e}"))?;
    let fs = idmount::tmpfs_context(&[("mode", "0755"), ("size", "1m")])
        .map_err(|e| format!("cannot prepare the monitor's directory: {e}"))?;
    let root = idmount::mount_on_cwd(fs)
        .map_err(|e| format!("cannot mount the monitor's directory: {e}"))?;
    rustix::process::fchdir(&root)
        .map_err(|e| format!("cannot enter the monitor's directory: {e}"))?;
    for bind in &plan.binds {
        attach(bind, userns.as_fd()).map_err(|e| {
            format!(
                "cannot show {} to the monitor id-mapped: {e} (the vm backend needs id-mapped \
                 mounts on that filesystem for a root invoker)",
                bind.source.display()
            )
        })?;
    }
    drop(holder);
    drop(userns);
    let mut qemu = Command::new(&plan.qemu);
    qemu.args(&plan.args);
    airlock_linux::sys::monitor::before_exec_with_parent(
        &mut qemu,
        Some((plan.uid, plan.gid)),
        parent,
    );
    let err = qemu.exec();
    Err(format!("cannot start {}: {err}", plan.qemu.display()))
}

/// Refuses a plan that would run QEMU as root or attach outside the monitor's directory.
fn check(plan: &Plan) -> Result<(), String> {
    if plan.uid == 0 || plan.gid == 0 {
        return Err("the monitor never runs as root".into());
    }
    for bind in &plan.binds {
        let one = Path::new(&bind.name).components().count() == 1;
        if !one || bind.name.contains('/') || bind.name == "." || bind.name == ".." {
            return Err(format!(
                "{:?} is not a name in the monitor's directory",
                bind.name
            ));
        }
    }
    Ok(())
}

fn attach(bind: &Bind, userns: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    let tree = idmount::clone_tree(&bind.source)?;
    let is_dir = rustix::fs::fstat(&tree)?.st_mode & libc::S_IFMT == libc::S_IFDIR;
    if is_dir {
        std::fs::DirBuilder::new().mode(0o755).create(&bind.name)?;
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&bind.name)?;
    }
    idmount::set_idmap(tree.as_fd(), userns, !bind.writable)?;
    idmount::attach(tree.as_fd(), Path::new(&bind.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(uid: u32, name: &str) -> Plan {
        Plan {
            uid,
            gid: uid,
            qemu: "/usr/bin/qemu-system-x86_64".into(),
            args: Vec::new(),
            binds: vec![Bind {
                source: "/tmp".into(),
                name: name.into(),
                writable: false,
            }],
        }
    }

    #[test]
    fn a_plan_for_root_or_with_a_name_leaving_the_directory_is_refused() {
        assert!(check(&plan(0x7000_03e8, "s0")).is_ok());
        assert!(check(&plan(0, "s0")).unwrap_err().contains("root"));
        for name in ["", ".", "..", "a/b", "/abs", "../up"] {
            assert!(
                check(&plan(0x7000_03e8, name)).is_err(),
                "{name:?} accepted"
            );
        }
    }
}
