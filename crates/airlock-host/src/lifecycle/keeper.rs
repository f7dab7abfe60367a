//! `airlock __keeper <state dir>`: the host-side owner of one persistent sandbox.
//!
//! Order of operations:
//! 1. Parked ([`await_go_ahead`]): `up` spawns the keeper as soon as it knows the sandbox's
//!    name, before validating anything, so that the exec and start-up of this binary overlap
//!    the validation and the records `up` writes. `setsid` at once (detached from the
//!    terminal and process group of `up`, so Ctrl+C or a closed terminal never reach it);
//!    then it waits on its stdin (a pipe from `up`) and touches nothing: no file, no
//!    directory, no cgroup. One go-ahead byte, sent once `up` has written the start request,
//!    lets it go on: stderr to `keeper.log`, stdin to `/dev/null`. End of file instead (a
//!    failed validation, a reused sandbox, `up` killed) and it exits, having done nothing.
//! 2. Read the start request; create the cgroup (no janitor process: if the keeper dies, the
//!    cgroup it leaves is removed by the next `down`, `clean` or `up`, see `Cgroup::orphaned`);
//!    start the sandbox *from the main thread* (the init stage's PDEATHSIG is bound to the
//!    spawning thread, so the sandbox dies with the keeper).
//! 3. Listen on `<runtime dir>/control.sock` (the directory is 0700), report `Ready` on stdout
//!    (a pipe to `up`), then point stdout at the log. If nobody reads the report, `up` is gone
//!    before the sandbox was recorded ready: the keeper tears it down.
//! 4. Serve (once idle for `sys::mem::IDLE_AFTER`, giving back the binary's pages start-up
//!    and clients mapped: `sys::mem::release_exe_pages`) until SIGTERM/SIGINT/SIGHUP (orderly stop by `down`) or until the guest's PID 1
//!    exits (an exit note says so, for `status`). Each client must have this uid (peer
//!    credentials); its first byte picks the mode: `S` hands the connection itself to PID 1 over
//!    the control socket (the guest then runs the HMAC handshake with the client, who read the
//!    per-epoch key from the 0600 file), `D` runs one request detached, owned by the keeper,
//!    `P` publishes, unpublishes or lists forwarded ports (`super::ports`: loopback
//!    listeners owned by the keeper, closed when it stops).
//! 5. Teardown: remove the socket, destroy the sandbox (bounded), destroy the cgroup, stop
//!    the egress proxy.
//!
//! Egress (crate::egress): before the sandbox, the keeper writes the CA bundle and binds the
//! proxy's sockets itself; the proxy child (`airlock __proxy`) starts only at the first
//! connection on one of them, and again at the next connection after it exited
//! (`crate::egress::on_demand`: an idle sandbox that made no request runs no proxy). The
//! serve loop polls those sockets while no child runs and the child's pidfd while one does; it
//! has no timer besides the idle page release. Mode `R` (`policy allow|deny`, `secret
//! set|rm`) makes a running proxy reload them and answers `ok` or `error` (a `KeeperAnswer`
//! JSON line); with no proxy running it answers `ok` at once, since the next start loads the
//! configuration in force. Starts happen on the main thread only, because the child's
//! `PR_SET_PDEATHSIG` follows the thread that spawned it.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_linux::host::{Sandbox, StartError, StartOptions};
use airlock_protocol::{ExecRequest, Key};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use rustix::event::{poll, PollFd, PollFlags};

use super::backend::{with_socket_path, EXIT_NOTE, SOCKET, START_WARNINGS};
use super::ports::Forwards;
pub(crate) use super::waiting::CLIENT_PREAMBLE;
use super::waiting::{Accepted, Waiting};
pub(crate) use crate::egress::on_demand::SharedProxy;
use crate::egress::on_demand::{OnDemand, Wanted};
use crate::egress::supervisor::ProxySupervisor;
use crate::error::{ErrorKind, HostError};
use crate::run::limits::{self, RunCgroup};
use crate::run::start_error;
use crate::wire::{
    KeeperAnswer, KeeperOutcome, KeeperReport, StartRequest, MODE_DETACHED, MODE_PORTS,
    MODE_RELOAD, MODE_STREAM, START_FILE,
};

