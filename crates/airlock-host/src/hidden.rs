//! Hidden verbs of the `airlock` executable, as library functions the binary dispatches on
//! argv before clap sees it ([`dispatch`]).
//!
//! The guest side of a sandbox runs as a hidden verb of this same binary (docs/architecture.md),
//! started inside the new namespaces; it must never appear in `--help` and must not depend on
//! clap's parsing of the public surface. The verbs: `__init` ([`init`]), `__keeper`
//! ([`crate::lifecycle::keeper::main`]), `__proxy` ([`crate::egress::child::main`]), the image
//! import helper, and `__vm-monitor` (`airlock_vm::monitor`: a root invoker's QEMU, started as
//! an unprivileged id in a mount namespace of its own with id-mapped shares).
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
    // PID 1 of a `vm` sandbox: the kernel started this executable as the initramfs's /init.
    if airlock_vm::guest::is_vm_init(args) {
        airlock_vm::guest::main();
    }
    let verb = args.get(1)?;
    if verb == airlock_linux::bootstrap::INIT_VERB && args.len() == 2 {
        unblock_signals();
        return Some(init());
    }
    // The host-side owner of a persistent sandbox (`airlock up`); see crate::lifecycle.
    if verb == crate::wire::KEEPER_VERB && args.len() == 3 {
        let state_dir = std::path::Path::new(&args[2]);
        // Spawned parked, before `up` validated anything: nothing happens until the go-ahead.
        if let Err(status) = crate::lifecycle::keeper::await_go_ahead(state_dir) {
            return Some(status);
        }
        // A `vm` sandbox's owner keeps the same verb (and so the same proofs).
        if crate::vm::keeper::is_vm(state_dir) {
            return Some(crate::vm::keeper::main(args));
        }
        return Some(crate::lifecycle::keeper::main(args));
    }
    // A root invoker's VM monitor: QEMU as an unprivileged id with id-mapped shares.
    if verb == airlock_vm::monitor::VERB && args.len() == 3 {
        return Some(airlock_vm::monitor::main(&args[2]));
    }
    // An unprivileged image import, inside a user namespace mapped like a sandbox's.
    if verb == airlock_image::helper::HELPER_VERB && args.len() == 2 {
        return Some(airlock_image::helper::main());
    }
    // The egress proxy of one sandbox, supervised by its owner (crate::egress).
    // Arguments after the egress directory name listeners it inherited (egress::lazy).
    if verb == crate::wire::PROXY_VERB && args.len() >= 3 {
        unblock_signals();
        return Some(crate::egress::child::main(args));
    }
    None
}

/// A signal mask survives exec, and `run`/`up` block the terminal's signals for their own
/// handling before they start these processes: the sandbox (PID 1 forwards and the commands
/// receive them) and the proxy child start from an empty mask. The keeper does the same.
///
/// A keyboard signal (SIGINT, SIGQUIT) can still be pending here: it reached the process group
/// in the instant between fork and the child's `setpgid`, and was meant for airlock, which has
/// it too. It is taken (sigwait on a pending signal returns at once) before unblocking, or it
/// would kill this process as soon as the mask is cleared.
fn unblock_signals() {
    use nix::sys::signal::{SigSet, Signal};
    // sigpending(2) fails only on a bad address: nothing is then taken as pending.
    let pending = airlock_linux::sys::process::pending_signals().unwrap_or(0);
    for sig in [Signal::SIGINT, Signal::SIGQUIT] {
        if pending & (1u64 << (sig as i32 - 1)) != 0 {
            let mut only = SigSet::empty();
            only.add(sig);
            let _ = only.wait();
        }
    }
    let _ = SigSet::all().thread_unblock();
}

/// The init stage; returns in PID 1 only, once the guest has stopped.
pub fn init() -> i32 {
    // The confinement (with the compiled seccomp program) is prepared before the sandbox reports
    // `ready`: if the filter cannot be built, the start fails and nothing runs.
    match airlock_linux::init::run(confinements) {
        Ok((handoff, (user, root))) => {
            let options = guest_options(&handoff, user, root);
            airlock_guest::pid1::run(handoff.control, options)
        }
        // The host has the error through the start handshake and reports it (printing it here
        // too would interleave with the host's own report on the shared stderr).
        Err(_) => 70,
    }
}

/// Every sandbox process's `oom_score_adj`: the OOM killer takes them before the guest's PID 1
/// (which keeps the value airlock had), so a sandbox that fills its memory loses the process,
/// not its control channel.
const SANDBOX_OOM_SCORE_ADJ: u16 = 500;

/// Sandbox-user processes: every capability dropped, `no_new_privs`, the filter. `--root`
/// processes: capabilities of the sandbox's user namespace kept, same `no_new_privs` and filter.
fn confinements() -> Result<(Confinement, Confinement), String> {
    let filter = airlock_linux::seccomp::sandbox_filter().map_err(|e| e.to_string())?;
    let user = Confinement {
        drop_capabilities: true,
        no_new_privs: true,
        withhold_setfcap: false,
        oom_score_adj: Some(SANDBOX_OOM_SCORE_ADJ),
        seccomp: Some(filter.clone()),
        mount_ns: None,
    };
    let root = Confinement {
        drop_capabilities: false,
        no_new_privs: true,
        // File capabilities set in a workspace would reach the host (issue 9.6).
        withhold_setfcap: true,
        oom_score_adj: Some(SANDBOX_OOM_SCORE_ADJ),
        seccomp: Some(filter),
        mount_ns: None,
    };
    Ok((user, root))
}

fn guest_options(h: &Handoff, user: Confinement, mut root: Confinement) -> GuestOptions {
    // A root invoker's `--root` processes join the root view, where what they write to a
    // workspace belongs to the invoker (issue 9.5).
    root.mount_ns = h
        .root_view
        .as_ref()
        .and_then(|fd| fd.try_clone().ok())
        .map(std::sync::Arc::new);
    GuestOptions {
        key: airlock_protocol::Key::from_bytes(h.key),
        env_base: h.spec.env.clone(),
        sandbox_user: SandboxUser {
            name: airlock_linux::rootfs::sandbox_user_name(&h.spec.user.name),
            uid: h.sandbox_uid,
            gid: h.sandbox_gid,
            home: h.spec.user.home.to_string_lossy().into_owned(),
        },
        root_allowed: h.root_allowed,
        confinement: user,
        root_confinement: root,
        relays: h
            .spec
            .egress
            .iter()
            .flat_map(|e| e.relays.iter())
            .map(|r| airlock_guest::Relay {
                port: r.port,
                socket: std::path::Path::new(airlock_linux::spec::EGRESS_DIR).join(&r.socket),
                handoff: r.handoff,
            })
            .collect(),
    }
}
