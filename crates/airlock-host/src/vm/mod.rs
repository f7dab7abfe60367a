//! The `vm` backend on the host: what `backend = "vm"` (or `--backend vm`) changes.
//!
//! A `vm` sandbox is owned like a `linux` one (the same records, the same `LinuxBackend`
//! proofs for `status`, `exec`, `down`, the same control socket and mode bytes), but its
//! owner process is [`keeper`] (the hidden verb `__keeper` dispatches to it when the state
//! directory holds [`VM_START_FILE`]), which boots QEMU's `microvm` with the guest kernel and
//! airlock's initramfs (`airlock_vm`) instead of starting namespaces. Its "PID 1" as the
//! records see it is the QEMU process: a killed monitor is a sandbox whose guest is gone.
//!
//! Order for `up`: [`validate`] (before any side effect: directories only,
//! QEMU and the kernel found, the accelerator possible) → `prepare` builds (or reuses) the
//! initramfs in the invoker's cache and writes [`VmStart`] beside the linux start request →
//! the keeper boots the VM ([`boot`]).
//!
//! QEMU never runs as host root: for a root invoker, [`boot`] claims the sandbox's id range
//! (as a root invoker's `linux` sandbox does) and QEMU runs as one id of it, started through
//! the monitor helper (`airlock_vm::monitor`) with the workspaces id-mapped so that what the
//! guest writes is still root's on the host.

pub mod keeper;
pub mod run;

use std::path::{Path, PathBuf};
use std::time::Instant;

use airlock_linux::spec::{Image, SandboxSpec};
use airlock_vm::accel::AccelChoice;
use airlock_vm::boot::{GuestConfig, GuestUser, Share, BOOT_VERSION};
use airlock_vm::kernel::{Kernel, GUEST_MODULES};
use airlock_vm::machine::{Accel, HostShare, Machine, MachineSpec, MonitorExec};
use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, HostError};
use crate::wire::HOST_VERSION;

/// The `vm` start request, beside the linux one (`start.json`) in the state directory.
pub const VM_START_FILE: &str = "vm-start.json";

/// QEMU's default name on `PATH`.
pub const QEMU: &str = airlock_vm::doctor::QEMU;

/// Where the guest sees the sandbox's egress directory (the CA files the proxy variables
/// name), as in a `linux` sandbox.
const EGRESS_GUEST_DIR: &str = airlock_linux::spec::EGRESS_DIR;

/// The `[vm]` settings as the configuration gives them (checked by `airlock-config`).
#[derive(Debug, Clone, Default)]
pub struct VmConfig {
    pub accel: AccelChoice,
    /// A fetched kernel's directory; `None`: the newest under `<cache>/vm-kernel`.
    pub kernel: Option<PathBuf>,
    /// QEMU's executable; `None`: `qemu-system-x86_64` on `PATH`.
    pub qemu: Option<PathBuf>,
    /// Memory QEMU itself may use on top of the guest's RAM (the cgroup's limit is both).
    pub memory_overhead_mb: u64,
}

/// What a `vm` sandbox needs, found and checked before anything is created.
#[derive(Debug, Clone)]
pub struct VmSettings {
    pub qemu: PathBuf,
    pub kernel: Kernel,
    pub accel: AccelChoice,
    pub memory_overhead_mb: u64,
    /// `<cache>/vm-initramfs`.
    pub initramfs_dir: PathBuf,
}

/// The keeper's instructions for one boot.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmStart {
    pub version: u32,
    pub qemu: PathBuf,
    /// The kernel's directory (`scripts/fetch-vm-kernel`'s).
    pub kernel: PathBuf,
    /// The cached initramfs built from this airlock.
    pub initramfs: PathBuf,
    pub accel: AccelChoice,
    pub memory_overhead_mb: u64,
}

fn unavailable(code: &'static str, message: String, hint: &str) -> HostError {
    HostError::new(ErrorKind::BackendUnavailable, code, message).with_hint(hint)
}

