//! The host side of one VM: QEMU's `microvm` machine with the guest kernel, airlock's
//! initramfs, one virtio-serial port for the control channel and 9p shares; the boot
//! exchange; the [`Mux`] that streams go through afterwards.

use std::fs::File;
use std::io::{self, Read};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::boot::{GuestConfig, Hello, BOOT_VERSION, CHANNEL_PORT, MAX_BOOT_MESSAGE};
use crate::limits::Limits;
use crate::mux::{bridge, read_frame, write_frame, Closed, Kind, Mux, Side};

/// The accelerator QEMU runs the guest with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization through `/dev/kvm`.
    Kvm,
    /// QEMU's instruction translator: slow, but needs nothing from the host.
    Tcg,
}

impl Accel {
    fn qemu_name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// A host directory shared with the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostShare {
    pub tag: String,
    pub host: PathBuf,
    pub writable: bool,
}

/// How to start one VM.
#[derive(Debug, Clone)]
pub struct MachineSpec {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub accel: Accel,
    /// Guest RAM and vCPUs, from the sandbox's `memory_mb` and `cpus`.
    pub limits: Limits,
    /// A private directory for the channel socket, the console log and QEMU's own log.
    pub dir: PathBuf,
    /// Shares (the host's `/usr` and every workspace); tags match the guest configuration.
    pub shares: Vec<HostShare>,
    /// The egress proxy's Unix socket: every stream the guest opens is connected to it.
    pub egress_socket: Option<PathBuf>,
    /// Who QEMU runs as and where it is accounted.
    pub monitor: MonitorExec,
}

/// What QEMU's process gets before it runs (`airlock_linux::sys::monitor`): it always dies
/// with the process that started it (`PR_SET_PDEATHSIG`, from the spawning thread) and runs
/// with `no_new_privs`.
#[derive(Debug, Clone, Default)]
pub struct MonitorExec {
    /// The sandbox cgroup's join files (`airlock_linux::cgroup::JoinFds::raw`), written by
    /// the child before it drops its rights: QEMU is inside the cgroup from its first
    /// instruction. They must stay open until [`Machine::boot`] returns.
    pub join: Vec<std::os::fd::RawFd>,
    /// Run QEMU as this uid and gid (no supplementary groups) instead of the caller.
    pub identity: Option<(u32, u32)>,
}

/// Starting or stopping the VM failed.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("cannot start {}: {source}", qemu.display())]
    Spawn {
        qemu: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("QEMU exited ({status}) before the guest was up; its log: {log}; the guest console: {console}")]
    Exited {
        status: String,
        log: String,
        console: String,
    },
    #[error("the guest was not up after {waited:?}; the guest console ends: {console}")]
    Timeout { waited: Duration, console: String },
    #[error("the guest's hello: {0}")]
    Hello(String),
}

/// A running VM.
pub struct Machine {
    child: Child,
    channel: UnixStream,
    mux: Mux,
    closed: Option<Closed>,
    /// What the guest said when it came up.
    pub hello: Hello,
    /// Milliseconds from spawning QEMU to the guest's hello.
    pub spawn_to_hello_ms: u64,
    dir: PathBuf,
}

/// QEMU's arguments for `spec` (the channel socket at `socket`, the console to `console`).
pub fn qemu_args(spec: &MachineSpec, socket: &Path, console: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "-M",
        "microvm,x-option-roms=off,isa-serial=on,rtc=on",
        "-accel",
        spec.accel.qemu_name(),
        "-nodefaults",
        "-no-user-config",
        "-no-reboot",
        "-display",
        "none",
        "-monitor",
        "none",
    ]
    .map(String::from)
    .to_vec();
    if spec.accel == Accel::Kvm {
        args.extend(["-cpu".into(), "host".into()]);
    }
    args.extend([
        "-m".into(),
        spec.limits.memory_mb.to_string(),
        "-smp".into(),
        spec.limits.vcpus.to_string(),
        "-serial".into(),
        format!("file:{}", console.display()),
        "-kernel".into(),
        spec.kernel.display().to_string(),
        "-initrd".into(),
        spec.initramfs.display().to_string(),
        "-append".into(),
        kernel_command_line(spec.accel),
        "-device".into(),
        "virtio-serial-device,max_ports=2".into(),
        "-chardev".into(),
        format!("socket,id=channel,path={}", socket.display()),
        "-device".into(),
        format!("virtserialport,chardev=channel,name={CHANNEL_PORT}"),
    ]);
    for (i, share) in spec.shares.iter().enumerate() {
        let readonly = if share.writable { "" } else { ",readonly=on" };
        args.extend([
            "-fsdev".into(),
            format!(
                "local,id=fs{i},path={},security_model=none{readonly}",
                share.host.display()
            ),
            "-device".into(),
            format!("virtio-9p-device,fsdev=fs{i},mount_tag={}", share.tag),
        ]);
    }
    args
}

