//! The guest's PID 1.
//!
//! Order of operations in [`run`]:
//! 1. `PR_SET_DUMPABLE = 0` first, before any secret is in use: no sandbox process — not
//!    even one with the same uid — may ptrace PID 1, read its memory or open `/proc/1/fd/*`
//!    (where the control socket and the key would be reachable).
//! 2. Without `--root` processes, the capability bounding set emptied once (every process
//!    PID 1 starts drops it anyway; its threads and their children inherit the empty set).
//! 3. When not actually PID 1 (tests, or a runtime without a PID namespace), become a child
//!    subreaper so orphans are still re-parented to us and reaped.
//! 4. Install real handlers for `SIGCHLD`, `SIGTERM`, `SIGINT`, `SIGHUP` (a PID namespace's
//!    init only receives signals it has handlers for) feeding a self-pipe: `SIGCHLD` reaps
//!    every zombie, the others are forwarded to the process group of every process the guest
//!    started.
//! 5. Bind the loopback relays (egress proxy, host ports) before the first exec, so no sandbox
//!    process can take their ports.
//! 6. One event loop on the main thread polls the control socket, the signal pipe and the
//!    relay listeners with their handoff channels (`relay::Relays`, non-blocking): each stream
//!    descriptor received on the control socket is served on its own thread, and a
//!    byte-relayed connection gets its own threads while it lasts. An idle PID 1 is its main
//!    thread alone. After `sys::mem::IDLE_AFTER` without an event it gives back the binary's
//!    pages it mapped (`sys::mem::release_exe_pages`).
//! 7. When the control socket closes (the host is gone), kill every process group and
//!    return; as PID 1 of the namespace, exiting takes the whole sandbox down with it.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread;

use airlock_linux::sys::process::{install_signal_pipe, ProcessError};
use airlock_protocol::{recv_stream, FdPassError, VersionRange};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{getpid, DumpableBehavior, Signal};

use crate::children::Children;
use crate::exec::{self, Shared};
use crate::options::GuestOptions;

/// Why the guest could not start.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// A process attribute could not be set.
    #[error("prctl({option}) failed: {source}")]
    Prctl {
        /// The option.
        option: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The signal handlers could not be installed.
    #[error(transparent)]
    Signals(#[from] ProcessError),
    /// The control socket failed.
    #[error(transparent)]
    Control(#[from] FdPassError),
    /// A loopback relay could not be bound (the sandbox would be offline: refuse instead).
    #[error(transparent)]
    Relay(#[from] crate::relay::RelayError),
    /// Waiting for events failed.
    #[error("poll failed: {0}")]
    Poll(std::io::Error),
}

fn prctl(option: &'static str) -> impl FnOnce(Errno) -> GuestError {
    move |errno| GuestError::Prctl {
        option,
        source: errno.into(),
    }
}

/// Runs PID 1 until the control socket closes. Returns the process exit code: 0 after an
/// orderly shutdown, 70 when the guest could not start or lost its control socket.
pub fn run(control: OwnedFd, opts: GuestOptions) -> i32 {
    match serve(control, opts) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("airlock guest: {err}");
            70
        }
    }
}

fn serve(control: OwnedFd, opts: GuestOptions) -> Result<(), GuestError> {
    rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable)
        .map_err(prctl("PR_SET_DUMPABLE"))?;
    // Without `--root` processes every process PID 1 starts drops every capability: the
    // bounding set is emptied once here (unless the linux backend's init stage did, while the
    // host wrote the maps), on the thread every later thread descends from, so no spawn drops
    // it again (see `empty_bounding_set`). PID 1 itself never executes a program, the only
    // thing that set limits. Where it fails, each spawn drops it as before.
    if !opts.root_allowed && opts.confinement.drop_capabilities {
        let _ = airlock_linux::sys::process::empty_bounding_set();
    }
    let me = getpid();
    if !me.is_init() {
        rustix::process::set_child_subreaper(Some(me)).map_err(prctl("PR_SET_CHILD_SUBREAPER"))?;
    }
    let shared = Arc::new(Shared {
        opts,
        children: Children::default(),
        sessions: crate::session::Sessions::default(),
        setgroups_allowed: setgroups_allowed(),
    });
    let signals = install_signal_pipe(&[libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP])?;
    // Children that exited before the handler existed.
    shared.children.reap();
    // The relays own their ports before any sandbox process could bind them.
    let mut relays = crate::relay::start(&shared.opts.relays)?;
    let result = event_loop(&control, &signals, &mut relays, &shared);
    shared.children.signal_all(Signal::KILL);
    result
}