/// The byte `up` sends a parked keeper when it may start the sandbox (see the module docs).
pub const GO_AHEAD: u8 = b'g';

/// Step 1 of the module docs: waits for `up`'s go-ahead on stdin, then points stderr at the
/// sandbox's log and stdin at `/dev/null`. `Err(status)`: exit with it now, having done
/// nothing (end of file: `up` went on without this keeper; or the log cannot be opened, said
/// on stdout to the `up` that waits for the report).
pub fn await_go_ahead(state_dir: &Path) -> Result<(), i32> {
    let _ = rustix::process::setsid();
    let mut byte = [0u8; 1];
    let got = loop {
        match rustix::io::read(std::io::stdin(), &mut byte) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other,
        }
    };
    match got {
        Ok(1) if byte[0] == GO_AHEAD => {}
        // End of file (or anything else): not to be started; nothing was done.
        _ => return Err(0),
    }
    let log_path = state_dir.join(super::backend::LOG_FILE);
    let opened = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&log_path)
        .and_then(|log| rustix::stdio::dup2_stderr(&log).map_err(Into::into))
        .and_then(|()| {
            let null = fs::File::open("/dev/null")?;
            rustix::stdio::dup2_stdin(&null).map_err(Into::into)
        });
    if let Err(e) = opened {
        let _ = report_line(&failed(
            "keeper.log",
            format!("cannot open {}: {e}", log_path.display()),
        ));
        return Err(1);
    }
    Ok(())
}

/// Entry point of the hidden verb, once the go-ahead came ([`await_go_ahead`]); returns the
/// exit status.
pub fn main(args: &[OsString]) -> i32 {
    // Already its own session: `await_go_ahead` ran `setsid` first.
    // The mask survives exec: `up` blocks SIGINT for its Ctrl+C handling, and nothing of
    // that may reach the sandbox's processes.
    let _ = SigSet::all().thread_unblock();
    let Some(state_dir) = args.get(2).map(PathBuf::from) else {
        eprintln!("airlock keeper: missing state directory");
        return 2;
    };
    let (sandbox, cgroup, listener, guest_pid, mut egress) = match start(&state_dir) {
        Ok(started) => started,
        Err(report) => {
            let _ = report_line(&report);
            return 1;
        }
    };
    let started = sandbox.timings;
    // Written before the report, so the `up` that reads it finds the file; never one left
    // from an earlier start.
    let _ = match cgroup.skipped_warning() {
        Some(warning) => fs::write(state_dir.join(START_WARNINGS), format!("{warning}\n")),
        None => fs::remove_file(state_dir.join(START_WARNINGS)),
    };
    let report = KeeperReport::new(KeeperOutcome::Ready {
        guest_pid,
        init_pid: sandbox.init_pid(),
        timings: vec![
            ("backend.prepare".into(), ms(started.prepare)),
            ("backend.namespaces".into(), ms(started.namespaces)),
            ("backend.maps".into(), ms(started.maps)),
            ("backend.rootfs".into(), ms(started.rootfs)),
        ],
    });
    let reported = report_line(&report)
        .and_then(|()| rustix::stdio::dup2_stdout(std::io::stderr()).map_err(Into::into));
    let proxy: SharedProxy = Arc::new(Mutex::new(None));
    let served = Served {
        sandbox: &sandbox,
        listener: &listener,
        guest_pid,
        proxy: egress.is_some().then(|| Arc::clone(&proxy)),
        cgroup: &cgroup,
        state_dir: &state_dir,
    };
    let note = match reported {
        Ok(()) => serve(&served, &mut egress),
        Err(e) => {
            eprintln!(
                "airlock keeper: `up` went away before the sandbox was recorded ({e}); stopping it"
            );
            None
        }
    };
    drop(served);
    if let Some(note) = &note {
        let _ = fs::write(state_dir.join(EXIT_NOTE), format!("{note}\n"));
    }
    // The proxy's exit overlaps the sandbox's teardown (else the cgroup's destroy finds it
    // alive, kills it and polls until it is gone, after the sandbox).
    if let Some(sup) = proxy.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        sup.begin_stop();
    }
    teardown(sandbox, cgroup, &listener, || {
        // Stopped above: this reaps it while the kernel tears the sandbox down, and before the
        // cgroup's removal, which would otherwise find it alive and kill it.
        drop(proxy.lock().unwrap_or_else(|p| p.into_inner()).take());
        drop(egress);
    });
    i32::from(note.is_some())
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn report_line(report: &KeeperReport) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(report).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line)?;
    out.flush()
}

