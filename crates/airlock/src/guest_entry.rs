//! Hidden verbs of the `airlock` executable, dispatched on argv before clap sees it.
//!
//! The guest side of a sandbox runs as a hidden verb of this same binary (docs/architecture.md),
//! started inside the new namespaces; it must never appear in `--help` and must not depend on
//! clap's parsing of the public surface. The runtime owns the verbs added here.
//!
//! `airlock __init` (see `airlock_linux::init`): builds the sandbox (namespaces, rootfs,
//! `pivot_root`) and, in PID 1, becomes the guest (`airlock_guest::pid1::run`) with the
//! confinement every sandbox process gets: capabilities dropped, `no_new_privs` and the seccomp
//! filter (I6). `--root` processes keep their capabilities inside the sandbox's user namespace
//! only, under the same filter. If the filter cannot be built, nothing runs (partial
//! enforcement is failure).

use std::ffi::OsString;

use airlock_guest::{GuestOptions, SandboxUser};
use airlock_linux::init::Handoff;
use airlock_linux::sys::process::Confinement;

/// Runs a hidden verb when `args` names one and returns its exit status; `None` for every
/// public command line, which then goes to clap.
pub fn dispatch(args: &[OsString]) -> Option<i32> {
    let verb = args.get(1)?;
    if verb == airlock_linux::bootstrap::INIT_VERB && args.len() == 2 {
        return Some(init());
    }
    None
}

/// The init stage; returns in PID 1 only, once the guest has stopped.
fn init() -> i32 {
    let handoff = match airlock_linux::init::run() {
        Ok(h) => h,
        Err(e) => {
            // The host has the error through the start handshake; this is for the log.
            eprintln!("airlock: sandbox init failed: {e}");
            return 70;
        }
    };
    let options = match guest_options(&handoff) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("airlock: cannot build the sandbox's seccomp filter: {e}");
            return 70;
        }
    };
    airlock_guest::pid1::run(handoff.control, options)
}

fn guest_options(h: &Handoff) -> Result<GuestOptions, airlock_linux::seccomp::SeccompError> {
    let filter = airlock_linux::seccomp::sandbox_filter()?;
    let name = airlock_linux::rootfs::sandbox_user_name(&h.spec.user.name);
    Ok(GuestOptions {
        key: airlock_protocol::Key::from_bytes(h.key),
        env_base: h.spec.env.clone(),
        sandbox_user: SandboxUser {
            name,
            uid: h.sandbox_uid,
            gid: h.sandbox_gid,
            home: h.spec.user.home.to_string_lossy().into_owned(),
        },
        root_allowed: h.root_mapped,
        confinement: Confinement {
            drop_capabilities: true,
            no_new_privs: true,
            seccomp: Some(filter.clone()),
        },
        root_confinement: Confinement {
            drop_capabilities: false,
            no_new_privs: true,
            seccomp: Some(filter),
        },
    })
}
