//! The `vm` backend's guest under QEMU's TCG accelerator (this kind of machine has no usable
//! KVM): the initramfs built from the binary under test, the guest kernel that
//! `scripts/fetch-vm-kernel` unpacked, the control protocol through the multiplexed
//! virtio-serial port. Each test boots one VM (a few seconds under TCG).

mod accel;
mod backend;
mod boot;
mod egress;
mod images;
mod live;
mod monitor;
mod runs;
mod selection;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock_protocol::{ExecClient, ExecRequest, ExecUser, ExitStatus, Key};
use airlock_vm::boot::{GuestConfig, GuestUser, Share, BOOT_VERSION};
use airlock_vm::cache;
use airlock_vm::initramfs::Contents;
use airlock_vm::kernel::{Kernel, GUEST_MODULES};
use airlock_vm::limits::{Host, Limits};
use airlock_vm::machine::{Accel, HostShare, Machine, MachineSpec};

use crate::common::AIRLOCK;

pub const QEMU: &str = "qemu-system-x86_64";

/// `exec` of a request to a host no rule allows, printing only the HTTP status: the guest has
/// no network device, so the answer can only be the host proxy's denial (403).
pub const EXEC_DENIED_REQUEST: &[&str] = &[
    "exec",
    "--",
    "curl",
    "-sS",
    "-m",
    "60",
    "-o",
    "/dev/null",
    "-w",
    "%{http_code}",
    "http://not-allowed.invalid/",
];

/// Asserts that each of `dirs` (the runtime and state `sandboxes` directories) is empty or
/// absent: `down` left no sandbox directory or file behind.
pub fn assert_nothing_left(dirs: &[PathBuf]) {
    for dir in dirs {
        let entries: Vec<_> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(entries.is_empty(), "down left {entries:?}");
    }
}

/// Where `scripts/fetch-vm-kernel` puts kernels for this user.
fn kernel_cache() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
    cache.join("airlock/vm-kernel")
}

/// Where the tests keep the initramfs built from the binary under test (the invoker's cache,
/// beside the kernel).
pub fn initramfs_cache() -> PathBuf {
    kernel_cache().with_file_name("vm-initramfs")
}

/// The kernel, or a skip (a failure under CI: scripts/test fetches it).
pub fn needs_kernel() -> Option<Kernel> {
    match Kernel::find(&kernel_cache()) {
        Ok(k) => Some(k),
        Err(err) => {
            airlock_testkit::skip(format_args!("{err}"));
            None
        }
    }
}

/// A booted VM, its key and its directory.
pub struct Booted {
    pub machine: Machine,
    pub key: Key,
    pub kernel: Kernel,
    /// Holds the initramfs and the logs for as long as the VM runs.
    pub _dir: tempfile::TempDir,
    pub boot_wall: Duration,
}

/// Boots a VM with `shares` (host path, writable) mounted at the same paths, running
/// commands as `user`. `None` when qemu or the kernel is missing (outside CI).
pub fn boot(shares: &[(PathBuf, bool)], user: GuestUser) -> Option<Booted> {
    boot_with(shares, user, None, Vec::new())
}

/// The size most tests boot with: 512 MiB, one vCPU.
pub fn small() -> Limits {
    Limits::new(512, Some(1.0), Host::current().unwrap()).unwrap()
}

/// [`boot`] with the guest's egress relay on port 3128 reaching `egress` (a Unix socket
/// standing in for the sandbox's proxy).
pub fn boot_with(
    shares: &[(PathBuf, bool)],
    user: GuestUser,
    egress: Option<PathBuf>,
    protect: Vec<String>,
) -> Option<Booted> {
    boot_sized(shares, user, egress, protect, small())
}

/// [`boot_with`] with the guest's RAM and vCPUs.
pub fn boot_sized(
    shares: &[(PathBuf, bool)],
    user: GuestUser,
    egress: Option<PathBuf>,
    protect: Vec<String>,
    limits: Limits,
) -> Option<Booted> {
    if !airlock_testkit::needs_tool(QEMU) {
        return None;
    }
    let kernel = needs_kernel()?;
    let dir = tempfile::tempdir().unwrap();
    let contents = Contents::for_exe(AIRLOCK.as_ref(), &kernel, GUEST_MODULES).unwrap();
    let started = Instant::now();
    let cached = cache::initramfs(&initramfs_cache(), &contents, &kernel).unwrap();
    eprintln!(
        "vm: initramfs {} ({} bytes, {}) in {:?}",
        cached.path.display(),
        cached.len,
        if cached.hit { "cached" } else { "built" },
        started.elapsed()
    );
    let initramfs = cached.path.clone();
    let mut host_shares = vec![HostShare {
        tag: "usr".into(),
        host: "/usr".into(),
        writable: false,
        id_mapped: false,
    }];
    let mut guest_shares = Vec::new();
    for (i, (path, writable)) in shares.iter().enumerate() {
        host_shares.push(HostShare {
            tag: format!("ws{i}"),
            host: path.clone(),
            writable: *writable,
            id_mapped: true,
        });
        guest_shares.push(Share {
            tag: format!("ws{i}"),
            path: path.display().to_string(),
            writable: *writable,
        });
    }
    let spec = MachineSpec {
        qemu: QEMU.into(),
        kernel: kernel.image.clone(),
        initramfs,
        accel: Accel::Tcg,
        limits,
        dir: dir.path().to_path_buf(),
        shares: host_shares,
        egress_socket: egress.clone(),
        monitor: Default::default(),
    };
    let key = Key::generate().unwrap();
    let config = GuestConfig {
        version: BOOT_VERSION,
        key: key.to_hex(),
        hostname: "airlock-vm-test".into(),
        user,
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        root_allowed: protect.is_empty(),
        protect,
        usr_tag: "usr".into(),
        image_root: false,
        shares: guest_shares,
        egress_port: egress.map(|_| 3128),
    };
    let started = Instant::now();
    let machine = Machine::boot(&spec, &config, Instant::now() + Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("the VM did not boot: {e}"));
    let boot_wall = started.elapsed();
    Some(Booted {
        machine,
        key,
        kernel,
        _dir: dir,
        boot_wall,
    })
}

/// An unprivileged guest user.
pub fn guest_user(uid: u32, gid: u32) -> GuestUser {
    GuestUser {
        name: "dev".into(),
        uid,
        gid,
        home: "/home/dev".into(),
    }
}

/// Runs `argv` in the guest; returns (status, stdout, stderr).
pub fn exec(vm: &Booted, argv: &[&str], cwd: Option<&str>) -> (ExitStatus, String, String) {
    let stream = vm.machine.open().unwrap();
    let client = ExecClient::connect(stream, &vm.key).unwrap();
    let request = ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: Default::default(),
        cwd: cwd.map(str::to_owned),
        user: ExecUser::Sandbox,
        tty: None,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = client.run(&request, None, &mut out, &mut err).unwrap();
    (
        status,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}