/// A failure of the keeper's own steps (its start request, its socket, the proxy), for `up`.
pub(crate) fn failed(code: &'static str, message: impl Into<String>) -> KeeperReport {
    reported(HostError::internal(code, message).with_hint(
        "read the keeper's log in the sandbox's state directory; if it shows nothing, this is a bug in airlock",
    ))
}

/// A classified host failure (the limits, the sandbox's start), with its own code and hint.
pub(crate) fn reported(e: HostError) -> KeeperReport {
    KeeperReport::new(KeeperOutcome::Failed(crate::error::to_start_failure(e)))
}

type Started = (Sandbox, RunCgroup, UnixListener, u32, Option<OnDemand>);

fn start(state_dir: &Path) -> Result<Started, KeeperReport> {
    let path = state_dir.join(START_FILE);
    let bytes = fs::read(&path).map_err(|e| {
        failed(
            "keeper.start_request",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    // Written by the `up` that spawned us, normally this very binary; one replaced in between
    // is refused rather than misread.
    let req: StartRequest = crate::wire::decode(&bytes).map_err(|e| {
        failed(
            "keeper.start_request",
            format!("{} is not a start request: {e}", path.display()),
        )
    })?;
    // The cgroup first: the proxy, once started, runs inside the sandbox's limits (9.10).
    // No janitor process: should the keeper be killed, PDEATHSIG ends the sandbox and the next
    // `down`, `clean` or `up` removes the orphaned cgroup (its owner mark names the keeper).
    let mut cgroup =
        limits::prepare_without_janitor(&req.spec, keeper_warning).map_err(reported)?;
    let egress = match bind_egress(&req) {
        Ok(egress) => egress,
        Err(report) => {
            cgroup.destroy();
            return Err(report);
        }
    };
    let opts = StartOptions {
        exe: PathBuf::from("/proc/self/exe"),
        sandboxes_dir: req.runtime_dir.clone(),
        // `exec --root` can reach a persistent sandbox at any time.
        root_view: true,
        // `exec` reads it to authenticate its streams.
        key_file: true,
        // The runtime root: `runtime_dir` is `<runtime>/sandboxes/<name>`.
        scan_cache: req
            .runtime_dir
            .parent()
            .and_then(Path::parent)
            .map(|runtime| runtime.join(airlock_linux::idmounts::SCAN_CACHE_FILE)),
    };
    let started = cgroup
        .join_fds()
        .map_err(StartError::Limits)
        .and_then(|join| Sandbox::start(&req.spec, &opts, join.as_ref()));
    let sandbox = match started {
        Ok(s) => s,
        Err(e) => {
            cgroup.destroy();
            return Err(reported(start_error(e)));
        }
    };
    let socket = req.runtime_dir.join(SOCKET);
    let _ = fs::remove_file(&socket);
    let listener = with_socket_path(&socket, |p| UnixListener::bind(p))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| {
            failed(
                "keeper.listen",
                format!("cannot listen on {}: {e}", socket.display()),
            )
        });
    let guest = guest_pid(sandbox.init_pid()).ok_or_else(|| {
        failed(
            "keeper.guest",
            "the sandbox's PID 1 cannot be found on the host",
        )
    });
    match (listener, guest) {
        (Ok(listener), Ok(pid)) => Ok((sandbox, cgroup, listener, pid, egress)),
        (Err(report), _) | (_, Err(report)) => {
            teardown_parts(sandbox, cgroup, || ());
            Err(report)
        }
    }
}

/// Creates the egress directory (CA bundle) and binds the proxy's sockets, when the sandbox
/// has egress; the proxy child starts at the first connection.
fn bind_egress(req: &StartRequest) -> Result<Option<OnDemand>, KeeperReport> {
    let Some(egress) = &req.egress else {
        return Ok(None);
    };
    let lookup = |k: &str| {
        egress
            .env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| OsString::from(v))
    };
    let roots = airlock_config::Roots::from_env(lookup)
        .map_err(|e| failed("keeper.roots", e.to_string()))?;
    let image_root = req.spec.image.root_dir().to_path_buf();
    crate::egress::materialize(&egress.dir, &roots, &image_root).map_err(reported)?;
    let sockets = crate::egress::lazy::socket_names(&req.spec);
    OnDemand::bind(egress.clone(), &sockets)
        .map(Some)
        .map_err(reported)
}

/// Answers a reload request: `ok` once the proxy applies the current policy and secrets.
fn reload_on_demand(mut conn: UnixStream, proxy: Option<&SharedProxy>) -> std::io::Result<()> {
    let answer = match proxy {
        None => KeeperAnswer::Error {
            message: "this sandbox has no egress proxy".to_owned(),
        },
        Some(proxy) => match proxy.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            // No proxy runs: the next connection starts one, which loads the current
            // configuration by itself (the main thread starts it: PDEATHSIG binds the child to
            // the thread that spawned it). So does a dead one's successor.
            None => KeeperAnswer::Ok,
            Some(sup) => reload_supervised(sup),
        },
    };
    send_answer(&mut conn, &answer)
}

