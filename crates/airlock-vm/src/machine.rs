//! The host side of one VM: QEMU's `microvm` machine with the guest kernel, airlock's
//! initramfs, one virtio-serial port for the control channel and 9p shares; the boot
//! exchange; the [`Mux`] that streams go through afterwards.
//!
//! QEMU opens nothing of airlock's by path but the kernel, the initramfs and the shares: the
//! channel is one end of a socket pair and the console a file airlock opened, both inherited
//! as descriptors ([`CHANNEL_FD`], [`CONSOLE_FD`]). With [`MonitorExec::helper`] (a root
//! caller), QEMU is started through [`crate::monitor`] and sees the kernel, the initramfs and
//! the id-mapped shares by names relative to its working directory.

use std::fs::File;
use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
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
    /// Through the monitor helper only ([`MonitorExec::helper`]): shown to QEMU id-mapped, the
    /// caller's files as the monitor's (workspaces, mounts, the egress directory). `false`:
    /// shared as the host has it (the host's `/usr`: what others may not read stays
    /// unreadable to the monitor and so to the guest).
    pub id_mapped: bool,
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
    /// A private directory for the console log and QEMU's own log (through the monitor
    /// helper, also what its own directory is mounted over, in its namespace only).
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
    /// With `identity`: the `airlock` executable, whose hidden verb [`crate::monitor::VERB`]
    /// starts QEMU in a mount namespace of its own with the kernel, the initramfs and the
    /// `id_mapped` shares id-mapped to `identity` (a root caller: its files stay its own and
    /// QEMU needs no path of its to be searchable). `None`: QEMU is spawned directly and
    /// opens the host's paths itself.
    pub helper: Option<PathBuf>,
}

/// QEMU's descriptor of the channel (its end of a socket pair).
pub const CHANNEL_FD: i32 = 3;
/// QEMU's descriptor of the console log (opened by airlock, write-only).
pub const CONSOLE_FD: i32 = 4;

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

/// How QEMU names what it opens by path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paths {
    /// The host's own paths (QEMU spawned directly).
    Host,
    /// Names in the monitor helper's directory ([`helper_binds`]).
    Helper,
}

/// QEMU's arguments for `spec` (the channel and the console are inherited descriptors).
pub fn qemu_args(spec: &MachineSpec, paths: Paths) -> Vec<String> {
    let (kernel, initramfs) = match paths {
        Paths::Host => (
            spec.kernel.display().to_string(),
            spec.initramfs.display().to_string(),
        ),
        Paths::Helper => (KERNEL_NAME.to_owned(), INITRAMFS_NAME.to_owned()),
    };
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
        "-add-fd".into(),
        format!("fd={CONSOLE_FD},set=1"),
        "-serial".into(),
        "file:/dev/fdset/1".into(),
        "-kernel".into(),
        kernel,
        "-initrd".into(),
        initramfs,
        "-append".into(),
        kernel_command_line(spec.accel),
        "-device".into(),
        "virtio-serial-device,max_ports=2".into(),
        "-chardev".into(),
        format!("socket,id=channel,fd={CHANNEL_FD}"),
        "-device".into(),
        format!("virtserialport,chardev=channel,name={CHANNEL_PORT}"),
    ]);
    for (i, share) in spec.shares.iter().enumerate() {
        let readonly = if share.writable { "" } else { ",readonly=on" };
        let path = match paths {
            Paths::Helper if share.id_mapped => share_name(i),
            _ => share.host.display().to_string(),
        };
        args.extend([
            "-fsdev".into(),
            format!("local,id=fs{i},path={path},security_model=none{readonly}"),
            "-device".into(),
            format!("virtio-9p-device,fsdev=fs{i},mount_tag={}", share.tag),
        ]);
    }
    args
}

/// The kernel's and the initramfs's names in the monitor helper's directory.
const KERNEL_NAME: &str = "kernel";
const INITRAMFS_NAME: &str = "initramfs";

/// The name of the `i`th share in the monitor helper's directory.
fn share_name(i: usize) -> String {
    format!("s{i}")
}