/// Checks everything the `vm` backend needs for `spec`, creating nothing.
pub fn validate(
    config: &VmConfig,
    spec: &SandboxSpec,
    cache_root: &Path,
) -> Result<VmSettings, HostError> {
    if let Image::Directory(dir) = &spec.image {
        if !dir.is_dir() {
            return Err(HostError::new(
                ErrorKind::Config,
                "backend.vm_image",
                format!(
                    "the image directory {} is not a directory (the vm backend shares it \
                     with the guest over 9p)",
                    dir.display()
                ),
            )
            .with_hint("set `image` to a directory holding a root filesystem"));
        }
    }
    for m in spec.workspaces.iter().chain(&spec.mounts) {
        if !m.host.is_dir() {
            return Err(HostError::new(
                ErrorKind::Config,
                "backend.vm_mapping",
                format!(
                    "the vm backend shares directories only, and {} is not one",
                    m.host.display()
                ),
            )
            .with_hint("remove that mapping from the configuration, or use backend = \"linux\""));
        }
    }
    let qemu = match &config.qemu {
        Some(path) if path.is_file() => path.clone(),
        Some(path) => {
            return Err(unavailable(
                "backend.vm_monitor",
                format!("vm.qemu = {} does not exist", path.display()),
                "install QEMU (sudo apt-get install qemu-system-x86) and name its \
                 qemu-system-x86_64, or remove vm.qemu to use the one on PATH",
            ))
        }
        None => find_on_path(QEMU).ok_or_else(|| {
            unavailable(
                "backend.vm_monitor",
                format!(
                    "the vm backend needs QEMU, and {QEMU} is not on PATH: it runs the microVM"
                ),
                "sudo apt-get install qemu-system-x86 (then `airlock doctor` shows it)",
            )
        })?,
    };
    let kernel = match &config.kernel {
        Some(dir) => Kernel::open(dir),
        None => Kernel::find(&cache_root.join("vm-kernel")),
    }
    .map_err(|e| {
        unavailable(
            "backend.vm_kernel",
            format!("the vm backend needs a guest kernel: {e}"),
            "run scripts/fetch-vm-kernel (it downloads Debian's kernel package into your \
             cache, installing nothing), or set vm.kernel to a kernel it unpacked",
        )
    })?;
    let device = airlock_vm::doctor::monitor_kvm_device();
    // `auto` with a device still needs its probe boot, which the keeper runs.
    airlock_vm::accel::resolve(config.accel, device, || Ok(())).map_err(|e| {
        unavailable(
            "backend.vm_accel",
            e.to_string(),
            "see `airlock doctor` (vm_kvm) for what this host offers",
        )
    })?;
    Ok(VmSettings {
        qemu,
        kernel,
        accel: config.accel,
        memory_overhead_mb: config.memory_overhead_mb,
        initramfs_dir: cache_root.join("vm-initramfs"),
    })
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os(airlock_config::env_vars::PATH)?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Builds (or finds) the initramfs of this airlock for the settings' kernel: a side effect in
/// the invoker's cache, after validation.
pub fn start_request(settings: &VmSettings) -> Result<VmStart, HostError> {
    let exe = std::fs::read_link("/proc/self/exe").map_err(|e| {
        HostError::internal(
            "backend.vm_initramfs",
            format!("cannot find airlock's executable: {e}"),
        )
    })?;
    let contents = airlock_vm::initramfs::Contents::for_exe(&exe, &settings.kernel, GUEST_MODULES)
        .map_err(|e| {
            HostError::internal(
                "backend.vm_initramfs",
                format!("cannot assemble the initramfs: {e}"),
            )
        })?;
    let cached = airlock_vm::cache::initramfs(&settings.initramfs_dir, &contents, &settings.kernel)
        .map_err(|e| {
            HostError::new(
                ErrorKind::BackendUnavailable,
                "backend.vm_initramfs",
                format!("cannot build the initramfs: {e}"),
            )
            .with_hint(format!(
                "check {} (a private directory of yours)",
                settings.initramfs_dir.display()
            ))
        })?;
    Ok(VmStart {
        version: HOST_VERSION,
        qemu: settings.qemu.clone(),
        kernel: settings.kernel.root.clone(),
        initramfs: cached.path,
        accel: settings.accel,
        memory_overhead_mb: settings.memory_overhead_mb,
    })
}

/// The sandbox's spec with the cgroup's memory raised by QEMU's own overhead: the guest's RAM
/// is `memory_mb`, the monitor needs some more.
pub fn cgroup_spec(spec: &SandboxSpec, vm: &VmStart) -> SandboxSpec {
    let mut spec = spec.clone();
    if let Some(m) = spec.limits.memory_mb.as_mut() {
        m.value = m.value.saturating_add(vm.memory_overhead_mb);
    }
    spec
}

/// A booted VM and the epoch key its streams prove.
pub struct Booted {
    pub machine: Machine,
    pub key: [u8; 32],
    /// A root invoker's claim on the id range QEMU's id comes from, held while the VM runs.
    _range: Option<airlock_linux::idmap::RangeClaim>,
}

/// A root invoker's monitor: its uid and gid, and the claim on the range they come from.
type RootMonitor = ((u32, u32), airlock_linux::idmap::RangeClaim);

/// Who QEMU runs as: the invoker (`None`), or for a root invoker an id of a range claimed for
/// this sandbox (the id a root invoker's `linux` sandbox user has on the host), with the claim.
fn monitor_identity(spec: &SandboxSpec) -> Result<Option<RootMonitor>, HostError> {
    use airlock_linux::idmap;
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let host = idmap::HostIds::probe(spec.user.uid, spec.user.gid, &spec.user.name);
    let claim =
        idmap::claim_root_range(Path::new(idmap::ROOT_RANGE_DIR), &host.taken).map_err(|e| {
            unavailable(
                "backend.vm_ids",
                format!("cannot claim an id range for the VM's monitor: {e}"),
                "stop sandboxes you no longer need (`airlock down`)",
            )
        })?;
    let id = claim.range.start + idmap::ROOT_INVOKER_SANDBOX_ID;
    Ok(Some(((id, id), claim)))
}

/// Where a VM boots: its private directory (channel socket, QEMU's log, the console), the
/// cgroup's join files, the egress proxy's socket.
pub struct BootPlace<'a> {
    pub dir: &'a Path,
    pub join: Vec<std::os::fd::RawFd>,
    pub egress_socket: Option<PathBuf>,
}