/// One [`KeeperAnswer`] line to a client.
fn send_answer(conn: &mut UnixStream, answer: &KeeperAnswer) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(answer).map_err(std::io::Error::other)?;
    line.push(b'\n');
    conn.write_all(&line)
}

// The `vm` keeper (`crate::vm::keeper`) still starts its proxy with the sandbox and restarts
// it on its serve loop's tick: the helpers below are its (this keeper's is on demand).

/// Creates the egress directory (CA bundle) and starts the proxy child, when the sandbox has one.
pub(crate) fn start_egress(req: &StartRequest) -> Result<SharedProxy, KeeperReport> {
    let Some(egress) = &req.egress else {
        return Ok(Arc::new(Mutex::new(None)));
    };
    let lookup = |k: &str| {
        egress
            .env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| OsString::from(v))
    };
    let roots = airlock_config::Roots::from_env(lookup)
        .map_err(|e| failed("keeper.roots", e.to_string()))?;
    let image_root = req.spec.image.root_dir().to_path_buf();
    crate::egress::materialize(&egress.dir, &roots, &image_root).map_err(reported)?;
    let proxy = ProxySupervisor::launch(egress.clone()).map_err(|e| reported(egress_error(e)))?;
    Ok(Arc::new(Mutex::new(Some(proxy))))
}

/// Moves the proxy child (if any) into the sandbox's cgroup.
pub(crate) fn join_proxy(proxy: &SharedProxy, cgroup: &RunCgroup) -> Result<(), HostError> {
    let slot = proxy.lock().unwrap_or_else(|p| p.into_inner());
    match slot.as_ref() {
        Some(sup) => cgroup.join(sup.pid()).map_err(|e| {
            HostError::new(
                ErrorKind::BackendUnavailable,
                "backend.cgroup",
                format!("cannot move the egress proxy into the sandbox's cgroup: {e}"),
            )
            .with_hint("run `airlock doctor` to see how to delegate cgroups to this user")
        }),
        None => Ok(()),
    }
}

/// Waits for the proxy started by [`start_egress`] to serve.
pub(crate) fn proxy_ready(proxy: &SharedProxy) -> Result<(), KeeperReport> {
    let mut slot = proxy.lock().unwrap_or_else(|p| p.into_inner());
    match slot.as_mut() {
        Some(sup) => sup.wait_ready().map_err(|e| reported(egress_error(e))),
        None => Ok(()),
    }
}

