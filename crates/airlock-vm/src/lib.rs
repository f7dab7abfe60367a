//! airlock-vm: the `vm` backend's own parts (docs/vm.md).
//!
//! - [`kernel`]: the guest kernel `scripts/fetch-vm-kernel` unpacked, and its modules in
//!   `modules.dep` order.
//! - [`cpio`]: the `newc` writer the initramfs is made with.

pub mod cpio;
pub mod kernel;