/// Serves every stream the host opens, the signals and the relays until the control socket
/// closes.
fn event_loop(
    control: &OwnedFd,
    signals: &OwnedFd,
    relays: &mut crate::relay::Relays,
    shared: &Arc<Shared>,
) -> Result<(), GuestError> {
    // Pages of the binary mapped since the last release (start-up, a request's code).
    let mut touched = true;
    let idle = airlock_linux::sys::mem::IDLE_AFTER;
    loop {
        let wants = relays.wants();
        let counts: Vec<usize> = wants.iter().map(Vec::len).collect();
        let mut fds = vec![
            PollFd::new(control, PollFlags::IN),
            PollFd::new(signals, PollFlags::IN),
        ];
        fds.extend(
            wants
                .iter()
                .flatten()
                .map(|(fd, flags)| PollFd::new(fd, *flags)),
        );
        let deadline = relays.timeout();
        let timeout = [touched.then_some(idle), deadline]
            .into_iter()
            .flatten()
            .min()
            .map(|t| rustix::event::Timespec {
                tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(t.subsec_nanos()),
            });
        let woke = match poll(&mut fds, timeout.as_ref()) {
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(GuestError::Poll(e.into())),
        };
        let revents: Vec<PollFlags> = fds.iter().map(PollFd::revents).collect();
        drop(fds);
        drop(wants);
        // A timeout expires a handoff channel's answer (`handle` checks its deadline).
        relays.handle(&counts, &revents[2..]);
        if woke == 0 {
            // Idle for a while: give back what start-up and the last requests mapped.
            if deadline.is_none() {
                airlock_linux::sys::mem::release_exe_pages();
                touched = false;
            }
            continue;
        }
        touched = true;
        let ready = [!revents[0].is_empty(), !revents[1].is_empty()];
        if ready[1] {
            handle_signals(signals, &shared.children);
        }
        if ready[0] && !accept_stream(control, shared)? {
            return Ok(());
        }
    }
}

/// Receives one stream descriptor and serves it on its own thread; `false` once the control
/// socket closed.
fn accept_stream(control: &OwnedFd, shared: &Arc<Shared>) -> Result<bool, GuestError> {
    match recv_stream(control.as_fd()) {
        Ok(Some(fd)) => {
            let mut stream = UnixStream::from(fd);
            // The challenge goes out first, so the client computes its proof while the thread
            // starts (~0.1 ms). It does not block: ~140 bytes into a stream nothing was
            // written to. A stream that cannot take it is dropped.
            let Ok(challenge) = airlock_protocol::guest_hello(&mut stream, VersionRange::CURRENT)
            else {
                return Ok(true);
            };
            let shared = Arc::clone(shared);
            // Threads count against the sandbox's pids limit: when none can be made, the
            // stream is dropped (its client sees it closed) and PID 1 keeps serving.
            let _ = thread::Builder::new().spawn(move || exec::serve(stream, challenge, &shared));
            Ok(true)
        }
        Ok(None) => Ok(false),
        // A malformed open request is dropped; the channel itself is still fine.
        Err(FdPassError::DescriptorCount { .. } | FdPassError::UnknownTag { .. }) => Ok(true),
        Err(err @ FdPassError::Syscall { .. }) => Err(err.into()),
    }
}

/// Drains what the signal pipe holds (it is readable: one read does not block): reaps on
/// `SIGCHLD`, forwards termination signals.
fn handle_signals(pipe: &OwnedFd, children: &Children) {
    let mut buf = [0u8; 64];
    let n = match rustix::io::read(pipe, &mut buf) {
        Ok(n) => n,
        Err(_) => return,
    };
    let mut reaped = false;
    for &byte in &buf[..n] {
        match i32::from(byte) {
            libc::SIGCHLD if !reaped => {
                children.reap();
                reaped = true;
            }
            libc::SIGCHLD => {}
            signal => {
                if let Some(signal) = Signal::from_named_raw(signal) {
                    children.signal_all(signal);
                }
            }
        }
    }
}

/// `setgroups(2)` is refused in a user namespace whose `/proc/self/setgroups` says `deny`
/// (unprivileged id maps); then supplementary groups are left as they are.
fn setgroups_allowed() -> bool {
    std::fs::read_to_string("/proc/self/setgroups").map_or(true, |text| text.trim() != "deny")
}
