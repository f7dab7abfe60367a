//! The owner process of a persistent `vm` sandbox: `airlock __keeper <state dir>` when the
//! state directory holds [`super::VM_START_FILE`].
//!
//! It keeps the contract of the `linux` keeper (`crate::lifecycle::keeper`), so the same
//! backend code proves, stops and removes it: `setsid`; the cgroup (limits of the guest's RAM
//! plus QEMU's overhead) and the egress proxy first; then QEMU, spawned from the main thread
//! (it dies with the keeper: `PR_SET_PDEATHSIG`) and inside the cgroup before its first
//! instruction; the epoch key in `<runtime>/<instance>/key` (0600) for `exec`; the control
//! socket; one `KeeperReport` line whose `guest_pid` and `init_pid` are QEMU's.
//!
//! Mode bytes: `S` opens a stream to the guest's PID 1 through the channel multiplexer and
//! joins it to the client (the guest runs the HMAC handshake with the client, as in a `linux`
//! sandbox), `D` runs a detached request, `R` reloads the proxy, `P` is refused (port
//! forwarding into a VM is not built).
//!
//! When QEMU exits on its own (the guest powered off) the keeper leaves an exit note
//! (`status`: `stopped`); when it was killed by a signal it leaves none, so `status` calls the
//! sandbox what it is, a crash: `stale`.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::SigSet;
use rustix::event::{poll, PollFd, PollFlags};

use super::{boot, cgroup_spec, BootPlace, Booted, VmStart, VM_START_FILE};
use crate::lifecycle::backend::{with_socket_path, EXIT_NOTE, SOCKET, START_WARNINGS};
use crate::lifecycle::keeper::{
    detached_on, failed, join_proxy, keeper_warning, ms, proxy_ready, reload, report_line,
    reported, start_egress, supervise, SharedProxy, CLIENT_PREAMBLE,
};
use crate::run::limits::{self, RunCgroup};
use crate::wire::{
    KeeperOutcome, KeeperReport, StartRequest, MODE_DETACHED, MODE_PORTS, MODE_RELOAD, MODE_STREAM,
    START_FILE,
};

/// The longest a boot may take before the keeper gives up (TCG on a loaded host is slow;
/// `up --timeout` bounds what `up` waits).
const BOOT_LIMIT: Duration = Duration::from_secs(600);

/// Whether the keeper of `state_dir` owns a VM.
pub fn is_vm(state_dir: &Path) -> bool {
    state_dir.join(VM_START_FILE).is_file()
}

struct Started {
    booted: Booted,
    cgroup: RunCgroup,
    listener: UnixListener,
    proxy: SharedProxy,
    boot_ms: u64,
}

/// Entry point; returns the exit status.
pub fn main(args: &[OsString]) -> i32 {
    // Already its own session: `crate::lifecycle::keeper::await_go_ahead` ran `setsid`.
    let _ = SigSet::all().thread_unblock();
    let Some(state_dir) = args.get(2).map(PathBuf::from) else {
        eprintln!("airlock keeper: missing state directory");
        return 2;
    };
    let mut started = match start(&state_dir) {
        Ok(started) => started,
        Err(report) => {
            let _ = report_line(&report);
            return 1;
        }
    };
    let _ = match started.cgroup.skipped_warning() {
        Some(warning) => fs::write(state_dir.join(START_WARNINGS), format!("{warning}\n")),
        None => fs::remove_file(state_dir.join(START_WARNINGS)),
    };
    let qemu = started.booted.machine.pid();
    let report = KeeperReport::new(KeeperOutcome::Ready {
        guest_pid: qemu,
        init_pid: qemu,
        timings: vec![
            ("backend.vm_boot".into(), started.boot_ms),
            (
                "backend.vm_guest_uptime".into(),
                started.booted.machine.hello.uptime_ms,
            ),
        ],
    });
    let reported = report_line(&report)
        .and_then(|()| rustix::stdio::dup2_stdout(std::io::stderr()).map_err(Into::into));
    let note = match reported {
        Ok(()) => serve(&mut started),
        Err(e) => {
            eprintln!(
                "airlock keeper: `up` went away before the VM was recorded ({e}); stopping it"
            );
            None
        }
    };
    if let Some(note) = &note {
        let _ = fs::write(state_dir.join(EXIT_NOTE), format!("{note}\n"));
    }
    teardown(started);
    i32::from(note.is_some())
}