/// Restarts the proxy child when it died (the sandbox is offline meanwhile: fail closed); the
/// new child joins the sandbox's cgroup, or is stopped again (and retried) when it cannot.
pub(crate) fn supervise(proxy: &SharedProxy, cgroup: &RunCgroup) {
    // A reload in progress holds the lock (bounded by the supervisor's answer timeout): never
    // stall the serve loop behind it; the next tick looks again.
    let mut slot = match proxy.try_lock() {
        Ok(slot) => slot,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    if let Some(sup) = slot.as_mut() {
        match sup.restart_if_dead() {
            Ok(true) => match cgroup.join(sup.pid()) {
                Ok(()) => eprintln!(
                    "airlock keeper: the egress proxy died; restarted it (restart {})",
                    sup.restarts
                ),
                Err(e) => {
                    eprintln!(
                        "airlock keeper: the restarted egress proxy cannot join the sandbox's \
                         cgroup ({e}); stopping it"
                    );
                    sup.begin_stop();
                }
            },
            Ok(false) => {}
            // Retried every tick; logged on the 1st, 2nd, 4th, 8th… failure in a row.
            Err(e) if sup.failed_restarts.is_power_of_two() => eprintln!(
                "airlock keeper: the egress proxy is down (attempt {}): {e}",
                sup.failed_restarts
            ),
            Err(_) => {}
        }
    }
}

/// Answers a reload request: `ok` once the proxy applies the current policy and secrets.
pub(crate) fn reload(mut conn: UnixStream, proxy: &SharedProxy) -> std::io::Result<()> {
    let answer = {
        let mut slot = proxy.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_mut() {
            None => KeeperAnswer::Error {
                message: "this sandbox has no egress proxy".to_owned(),
            },
            // A dead proxy is restarted by the main thread (PDEATHSIG binds the child to the
            // thread that spawned it) and then loads the current configuration by itself.
            Some(sup) => reload_supervised(sup),
        }
    };
    send_answer(&mut conn, &answer)
}

/// A running proxy reloads the current policy and secrets; a dead one's successor loads them
/// when it starts, so there is nothing to do for it.
fn reload_supervised(sup: &mut ProxySupervisor) -> KeeperAnswer {
    if !sup.is_alive() {
        return KeeperAnswer::Ok;
    }
    match sup.reload() {
        Ok(()) => KeeperAnswer::Ok,
        Err(e) => KeeperAnswer::Error {
            message: e.to_string(),
        },
    }
}

fn egress_error(e: crate::egress::supervisor::SupervisorError) -> HostError {
    HostError::new(ErrorKind::Failed, "egress.start", e.to_string())
        .with_hint("check the network configuration with `airlock plan`")
}

/// PID 1 is the init stage's only child.
fn guest_pid(init_pid: u32) -> Option<u32> {
    let tasks = fs::read_dir(format!("/proc/{init_pid}/task")).ok()?;
    for task in tasks.flatten() {
        let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
        if let Some(pid) = children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
        {
            return Some(pid);
        }
    }
    None
}

/// What the serve loop works with (besides the egress proxy it starts).
struct Served<'a> {
    sandbox: &'a Sandbox,
    listener: &'a UnixListener,
    guest_pid: u32,
    /// The running proxy child; `None` when the sandbox has no egress.
    proxy: Option<SharedProxy>,
    cgroup: &'a RunCgroup,
    state_dir: &'a Path,
}

pub(crate) const SIGNALS_FAILED: &str = "the keeper could not set up its signal handling";

/// Blocks the signals that stop a keeper (from here on, also in every thread it starts) and
/// returns a descriptor that reads them; `None` when either step fails.
pub(crate) fn stop_signals() -> Option<SignalFd> {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        mask.add(s);
    }
    mask.thread_block().ok()?;
    SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).ok()
}

/// Serves clients until asked to stop (`None`) or PID 1 exits (`Some(note)`).
fn serve(served: &Served<'_>, egress: &mut Option<OnDemand>) -> Option<String> {
    let guest_pid = served.guest_pid;
    // The sandbox already started, so its processes did not inherit the mask.
    let Some(signals) = stop_signals() else {
        return Some(SIGNALS_FAILED.into());
    };
    let Some(pid1) = airlock_linux::pidfd::open(guest_pid as i32) else {
        return Some(format!("the sandbox's PID 1 (host pid {guest_pid}) exited"));
    };
    let control = match served.sandbox.control().map(|c| c.try_clone_to_owned()) {
        Some(Ok(fd)) => Arc::new(fd),
        Some(Err(_)) | None => return Some("the sandbox's control channel is closed".into()),
    };
    let key = *served.sandbox.key();
    // Published ports live exactly as long as this loop: dropping the table closes them.
    let forwards = Arc::new(Forwards::new(Arc::clone(&control), key, served.state_dir));
    let clients = Clients {
        control,
        key,
        proxy: served.proxy.clone(),
        forwards,
    };
    let events = Events {
        signals: &signals,
        pid1: &pid1,
    };
    match serve_loop(served, &clients, &events, egress) {
        Stop::Asked => None,
        Stop::Note(note) => Some(note),
    }
}

