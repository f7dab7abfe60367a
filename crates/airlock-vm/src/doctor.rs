//! `airlock doctor`'s lines for the `vm` backend: the accelerator (`/dev/kvm`, and why TCG
//! would be used instead), the monitor (QEMU) and the guest kernel. None is required: the
//! `linux` backend runs without them. Each probe only reads (no VM is booted: `vm.accel =
//! "auto"` boots its probe when a VM is started, see [`crate::accel`]).

use std::path::Path;

use airlock_linux::doctor::{Check, Status};

use crate::kernel::Kernel;

/// The monitor airlock starts.
pub const QEMU: &str = "qemu-system-x86_64";

/// What the host says about `/dev/kvm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvmDevice {
    Absent,
    /// Present, but this user cannot open it read-write.
    NoAccess,
    Usable,
}

/// The three vm checks for the invoking user (`cache` is airlock's cache root).
pub fn checks(cache: &Path, user: &str) -> Vec<Check> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    vec![
        kvm_check(monitor_kvm_device(), &cpuinfo, user),
        monitor_check(find_on_path(QEMU).as_deref()),
        kernel_check(Kernel::find(&cache.join("vm-kernel"))),
    ]
}

/// What this host's `/dev/kvm` is to this user.
pub fn kvm_device() -> KvmDevice {
    use rustix::fs::Access;
    if !Path::new("/dev/kvm").exists() {
        return KvmDevice::Absent;
    }
    match rustix::fs::access("/dev/kvm", Access::READ_OK | Access::WRITE_OK) {
        Ok(()) => KvmDevice::Usable,
        Err(_) => KvmDevice::NoAccess,
    }
}

/// What this host's `/dev/kvm` is to the VM's monitor as this user starts it: the invoker's
/// own access, or for root, whose QEMU runs as an id of no group that owns no file
/// (`crate::monitor`), whether others may read and write it.
pub fn monitor_kvm_device() -> KvmDevice {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        return kvm_device();
    }
    match std::fs::metadata("/dev/kvm") {
        Err(_) => KvmDevice::Absent,
        Ok(m) if m.permissions().mode() & 0o006 == 0o006 => KvmDevice::Usable,
        Ok(_) => KvmDevice::NoAccess,
    }
}