fn start(state_dir: &Path) -> Result<Started, KeeperReport> {
    let t0 = Instant::now();
    let read = |name: &str| {
        let path = state_dir.join(name);
        fs::read(&path).map_err(|e| {
            failed(
                "keeper.start_request",
                format!("cannot read {}: {e}", path.display()),
            )
        })
    };
    let req: StartRequest = crate::wire::decode(&read(START_FILE)?).map_err(|e| {
        failed(
            "keeper.start_request",
            format!("{START_FILE} is not a start request: {e}"),
        )
    })?;
    let vm: VmStart = serde_json::from_slice(&read(VM_START_FILE)?).map_err(|e| {
        failed(
            "keeper.start_request",
            format!("{VM_START_FILE} is not a vm start request: {e}"),
        )
    })?;
    let mut cgroup = limits::prepare_without_janitor(&cgroup_spec(&req.spec, &vm), keeper_warning)
        .map_err(reported)?;
    let proxy = match start_egress(&req).and_then(|proxy| {
        join_proxy(&proxy, &cgroup).map_err(reported)?;
        Ok(proxy)
    }) {
        Ok(proxy) => proxy,
        Err(report) => {
            cgroup.destroy();
            return Err(report);
        }
    };
    match boot_and_listen(&req, &vm, &cgroup, &proxy) {
        Ok((booted, listener)) => Ok(Started {
            booted,
            cgroup,
            listener,
            proxy,
            boot_ms: ms(t0.elapsed()),
        }),
        Err(report) => {
            cgroup.destroy();
            Err(report)
        }
    }
}

fn boot_and_listen(
    req: &StartRequest,
    vm: &VmStart,
    cgroup: &RunCgroup,
    proxy: &SharedProxy,
) -> Result<(Booted, UnixListener), KeeperReport> {
    let instance = req.runtime_dir.join(&req.spec.id);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&instance)
        .map_err(|e| {
            failed(
                "keeper.runtime",
                format!("cannot create {}: {e}", instance.display()),
            )
        })?;
    let join = cgroup.join_fds().map_err(|e| {
        reported(crate::run::start_error(
            airlock_linux::host::StartError::Limits(e),
        ))
    })?;
    proxy_ready(proxy)?;
    let egress_socket = req
        .egress
        .as_ref()
        .map(|e| e.dir.join(crate::egress::PROXY_SOCKET));
    let place = BootPlace {
        dir: &instance,
        join: join.as_ref().map(|j| j.raw()).unwrap_or_default(),
        egress_socket,
    };
    let booted = boot(&req.spec, vm, place, Instant::now() + BOOT_LIMIT).map_err(reported)?;
    drop(join);
    write_key(&instance.join("key"), &booted.key)
        .map_err(|e| failed("keeper.key", format!("cannot write the epoch key: {e}")))?;
    let socket = req.runtime_dir.join(SOCKET);
    let _ = fs::remove_file(&socket);
    let listener = with_socket_path(&socket, |p| UnixListener::bind(p))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| {
            failed(
                "keeper.listen",
                format!("cannot listen on {}: {e}", socket.display()),
            )
        })?;
    Ok((booted, listener))
}

fn write_key(path: &Path, key: &[u8; 32]) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(key)
}