/// The descriptors of the serve loop besides the control socket and the egress proxy's.
struct Events<'a> {
    signals: &'a SignalFd,
    pid1: &'a OwnedFd,
}

/// Why the serve loop ended.
enum Stop {
    /// A signal asked the keeper to stop (`down`).
    Asked,
    /// Something else ended it: the note `status` shows.
    Note(String),
}

fn serve_loop(
    served: &Served<'_>,
    clients: &Clients,
    events: &Events<'_>,
    egress: &mut Option<OnDemand>,
) -> Stop {
    use airlock_linux::sys::mem::{release_exe_pages, IDLE_AFTER};
    // Pages of the binary mapped since the last release (start-up, a client's code), and the
    // serve loop's last event.
    let mut touched = true;
    let mut last_event = Instant::now();
    // Clients whose mode byte has not arrived yet, polled here with the rest.
    let mut waiting = Waiting::default();
    loop {
        let mut timeout = None;
        if touched {
            match IDLE_AFTER.checked_sub(last_event.elapsed()) {
                Some(left) if !left.is_zero() => timeout = Some(left),
                _ => {
                    release_exe_pages();
                    touched = false;
                }
            }
        }
        let wanted = egress.as_ref().map(OnDemand::wanted);
        let mut fds = vec![
            PollFd::new(served.listener, PollFlags::IN),
            PollFd::new(events.signals, PollFlags::IN),
            PollFd::new(events.pid1, PollFlags::IN),
        ];
        match &wanted {
            Some(Wanted::Connection(listeners)) => {
                fds.extend(listeners.iter().map(|l| PollFd::new(l, PollFlags::IN)));
            }
            Some(Wanted::Exit(pidfd)) => fds.push(PollFd::new(pidfd, PollFlags::IN)),
            Some(Wanted::Pause(left)) => timeout = Some(timeout.map_or(*left, |t| t.min(*left))),
            None => {}
        }
        // Clients whose mode byte has not arrived yet come last; the loop also wakes when the
        // first one's time is up.
        let waiting_from = fds.len();
        fds.extend(waiting.poll_fds());
        if let Some(deadline) = waiting.next_deadline() {
            let left = deadline.saturating_duration_since(Instant::now());
            timeout = Some(timeout.map_or(left, |t| t.min(left)));
        }
        let timeout = timeout.map(|t| rustix::event::Timespec {
            tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(t.subsec_nanos()),
        });
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Stop::Note(format!("the keeper failed to wait for events: {e}")),
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        drop(wanted);
        if ready[2] {
            return Stop::Note(pid1_exited(served));
        }
        if ready[1] {
            let _ = events.signals.read_signal();
            return Stop::Asked;
        }
        let now = Instant::now();
        let control = clients.control.as_fd();
        let mut serve = waiting.serve_ready(&ready[waiting_from..], control, now);
        if ready[0] {
            serve.extend(waiting.accept_all(served.listener, control, now));
        }
        let for_egress = ready[3..waiting_from].iter().any(|r| *r);
        if let (Some(egress), Some(slot)) = (egress.as_mut(), &served.proxy) {
            egress.step(for_egress, slot, served.cgroup);
        }
        if ready[0] || for_egress || ready[waiting_from..].contains(&true) {
            touched = true;
            last_event = now;
        }
        for accepted in serve {
            clients.serve_on_thread(accepted);
        }
    }
}

/// The exit note when the sandbox's PID 1 exited.
fn pid1_exited(served: &Served<'_>) -> String {
    let why = served
        .cgroup
        .out_of_memory()
        .map(|oom| format!(" ({oom})"))
        .unwrap_or_default();
    format!(
        "the sandbox's PID 1 (host pid {}) exited{why}; the keeper stopped the sandbox",
        served.guest_pid
    )
}

/// What a client connection may use.
struct Clients {
    control: Arc<OwnedFd>,
    key: [u8; 32],
    /// `None` when the sandbox has no egress.
    proxy: Option<SharedProxy>,
    forwards: Arc<Forwards>,
}

