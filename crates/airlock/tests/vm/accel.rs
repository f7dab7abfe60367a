use std::time::Instant;

use airlock_vm::accel::{probe_boot, resolve, AccelChoice, AccelError};
use airlock_vm::cache;
use airlock_vm::doctor::{kvm_device, KvmDevice};
use airlock_vm::initramfs::Contents;
use airlock_vm::kernel::GUEST_MODULES;
use airlock_vm::machine::{Accel, HostShare, MachineSpec};

use super::{initramfs_cache, needs_kernel, small, QEMU};
use crate::common::AIRLOCK;

/// `auto` on this host: the probe boot under KVM either reaches the guest's init (then KVM is
/// taken) or the refusal carries why (here: a nested KVM that stalls a stock kernel), and
/// the probe's QEMU is gone either way.
#[test]
fn vm_auto_accel_takes_kvm_only_after_a_probe_boot_and_says_why_not() {
    if !airlock_testkit::needs_tool(QEMU) {
        return;
    }
    let Some(kernel) = needs_kernel() else {
        return;
    };
    let device = kvm_device();
    if device != KvmDevice::Usable {
        let err = resolve(AccelChoice::Auto, device, || unreachable!()).unwrap_err();
        assert!(err.to_string().contains("/dev/kvm"), "{err}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let contents = Contents::for_exe(AIRLOCK.as_ref(), &kernel, GUEST_MODULES).unwrap();
    let initramfs = cache::initramfs(&initramfs_cache(), &contents, &kernel).unwrap();
    let spec = MachineSpec {
        qemu: QEMU.into(),
        kernel: kernel.image.clone(),
        initramfs: initramfs.path.clone(),
        accel: Accel::Tcg,
        limits: small(),
        dir: dir.path().to_path_buf(),
        shares: vec![HostShare {
            tag: "usr".into(),
            host: "/usr".into(),
            writable: false,
            id_mapped: false,
        }],
        egress_socket: None,
        monitor: Default::default(),
    };
    let started = Instant::now();
    let mut probe_result = None;
    let chosen = resolve(AccelChoice::Auto, device, || {
        let r = probe_boot(&spec);
        probe_result = Some(r.clone());
        r.map(|_| ())
    });
    eprintln!(
        "vm: auto probe {probe_result:?} after {:?}",
        started.elapsed()
    );
    match chosen {
        Ok(accel) => {
            assert_eq!(accel, Accel::Kvm);
            assert!(matches!(probe_result, Some(Ok(_))));
        }
        Err(AccelError::NoKvm { why }) => {
            assert!(why.contains("probe boot under KVM"), "{why}");
            assert!(matches!(probe_result, Some(Err(_))));
        }
        Err(other) => panic!("unexpected refusal: {other}"),
    }
    // Nothing of the probe is left running: no QEMU holds the probe's directory.
    let ours = dir.path().to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(&ours),
            "the probe's QEMU (pid {:?}) is still running",
            entry.file_name()
        );
    }
}