/// Whether the CPU advertises hardware virtualization (Intel VT-x `vmx`, AMD-V `svm`).
fn hardware_virtualization(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

/// `/dev/kvm`: usable for a stock kernel only with hardware virtualization behind it.
pub fn kvm_check(device: KvmDevice, cpuinfo: &str, user: &str) -> Check {
    const ID: &str = "vm_kvm";
    const TITLE: &str = "vm backend: KVM accelerator";
    let tcg = "vm.accel = \"auto\" (the default) refuses the vm backend here; vm.accel = \"tcg\" runs it under TCG (emulation: correct, but many times slower)";
    let (status, detail, fix) = match device {
        KvmDevice::Absent => (
            Status::Warning,
            format!("/dev/kvm does not exist; {tcg}"),
            Some("load the kvm module (modprobe kvm_intel or kvm_amd) on a host with hardware virtualization".to_owned()),
        ),
        KvmDevice::NoAccess if user == "root" => (
            Status::Warning,
            format!("/dev/kvm exists but a root invoker's QEMU, which runs as an unprivileged id without groups, cannot open it read-write (only a device readable and writable by others is); {tcg}"),
            Some("make /dev/kvm mode 0666 (systemd's default udev rule: KERNEL==\"kvm\", MODE=\"0666\"), or run airlock as an unprivileged user in the kvm group".to_owned()),
        ),
        KvmDevice::NoAccess => (
            Status::Warning,
            format!("/dev/kvm exists but {user} cannot open it read-write; {tcg}"),
            Some(format!("sudo usermod -aG kvm {user} (then log in again)")),
        ),
        KvmDevice::Usable if !hardware_virtualization(cpuinfo) => (
            Status::Warning,
            "/dev/kvm is usable but the CPU shows neither vmx nor svm (nested or paravirtualized KVM, which may not boot a stock kernel); vm.accel = \"auto\" (the default) takes KVM only if a probe boot reaches the guest's init, else refuses; vm.accel = \"tcg\" runs the vm backend under TCG (emulation: correct, but many times slower)"
                .to_owned(),
            Some("run on a host (or a VM with nested virtualization) whose CPU shows vmx or svm".to_owned()),
        ),
        KvmDevice::Usable => (
            Status::Ok,
            "/dev/kvm is usable and the CPU has hardware virtualization (vm.accel = \"auto\" still probes a boot before taking KVM)".to_owned(),
            None,
        ),
    };
    Check {
        id: ID,
        title: TITLE,
        status,
        required: false,
        detail,
        fix,
    }
}

/// QEMU on `PATH`.
pub fn monitor_check(qemu: Option<&Path>) -> Check {
    let (status, detail, fix) = match qemu {
        Some(path) => (Status::Ok, format!("{}", path.display()), None),
        None => (
            Status::Warning,
            format!("{QEMU} is not on PATH"),
            Some("sudo apt-get install qemu-system-x86".to_owned()),
        ),
    };
    Check {
        id: "vm_monitor",
        title: "vm backend: monitor (QEMU microvm)",
        status,
        required: false,
        detail,
        fix,
    }
}

/// The guest kernel in the cache.
pub fn kernel_check(found: Result<Kernel, crate::kernel::KernelError>) -> Check {
    let (status, detail, fix) = match found {
        Ok(k) => (
            Status::Ok,
            format!("{} ({})", k.release, k.root.display()),
            None,
        ),
        Err(err) => (
            Status::Warning,
            err.to_string(),
            Some("scripts/fetch-vm-kernel (in airlock's source tree)".to_owned()),
        ),
    };
    Check {
        id: "vm_kernel",
        title: "vm backend: guest kernel",
        status,
        required: false,
        detail,
        fix,
    }
}

fn find_on_path(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os(airlock_env::PATH)?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NESTED_PVM: &str = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr pae hypervisor\n";
    const VTX: &str = "processor\t: 0\nflags\t\t: fpu vme vmx tsc\n";

    #[test]
    fn kvm_without_vmx_or_svm_is_a_warning_that_says_tcg_would_be_used() {
        let c = kvm_check(KvmDevice::Usable, NESTED_PVM, "dev");
        assert_eq!(c.status, Status::Warning);
        assert!(c.detail.contains("TCG"), "{}", c.detail);
        assert!(c.detail.contains("vm.accel = \"tcg\""), "{}", c.detail);
        assert!(c.detail.contains("probe boot"), "{}", c.detail);
        assert!(!c.required);
        assert!(c.fix.is_some());
    }

    #[test]
    fn kvm_with_hardware_virtualization_is_ok() {
        let c = kvm_check(KvmDevice::Usable, VTX, "dev");
        assert_eq!(c.status, Status::Ok);
        assert!(c.fix.is_none());
    }

    #[test]
    fn a_root_only_dev_kvm_names_the_group_the_invoker_needs() {
        let c = kvm_check(KvmDevice::NoAccess, VTX, "alice");
        assert_eq!(c.status, Status::Warning);
        assert_eq!(
            c.fix.as_deref(),
            Some("sudo usermod -aG kvm alice (then log in again)")
        );
    }

    /// A root invoker's QEMU runs as an id without groups: the kvm group is no fix for it.
    #[test]
    fn a_dev_kvm_closed_to_a_root_invokers_monitor_says_what_it_needs() {
        let c = kvm_check(KvmDevice::NoAccess, VTX, "root");
        assert_eq!(c.status, Status::Warning);
        assert!(c.detail.contains("unprivileged id"), "{}", c.detail);
        assert!(c.detail.contains("vm.accel = \"tcg\""), "{}", c.detail);
        let fix = c.fix.unwrap();
        assert!(fix.contains("0666") && !fix.contains("usermod"), "{fix}");
    }

    #[test]
    fn a_missing_monitor_or_kernel_says_how_to_get_it() {
        let m = monitor_check(None);
        assert_eq!(m.status, Status::Warning);
        assert!(m.fix.unwrap().contains("qemu-system-x86"));
        let dir = tempfile::tempdir().unwrap();
        let k = kernel_check(Kernel::find(dir.path()));
        assert_eq!(k.status, Status::Warning);
        assert!(k.fix.unwrap().contains("fetch-vm-kernel"));
    }
}