/// Resolves the accelerator (the `auto` probe boot) and boots the guest for `spec`.
pub fn boot(
    spec: &SandboxSpec,
    vm: &VmStart,
    place: BootPlace<'_>,
    deadline: Instant,
) -> Result<Booted, HostError> {
    if vm.version != HOST_VERSION {
        return Err(HostError::internal(
            "backend.vm_start",
            format!(
                "vm start request of version {} (this airlock: {HOST_VERSION})",
                vm.version
            ),
        ));
    }
    let kernel = Kernel::open(&vm.kernel).map_err(|e| {
        unavailable(
            "backend.vm_kernel",
            format!("the guest kernel: {e}"),
            "run scripts/fetch-vm-kernel again",
        )
    })?;
    let host = airlock_vm::limits::Host::current()
        .map_err(|e| HostError::internal("backend.vm_limits", e.to_string()))?;
    let memory = spec.limits.memory_mb.map_or(1024, |m| m.value);
    let limits =
        airlock_vm::limits::Limits::new(memory, spec.limits.cpus.map(|c| c.value), host)
            .map_err(|e| HostError::new(ErrorKind::Config, "backend.vm_limits", e.to_string()))?;
    let (host_shares, guest_shares) = shares(spec);
    let (identity, range) = monitor_identity(spec)?.unzip();
    let mut machine = MachineSpec {
        qemu: vm.qemu.clone(),
        kernel: kernel.image.clone(),
        initramfs: vm.initramfs.clone(),
        accel: Accel::Tcg,
        limits,
        dir: place.dir.to_path_buf(),
        shares: host_shares,
        egress_socket: place.egress_socket.clone(),
        monitor: MonitorExec {
            join: place.join,
            identity,
            // `/proc/self/exe` is this airlock in the child too, whatever became of its path.
            helper: identity.map(|_| PathBuf::from("/proc/self/exe")),
        },
    };
    machine.accel =
        airlock_vm::accel::resolve(vm.accel, airlock_vm::doctor::monitor_kvm_device(), || {
            airlock_vm::accel::probe_boot(&machine).map(drop)
        })
        .map_err(|e| {
            unavailable(
                "backend.vm_accel",
                e.to_string(),
                "see `airlock doctor` (vm_kvm) for what this host offers",
            )
        })?;
    let key = airlock_protocol::Key::generate()
        .map_err(|e| HostError::internal("backend.random", e.to_string()))?;
    let config = GuestConfig {
        version: BOOT_VERSION,
        key: key.to_hex(),
        hostname: spec.hostname.clone(),
        // A root invoker's files appear to the monitor, and so to the guest, as the monitor's
        // id: the guest user has that id, so it owns them inside (never guest root).
        user: {
            let (uid, gid) = identity.unwrap_or((spec.user.uid, spec.user.gid));
            GuestUser {
                name: airlock_linux::rootfs::sandbox_user_name(&spec.user.name),
                uid,
                gid,
                home: spec.user.home.to_string_lossy().into_owned(),
            }
        },
        env: spec.env.clone(),
        // Guest root could remount the protected paths (docs/vm.md): never both.
        root_allowed: spec.protect.is_empty(),
        usr_tag: ROOT_TAG.into(),
        image_root: !matches!(spec.image, Image::Host),
        shares: guest_shares,
        protect: protected_paths(spec),
        egress_port: spec
            .egress
            .iter()
            .flat_map(|e| e.relays.iter())
            .find(|r| r.handoff)
            .map(|r| r.port),
    };
    let machine = Machine::boot(&machine, &config, deadline).map_err(|e| {
        HostError::new(
            ErrorKind::BackendUnavailable,
            "backend.vm_boot",
            format!("the VM did not boot: {e}"),
        )
        .with_hint("run `airlock doctor`; the guest console's last lines are quoted above")
    })?;
    Ok(Booted {
        machine,
        key: *key.as_bytes(),
        _range: range,
    })
}