/// Serves clients until asked to stop (`None`) or QEMU exits (`Some(note)`, or `None` when a
/// signal killed it: a crash, left for `status` to call `stale`).
fn serve(started: &mut Started) -> Option<String> {
    let Some(signals) = crate::lifecycle::keeper::stop_signals() else {
        return Some(crate::lifecycle::keeper::SIGNALS_FAILED.into());
    };
    let qemu = started.booted.machine.pid();
    let Some(monitor) = airlock_linux::pidfd::open(qemu as i32) else {
        return Some(format!("the VM's monitor (host pid {qemu}) exited"));
    };
    loop {
        let mut fds = [
            PollFd::new(&started.listener, PollFlags::IN),
            PollFd::new(&signals, PollFlags::IN),
            PollFd::new(&monitor, PollFlags::IN),
        ];
        let tick = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 500_000_000,
        };
        match poll(&mut fds, Some(&tick)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Some(format!("the keeper failed to wait for events: {e}")),
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        if ready[2] {
            return monitor_exit_note(started, qemu);
        }
        if ready[1] {
            let _ = signals.read_signal();
            return None;
        }
        if ready[0] {
            accept_all(started);
        }
        supervise(&started.proxy, &started.cgroup);
    }
}

/// What `status` is told when QEMU ended: a note when it exited by itself, none (a crash,
/// `stale`) when a signal killed it.
fn monitor_exit_note(started: &mut Started, qemu: u32) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let status = loop {
        if let Some(status) = started.booted.machine.exited() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    match status {
        Some(status) if status.signal().is_some() => {
            eprintln!(
                "airlock keeper: the VM's monitor (host pid {qemu}) was killed ({status}); \
                 stopping without an exit note: the sandbox is stale"
            );
            None
        }
        Some(status) => Some(format!(
            "the VM's monitor (host pid {qemu}) exited ({status}); the keeper stopped the sandbox"
        )),
        None => Some(format!("the VM's monitor (host pid {qemu}) ended")),
    }
}

fn accept_all(started: &Started) {
    loop {
        let conn = match started.listener.accept() {
            Ok((conn, _)) => conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => {
                eprintln!("airlock keeper: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                return;
            }
        };
        // One thread per client, as in the linux keeper: a slow client never holds the loop.
        let mux = started.booted.machine.mux();
        let key = started.booted.key;
        let proxy = Arc::clone(&started.proxy);
        std::thread::spawn(move || {
            if let Err(e) = serve_client(conn, &mux, key, &proxy) {
                eprintln!("airlock keeper: client dropped: {e}");
            }
        });
    }
}

fn serve_client(
    mut conn: UnixStream,
    mux: &airlock_vm::mux::Mux,
    key: [u8; 32],
    proxy: &SharedProxy,
) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    let peer = rustix::net::sockopt::socket_peercred(&conn)?;
    if peer.uid != rustix::process::geteuid() {
        return Err(std::io::Error::other(format!(
            "peer uid {} is not this user",
            peer.uid.as_raw()
        )));
    }
    conn.set_read_timeout(Some(CLIENT_PREAMBLE))?;
    let mut mode = [0u8; 1];
    conn.read_exact(&mut mode)?;
    match mode[0] {
        MODE_STREAM => {
            conn.set_read_timeout(None)?;
            airlock_vm::mux::bridge(conn, mux.open()?);
            Ok(())
        }
        MODE_DETACHED => {
            let mut line = String::new();
            BufReader::new(conn.try_clone()?).read_line(&mut line)?;
            conn.set_read_timeout(None)?;
            detached_on(conn, &line, mux.open()?, key)
        }
        MODE_RELOAD => reload(conn, proxy),
        MODE_PORTS => {
            let reply = airlock_protocol::host::PortsReply::Error {
                kind: "unsupported".into(),
                message: "the vm backend does not forward ports yet".into(),
            };
            let mut line = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
            line.push(b'\n');
            conn.write_all(&line)
        }
        other => Err(std::io::Error::other(format!(
            "unknown mode byte {other:#04x}"
        ))),
    }
}

fn teardown(started: Started) {
    let Started {
        booted,
        mut cgroup,
        listener,
        proxy,
        ..
    } = started;
    if let Ok(addr) = listener.local_addr() {
        if let Some(path) = addr.as_pathname() {
            let _ = fs::remove_file(path);
        }
    }
    if booted.machine.shutdown(Duration::from_secs(5)) {
        eprintln!("airlock keeper: QEMU did not stop within 5 s and was killed");
    }
    cgroup.destroy();
    drop(proxy);
}
