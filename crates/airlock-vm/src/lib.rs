//! airlock-vm: the `vm` backend's own parts (docs/vm.md).
//!
//! - [`kernel`]: the guest kernel `scripts/fetch-vm-kernel` unpacked, and its modules in
//!   `modules.dep` order.
//! - [`cpio`]: the `newc` writer the initramfs is made with.
//! - [`mux`]: many flow-controlled streams over the one virtio-serial port.
//! - [`monitor`]: the helper that runs a root caller's QEMU as an unprivileged id with
//!   id-mapped shares.

pub mod accel;
pub mod boot;
pub mod cache;
pub mod cpio;
pub mod doctor;
pub mod guest;
pub mod initramfs;
pub mod kernel;
pub mod limits;
pub mod machine;
pub mod monitor;
pub mod mux;