/// The tag of the share the guest's system files come from: the host's `/usr`, or an
/// image's whole root filesystem.
const ROOT_TAG: &str = "usr";

/// The host's `/usr` (read-only, as the host has it) or an imported or directory image's root
/// filesystem (read-only; the guest lays a tmpfs over it), every workspace and mount at its
/// sandbox path, and the egress directory (read-only) where a `linux` sandbox has it (these,
/// and the image, id-mapped when the monitor runs as an id of its own: a root invoker's image
/// files are root's, and appear to the monitor as its own as the workspace's do).
fn shares(spec: &SandboxSpec) -> (Vec<HostShare>, Vec<Share>) {
    let mut host = vec![match &spec.image {
        Image::Host => HostShare {
            tag: ROOT_TAG.into(),
            host: "/usr".into(),
            writable: false,
            id_mapped: false,
        },
        image => HostShare {
            tag: ROOT_TAG.into(),
            host: image.root_dir().to_path_buf(),
            writable: false,
            id_mapped: true,
        },
    }];
    let mut guest = Vec::new();
    let mut add = |host_path: &Path, guest_path: &Path, writable: bool| {
        let tag = format!("s{}", guest.len());
        host.push(HostShare {
            tag: tag.clone(),
            host: host_path.to_path_buf(),
            writable,
            id_mapped: true,
        });
        guest.push(Share {
            tag,
            path: guest_path.display().to_string(),
            writable,
        });
    };
    for m in spec.workspaces.iter().chain(&spec.mounts) {
        add(&m.host, &m.sandbox, m.writable);
    }
    if let Some(e) = &spec.egress {
        add(&e.host_dir, Path::new(EGRESS_GUEST_DIR), false);
    }
    (host, guest)
}

