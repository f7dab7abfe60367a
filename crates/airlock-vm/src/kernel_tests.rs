use super::*;

/// A fake kernel tree with the given modules.dep and builtin list.
fn tree(dep: &str, builtin: &str) -> (tempfile::TempDir, Kernel) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("linux-image-6.1.0-9-amd64-6.1.1-1");
    let modules = root.join("lib/modules/6.1.0-9-amd64");
    std::fs::create_dir_all(&modules).unwrap();
    std::fs::create_dir_all(root.join("boot")).unwrap();
    std::fs::write(root.join("boot/vmlinuz-6.1.0-9-amd64"), b"").unwrap();
    std::fs::write(modules.join("modules.dep"), dep).unwrap();
    std::fs::write(modules.join("modules.builtin"), builtin).unwrap();
    std::fs::write(root.join(".complete"), b"").unwrap();
    let kernel = Kernel::find(dir.path()).unwrap();
    (dir, kernel)
}

const DEP: &str = "\
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
";

fn names(order: &[PathBuf]) -> Vec<String> {
    order
        .iter()
        .map(|p| module_name(&p.to_string_lossy()))
        .collect()
}

#[test]
fn every_module_loads_after_what_it_depends_on_and_once() {
    let (_dir, kernel) = tree(DEP, "");
    assert_eq!(kernel.release, "6.1.0-9-amd64");
    let order = names(
        &kernel
            .load_order(&["virtio_mmio", "9pnet_virtio", "9p"])
            .unwrap(),
    );
    assert_eq!(
        order,
        [
            "virtio",
            "virtio_ring",
            "virtio_mmio",
            "9pnet",
            "9pnet_virtio",
            "netfs",
            "fscache",
            "9p"
        ]
    );
}

#[test]
fn a_built_in_module_needs_no_file() {
    let (_dir, kernel) = tree(DEP, "kernel/drivers/virtio/virtio_mmio.ko\n");
    assert!(kernel.load_order(&["virtio_mmio"]).unwrap().is_empty());
}

#[test]
fn an_unknown_module_is_named_in_the_error() {
    let (_dir, kernel) = tree(DEP, "");
    let err = kernel.load_order(&["vsock"]).unwrap_err();
    assert!(
        matches!(&err, KernelError::UnknownModule { name, .. } if name == "vsock"),
        "{err}"
    );
}

#[test]
fn an_index_path_leaving_the_module_tree_is_refused() {
    let (_dir, kernel) = tree("kernel/a.ko: ../../../etc/shadow\n", "");
    let err = kernel.load_order(&["a"]).unwrap_err();
    assert!(matches!(err, KernelError::BadLine { line: 1, .. }), "{err}");
}

#[test]
fn a_dependency_cycle_is_an_error_not_a_hang() {
    let (_dir, kernel) = tree("kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n", "");
    assert!(matches!(
        kernel.load_order(&["a"]),
        Err(KernelError::Cycle { .. })
    ));
}

#[test]
fn a_half_unpacked_kernel_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("linux-image-x/boot")).unwrap();
    assert!(matches!(
        Kernel::find(dir.path()),
        Err(KernelError::Missing { .. })
    ));
}