/// The guest kernel's command line. Under TCG, `microvm` (no HPET, no PM timer) gives the
/// kernel nothing to calibrate the TSC against and it stalls before init; it is told the
/// frequency instead, which under TCG is the host's own TSC rate.
fn kernel_command_line(accel: Accel) -> String {
    let mut line = String::from("console=ttyS0 reboot=t panic=-1 quiet");
    if accel == Accel::Tcg {
        line.push_str(&format!(" tsc_early_khz={}", host_tsc_khz()));
    }
    line
}

/// The host CPU's clock in kHz from `/proc/cpuinfo` (2 GHz when it says none).
fn host_tsc_khz() -> u64 {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| {
            l.strip_prefix("cpu MHz")?
                .split(':')
                .nth(1)?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(2_000_000, |mhz| (mhz * 1000.0) as u64)
}

impl Machine {
    /// Starts QEMU, waits for the guest's hello until `deadline`, sends `config`.
    pub fn boot(
        spec: &MachineSpec,
        config: &GuestConfig,
        deadline: Instant,
    ) -> Result<Machine, MachineError> {
        let io_err = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| MachineError::Io { what, path, source }
        };
        let socket = spec.dir.join("channel.sock");
        let console = spec.dir.join("console.log");
        let log = spec.dir.join("qemu.log");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).map_err(io_err("bind", &socket))?;
        listener
            .set_nonblocking(true)
            .map_err(io_err("configure", &socket))?;
        let log_file = File::create(&log).map_err(io_err("create", &log))?;
        let started = Instant::now();
        let mut command = Command::new(&spec.qemu);
        command
            .args(qemu_args(spec, &socket, &console))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(io_err("open", &log))?)
            .stderr(log_file);
        // The cgroup first, while the child still has the caller's rights to its files.
        if !spec.monitor.join.is_empty() {
            airlock_linux::sys::fd::join_before_exec(&mut command, spec.monitor.join.clone());
        }
        airlock_linux::sys::monitor::before_exec(&mut command, spec.monitor.identity);
        let mut child = command.spawn().map_err(|source| MachineError::Spawn {
            qemu: spec.qemu.clone(),
            source,
        })?;
        match Self::handshake(&listener, &mut child, config, deadline, spec) {
            Ok((channel, hello)) => {
                let spawn_to_hello_ms = started.elapsed().as_millis() as u64;
                let _ = std::fs::remove_file(&socket);
                let reader = channel.try_clone().map_err(io_err("clone", &socket))?;
                let writer = channel.try_clone().map_err(io_err("clone", &socket))?;
                let on_open = spec.egress_socket.clone().map(|proxy| {
                    Box::new(move |stream: UnixStream| {
                        // A proxy that is gone ends the guest's connection (dropped stream).
                        if let Ok(upstream) = UnixStream::connect(&proxy) {
                            bridge(stream, upstream);
                        }
                    }) as Box<dyn Fn(UnixStream) + Send>
                });
                let (mux, closed) =
                    Mux::start(Side::Host, Box::new(reader), Box::new(writer), on_open);
                Ok(Machine {
                    child,
                    channel,
                    mux,
                    closed: Some(closed),
                    hello,
                    spawn_to_hello_ms,
                    dir: spec.dir.clone(),
                })
            }
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_file(&socket);
                Err(err)
            }
        }
    }

    fn handshake(
        listener: &UnixListener,
        child: &mut Child,
        config: &GuestConfig,
        deadline: Instant,
        spec: &MachineSpec,
    ) -> Result<(UnixStream, Hello), MachineError> {
        let exited = |child: &mut Child| -> Option<MachineError> {
            let status = child.try_wait().ok().flatten()?;
            Some(MachineError::Exited {
                status: status.to_string(),
                log: tail(&spec.dir.join("qemu.log")),
                console: tail(&spec.dir.join("console.log")),
            })
        };
        let started = Instant::now();
        let timeout = || MachineError::Timeout {
            waited: started.elapsed(),
            console: tail(&spec.dir.join("console.log")),
        };
        let mut channel = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(MachineError::Hello(e.to_string())),
            }
            if let Some(err) = exited(child) {
                return Err(err);
            }
            if Instant::now() > deadline {
                return Err(timeout());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = channel.set_nonblocking(false);
        // Read the hello in short slices so a QEMU that dies is noticed.
        let hello = loop {
            let _ = channel.set_read_timeout(Some(Duration::from_millis(200)));
            match read_frame(&mut channel, MAX_BOOT_MESSAGE) {
                Ok(Some(frame)) if frame.stream == 0 && frame.kind == Kind::Hello => {
                    break serde_json::from_slice::<Hello>(&frame.payload)
                        .map_err(|e| MachineError::Hello(e.to_string()))?;
                }
                Ok(Some(frame)) => {
                    return Err(MachineError::Hello(format!(
                        "expected the hello, got {:?} on stream {}",
                        frame.kind, frame.stream
                    )))
                }
                // The channel closes when QEMU dies, a moment before it can be reaped: wait
                // for that so the error carries QEMU's log rather than a bare timeout.
                Ok(None) => {
                    let closed = Instant::now();
                    while closed.elapsed() < Duration::from_secs(2) {
                        if let Some(err) = exited(child) {
                            return Err(err);
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    return Err(MachineError::Hello(
                        "the channel closed before the guest's hello".into(),
                    ));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if let Some(err) = exited(child) {
                        return Err(err);
                    }
                    if Instant::now() > deadline {
                        return Err(timeout());
                    }
                }
                Err(e) => return Err(MachineError::Hello(e.to_string())),
            }
        };
        let _ = channel.set_read_timeout(None);
        if hello.version != BOOT_VERSION {
            return Err(MachineError::Hello(format!(
                "the guest speaks boot version {} (this airlock: {BOOT_VERSION})",
                hello.version
            )));
        }
        let bytes = serde_json::to_vec(config).map_err(|e| MachineError::Hello(e.to_string()))?;
        write_frame(&mut channel, 0, Kind::Config, &bytes)
            .map_err(|e| MachineError::Hello(e.to_string()))?;
        Ok((channel, hello))
    }

    /// Opens a new stream to the guest's control server.
    pub fn open(&self) -> io::Result<UnixStream> {
        self.mux.open()
    }

    /// A handle on the channel's multiplexer, for threads that open streams.
    pub fn mux(&self) -> Mux {
        self.mux.clone()
    }

    /// QEMU's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// QEMU's exit status, once it has exited (reaped here); `None` while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The directory holding the console log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes the channel (the guest's PID 1 stops its processes and powers off), waits up to
    /// `grace` for QEMU to exit, then kills it. Returns whether it had to kill.
    pub fn shutdown(mut self, grace: Duration) -> bool {
        let _ = self.channel.shutdown(Shutdown::Both);
        if let Some(closed) = self.closed.take() {
            closed.wait();
        }
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a log says about a failure: the lines that are not the kernel's own (what `/init`
/// printed), else the last lines.
fn tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let own: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('['))
        .collect();
    let lines: Vec<&str> = if own.is_empty() {
        text.lines().collect()
    } else {
        own
    };
    lines[lines.len().saturating_sub(12)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{Host, Limits};

    /// A guest configuration for monitors that never read it.
    fn test_config() -> GuestConfig {
        GuestConfig {
            version: BOOT_VERSION,
            key: String::new(),
            hostname: "h".into(),
            user: crate::boot::GuestUser {
                name: "u".into(),
                uid: 1000,
                gid: 1000,
                home: "/".into(),
            },
            env: Vec::new(),
            root_allowed: false,
            usr_tag: String::new(),
            shares: Vec::new(),
            protect: Vec::new(),
            egress_port: None,
        }
    }

    /// A monitor that connects to the channel, closes it, says why on stderr and exits a
    /// moment later (as a QEMU that aborts does): the error is its exit with its log, not a
    /// timeout with nothing to go on.
    #[test]
    fn a_monitor_that_dies_after_closing_the_channel_is_reported_with_its_log() {
        if !airlock_testkit::needs_tool("python3") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("fake-qemu");
        std::fs::write(
            &fake,
            "#!/usr/bin/env python3\n\
             import socket, sys, time\n\
             path = [a for a in sys.argv if a.startswith('socket,')][0].split('path=')[1]\n\
             s = socket.socket(socket.AF_UNIX); s.connect(path); s.close()\n\
             print('fake monitor: failed to set MSR', file=sys.stderr, flush=True)\n\
             time.sleep(0.3)\n\
             sys.exit(3)\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let spec = MachineSpec {
            qemu: fake,
            kernel: "/nonexistent".into(),
            initramfs: "/nonexistent".into(),
            accel: Accel::Tcg,
            limits: Limits::new(256, Some(1.0), Host::current().unwrap()).unwrap(),
            dir: dir.path().to_path_buf(),
            shares: Vec::new(),
            egress_socket: None,
            monitor: MonitorExec::default(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let err = match Machine::boot(&spec, &test_config(), deadline) {
            Ok(_) => panic!("a monitor that closed the channel booted"),
            Err(err) => err,
        };
        assert!(
            matches!(&err, MachineError::Exited { log, .. } if log.contains("failed to set MSR")),
            "{err}"
        );
    }

    /// QEMU's process as the vm backend starts it for a root caller: the given unprivileged
    /// uid and gid with no supplementary groups, `no_new_privs`, killed with its parent
    /// (`PR_SET_PDEATHSIG` survives the identity switch because it is set after it), and
    /// inside the sandbox's cgroup from its first instruction. A stand-in monitor reports
    /// what it is and exits; its report comes back in the boot error's log.
    #[test]
    fn the_monitor_runs_unprivileged_without_groups_in_the_cgroup_and_dies_with_its_parent() {
        use airlock_linux::cgroup::{Cgroup, CgroupLimits};
        if !airlock_testkit::needs_root("switching the monitor to another uid")
            || !airlock_testkit::needs_tool("python3")
        {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let fake = dir.path().join("fake-qemu");
        std::fs::write(
            &fake,
            "#!/usr/bin/env python3\n\
             import ctypes, sys\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             sig = ctypes.c_int(0)\n\
             libc.prctl(2, ctypes.byref(sig), 0, 0, 0)\n\
             status = open('/proc/self/status').read().splitlines()\n\
             keep = [l.replace('\\t', ' ') for l in status if l.split(':')[0] in ('Uid', 'Gid', 'Groups', 'NoNewPrivs')]\n\
             cg = ' '.join(l.strip() for l in open('/proc/self/cgroup'))\n\
             print('monitor', ' / '.join(keep), '/ pdeathsig', sig.value, '/ cgroup', cg, file=sys.stderr, flush=True)\n\
             sys.exit(3)\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let name = format!("vm-monitor-test-{}", std::process::id());
        let cgroup = match Cgroup::create(&name, &CgroupLimits::default()) {
            Ok(cg) => cg,
            Err(e) => return airlock_testkit::skip(format_args!("no cgroup for the test: {e}")),
        };
        let join = cgroup.join_fds().unwrap();
        let spec = MachineSpec {
            qemu: fake,
            kernel: "/nonexistent".into(),
            initramfs: "/nonexistent".into(),
            accel: Accel::Tcg,
            limits: Limits::new(256, Some(1.0), Host::current().unwrap()).unwrap(),
            dir: dir.path().to_path_buf(),
            shares: Vec::new(),
            egress_socket: None,
            monitor: MonitorExec {
                join: join.raw(),
                identity: Some((65534, 65534)),
            },
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let err = match Machine::boot(&spec, &test_config(), deadline) {
            Ok(_) => panic!("the stand-in monitor booted"),
            Err(err) => err,
        };
        drop(join);
        let _ = cgroup.destroy(Duration::from_secs(5));
        let MachineError::Exited { log, .. } = &err else {
            panic!("{err}");
        };
        for expected in [
            "Uid: 65534 65534 65534 65534",
            "Gid: 65534 65534 65534 65534",
            "NoNewPrivs: 1",
            "pdeathsig 9",
            name.as_str(),
        ] {
            assert!(
                log.contains(expected),
                "no {expected:?} in the monitor's report: {log}"
            );
        }
        let groups = log
            .split(" / ")
            .find(|p| p.starts_with("Groups:"))
            .unwrap_or("");
        assert_eq!(groups.trim(), "Groups:", "supplementary groups kept: {log}");
    }
}