/// The protected paths (`.git/hooks`, `.airlock`, …) of every writable workspace as absolute
/// guest paths; a `*` component expands to the directories there now (read without following
/// links; what does not exist is not protected, as in a `linux` sandbox).
fn protected_paths(spec: &SandboxSpec) -> Vec<String> {
    let mut out = Vec::new();
    for ws in spec.workspaces.iter().filter(|w| w.writable) {
        for p in &spec.protect {
            let mut found = vec![(ws.host.clone(), ws.sandbox.clone())];
            for part in p.path.split('/') {
                found = found
                    .into_iter()
                    .flat_map(|(h, s)| expand(&h, &s, part))
                    .collect();
            }
            out.extend(found.into_iter().map(|(_, s)| s.display().to_string()));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn expand(host: &Path, guest: &Path, part: &str) -> Vec<(PathBuf, PathBuf)> {
    if part != "*" {
        let h = host.join(part);
        return if h.symlink_metadata().is_ok() {
            vec![(h, guest.join(part))]
        } else {
            Vec::new()
        };
    }
    let Ok(entries) = std::fs::read_dir(host) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.path(), guest.join(e.file_name())))
        .collect()
}

/// Writes [`VM_START_FILE`] into a sandbox's state directory (the initramfs built or found
/// first), for its keeper.
pub fn write_start(
    state_dir: &Path,
    settings: &VmSettings,
) -> Result<(), airlock_core::backend::BackendError> {
    use airlock_core::backend::BackendError;
    let start = start_request(settings)
        .map_err(|e| BackendError::Start(crate::error::to_start_failure(e)))?;
    let path = state_dir.join(VM_START_FILE);
    let bytes = serde_json::to_vec(&start).map_err(|source| BackendError::Encode {
        what: "the vm start request",
        source,
    })?;
    airlock_core::write_atomic(&path, &bytes, 0o600)
        .map_err(|source| BackendError::Write { path, source })
}

/// The backend `up` or `run` creates sandboxes with: `--backend` (`flag`, checked by the
/// command line) over the configuration's `backend`. `Some` settings for `vm` (checked,
/// nothing created), `None` for `linux`.
pub fn selected(
    flag: Option<&str>,
    effective: &airlock_config::Effective,
    spec: &SandboxSpec,
    roots: &airlock_config::Roots,
) -> Result<Option<VmSettings>, HostError> {
    use airlock_config::backend::{BackendKind, VmAccel};
    let kind = match flag {
        Some(text) => BackendKind::parse(text).map_err(|e| {
            HostError::usage(format!("--backend {e}"))
                .with_hint("use --backend linux or --backend vm")
        })?,
        None => effective.backend.value,
    };
    if kind == BackendKind::Linux {
        return Ok(None);
    }
    let vm = &effective.vm;
    let config = VmConfig {
        accel: match vm.accel.value {
            VmAccel::Auto => AccelChoice::Auto,
            VmAccel::Kvm => AccelChoice::Kvm,
            VmAccel::Tcg => AccelChoice::Tcg,
        },
        kernel: vm.kernel.clone(),
        qemu: vm.qemu.clone(),
        memory_overhead_mb: vm.memory_overhead_mb.value,
    };
    validate(&config, spec, &roots.cache).map(Some)
}