impl Clients {
    /// Serves a connection whose mode byte arrived on a thread of its own (see
    /// [`super::waiting`] for the ones the serve loop hands to PID 1 itself).
    fn serve_on_thread(&self, accepted: Accepted) {
        let control = Arc::clone(&self.control);
        let proxy = self.proxy.clone();
        let forwards = Arc::clone(&self.forwards);
        let key = self.key;
        std::thread::spawn(move || {
            let Accepted { conn, mode } = accepted;
            if let Err(e) = serve_mode(conn, mode, &control, key, proxy.as_ref(), &forwards) {
                eprintln!("airlock keeper: client dropped: {e}");
            }
        });
    }
}

fn serve_mode(
    conn: UnixStream,
    mode: u8,
    control: &OwnedFd,
    key: [u8; 32],
    proxy: Option<&SharedProxy>,
    forwards: &Forwards,
) -> std::io::Result<()> {
    if mode == MODE_STREAM {
        // PID 1's queue was full: wait for room here, off the serve loop.
        return airlock_protocol::send_stream(control.as_fd(), conn.as_fd())
            .map_err(std::io::Error::other);
    }
    conn.set_read_timeout(Some(CLIENT_PREAMBLE))?;
    match mode {
        MODE_DETACHED => run_detached(conn, control, key),
        MODE_RELOAD => reload_on_demand(conn, proxy),
        MODE_PORTS => forwards.serve_request(conn),
        other => Err(std::io::Error::other(format!(
            "unknown mode byte {other:#04x}"
        ))),
    }
}

/// Runs one request whose client does not wait: the keeper holds its stream (output discarded)
/// until the process ends, so it keeps running after `exec -d` returned. The client is told
/// `started` once the guest reports the process started, or `error` when it could not.
fn run_detached(conn: UnixStream, control: &OwnedFd, key: [u8; 32]) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let stream = airlock_protocol::open_stream(control.as_fd()).map_err(std::io::Error::other)?;
    drop(reader);
    detached_on(conn, &line, stream, key)
}

/// [`run_detached`] on a stream to the guest the caller opened (the `vm` backend's come
/// through its channel multiplexer), once the request `line` was read from the client.
pub(crate) fn detached_on(
    mut conn: UnixStream,
    line: &str,
    mut stream: UnixStream,
    key: [u8; 32],
) -> std::io::Result<()> {
    use airlock_protocol::{host_handshake, read_packet, Message, Packet, VersionRange};
    let mut reply = |answer: KeeperAnswer| send_answer(&mut conn, &answer);
    let error = |message: String| KeeperAnswer::Error { message };
    let request: ExecRequest = match serde_json::from_str(line.trim()) {
        Ok(r) => r,
        Err(e) => return reply(error(format!("bad request: {e}"))),
    };
    if let Err(e) = host_handshake(&mut stream, &Key::from_bytes(key), VersionRange::CURRENT) {
        return reply(error(e.to_string()));
    }
    match start_detached(&mut stream, request) {
        Ok(pid) => reply(KeeperAnswer::Started { pid })?,
        Err(e) => return reply(error(e)),
    }
    // Hold the stream (discarding output) until the process reports its end.
    loop {
        match read_packet(&mut stream) {
            Ok(Some(Packet::Control(Message::Exited { .. } | Message::Signaled { .. })))
            | Ok(None)
            | Err(_) => return Ok(()),
            Ok(Some(_)) => {}
        }
    }
}

/// Sends `request` with its stdin already closed over an authenticated stream and returns the
/// process id the guest reports, or why it did not start. A guest that refuses the request,
/// or runs a command that ends at once, answers and closes its end possibly before
/// `StdinClosed` is written: that write then fails (EPIPE) while the guest's answer is already
/// waiting to be read, so the answer is read first and the write's failure reported only when
/// there is none.
fn start_detached(stream: &mut (impl Read + Write), request: ExecRequest) -> Result<u32, String> {
    use airlock_protocol::{read_packet, write_packet, Message, Packet};
    write_packet(stream, &Packet::Control(Message::Exec(request))).map_err(|e| e.to_string())?;
    let stdin_closed = write_packet(stream, &Packet::Control(Message::StdinClosed));
    match read_packet(stream) {
        // Started: a stream closed early only means the process already ended (`true`).
        Ok(Some(Packet::Control(Message::Started { pid }))) => Ok(pid),
        Ok(Some(Packet::Control(Message::Error(e)))) => Err(e.message),
        Ok(Some(other)) => Err(format!("unexpected {}", other.name())),
        Ok(None) => Err(match stdin_closed {
            Ok(()) => "the sandbox closed the stream".to_owned(),
            Err(e) => e.to_string(),
        }),
        Err(e) => Err(e.to_string()),
    }
}