/// What the monitor helper binds into its directory for `spec`: the kernel and the initramfs
/// (read-only) and every `id_mapped` share, under the names [`qemu_args`] gives QEMU.
pub fn helper_binds(spec: &MachineSpec) -> Vec<crate::monitor::Bind> {
    let mut binds = vec![
        crate::monitor::Bind {
            source: spec.kernel.clone(),
            name: KERNEL_NAME.into(),
            writable: false,
        },
        crate::monitor::Bind {
            source: spec.initramfs.clone(),
            name: INITRAMFS_NAME.into(),
            writable: false,
        },
    ];
    for (i, share) in spec.shares.iter().enumerate() {
        if share.id_mapped {
            binds.push(crate::monitor::Bind {
                source: share.host.clone(),
                name: share_name(i),
                writable: share.writable,
            });
        }
    }
    binds
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
        let console = spec.dir.join("console.log");
        let log = spec.dir.join("qemu.log");
        let (channel, monitor_end) =
            UnixStream::pair().map_err(io_err("create the channel for", &spec.dir))?;
        let console_file = File::create(&console).map_err(io_err("create", &console))?;
        let log_file = File::create(&log).map_err(io_err("create", &log))?;
        let started = Instant::now();
        let mut command = match (&spec.monitor.helper, spec.monitor.identity) {
            (Some(helper), Some((uid, gid))) => {
                let plan = crate::monitor::Plan {
                    uid,
                    gid,
                    qemu: spec.qemu.clone(),
                    args: qemu_args(spec, Paths::Helper),
                    binds: helper_binds(spec),
                };
                let plan = serde_json::to_string(&plan).map_err(|e| MachineError::Spawn {
                    qemu: helper.clone(),
                    source: io::Error::other(e),
                })?;
                let mut command = Command::new(helper);
                // The helper mounts its directory over this one, in its own namespace only.
                command
                    .arg(crate::monitor::VERB)
                    .arg(plan)
                    .current_dir(&spec.dir);
                command
            }
            _ => {
                let mut command = Command::new(&spec.qemu);
                command.args(qemu_args(spec, Paths::Host));
                command
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(io_err("open", &log))?)
            .stderr(log_file);
        // The cgroup first, while the child still has the caller's rights to its files.
        if !spec.monitor.join.is_empty() {
            airlock_linux::sys::fd::join_before_exec(&mut command, spec.monitor.join.clone());
        }
        let monitor_end = OwnedFd::from(monitor_end);
        let console_fd = OwnedFd::from(console_file);
        airlock_linux::sys::fd::place_fds(
            &mut command,
            &[(&monitor_end, CHANNEL_FD), (&console_fd, CONSOLE_FD)],
        );
        // Through the helper, the identity switch is the helper's last step (after its mounts).
        let identity = match spec.monitor.helper {
            Some(_) => None,
            None => spec.monitor.identity,
        };
        airlock_linux::sys::monitor::before_exec(&mut command, identity);
        let spawned = command.spawn();
        // QEMU's ends only: a QEMU that dies closes the channel.
        drop((monitor_end, console_fd));
        let mut child = spawned.map_err(|source| MachineError::Spawn {
            qemu: spec.qemu.clone(),
            source,
        })?;
        match Self::handshake(channel, &mut child, config, deadline, spec) {
            Ok((channel, hello)) => {
                let spawn_to_hello_ms = started.elapsed().as_millis() as u64;
                let clone_err = io_err("clone the channel of", &spec.dir);
                let reader = channel.try_clone().map_err(clone_err)?;
                let writer = channel
                    .try_clone()
                    .map_err(io_err("clone the channel of", &spec.dir))?;
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
                Err(err)
            }
        }
    }

    fn handshake(
        mut channel: UnixStream,
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
            image_root: false,
            shares: Vec::new(),
            protect: Vec::new(),
            egress_port: None,
        }
    }

    /// A monitor that closes its end of the channel, says why on stderr and exits a
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
             import os, sys, time\n\
             assert 'socket,id=channel,fd=3' in sys.argv\n\
             os.close(3)\n\
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
                helper: None,
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