fn teardown(
    sandbox: Sandbox,
    cgroup: RunCgroup,
    listener: &UnixListener,
    meanwhile: impl FnOnce(),
) {
    if let Ok(addr) = listener.local_addr() {
        if let Some(path) = addr.as_pathname() {
            let _ = fs::remove_file(path);
        }
    }
    teardown_parts(sandbox, cgroup, meanwhile);
}

/// A warning of the limits code, into the keeper's log (its stderr).
pub(crate) fn keeper_warning(message: &str) {
    eprintln!("airlock: warning: {message}");
}

/// Ends the sandbox as a finished `run` does (`Sandbox::kill_with`): PID 1 and the init stage
/// SIGKILLed together. Nothing more is asked of the guest, and PID 1's own shutdown (woken by
/// the control socket's close) would only SIGKILL what it started and exit, one wake-up and
/// one serial step later. `meanwhile` runs while the kernel tears the sandbox down; the cgroup
/// goes last.
fn teardown_parts(sandbox: Sandbox, mut cgroup: RunCgroup, meanwhile: impl FnOnce()) {
    if let Err(e) = sandbox.kill_with(meanwhile) {
        eprintln!("airlock keeper: {e}");
    }
    cgroup.destroy();
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_protocol::{read_packet, write_packet, ErrorCode, Message, Packet};

    /// The guest's side of a detached request: it reads the request, answers with `answer`
    /// and closes its end before the keeper sent `StdinClosed` (what a fast guest does under
    /// load); returns what the keeper makes of it.
    fn answered_then_closed(answer: Message) -> Result<u32, String> {
        let (mut keeper, mut guest) = UnixStream::pair().unwrap();
        let request = ExecRequest {
            argv: vec!["no-such-command-anywhere".into()],
            env: Default::default(),
            cwd: None,
            user: airlock_protocol::ExecUser::Sandbox,
            tty: None,
        };
        // The answer is queued and the guest's end closed before the keeper writes anything
        // after its request, so the keeper's second write is the one that meets a closed peer.
        let guest_side = std::thread::spawn(move || {
            let first = read_packet(&mut guest).unwrap();
            assert!(matches!(first, Some(Packet::Control(Message::Exec(_)))));
            write_packet(&mut guest, &Packet::Control(answer)).unwrap();
        });
        let mut gate = Gate {
            inner: &mut keeper,
            flushes: 0,
            before_second: Some(guest_side),
        };
        start_detached(&mut gate, request)
    }

    #[test]
    fn a_refusal_that_closes_the_stream_before_stdin_closed_is_reported_not_a_broken_pipe() {
        let err = answered_then_closed(Message::Error(airlock_protocol::RemoteError::new(
            ErrorCode::CommandNotFound,
            "no-such-command-anywhere: command not found",
        )))
        .unwrap_err();
        assert!(err.contains("no-such-command-anywhere"), "{err}");
    }

    #[test]
    fn a_command_that_ended_before_stdin_closed_was_sent_still_reports_its_pid() {
        assert_eq!(answered_then_closed(Message::Started { pid: 42 }), Ok(42));
    }

    /// Waits for the fake guest to answer and close before the second write goes out.
    struct Gate<'a> {
        inner: &'a mut UnixStream,
        flushes: usize,
        before_second: Option<std::thread::JoinHandle<()>>,
    }

    impl Read for Gate<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.inner.read(buf)
        }
    }

    impl Write for Gate<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.flushes == 1 {
                if let Some(guest) = self.before_second.take() {
                    guest.join().unwrap();
                }
            }
            self.inner.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.flushes += 1;
            self.inner.flush()
        }
    }
}
