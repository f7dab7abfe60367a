//! How the sandbox's memory limit is shared among its tmpfs mounts (issue 9.10, PRODUCT I8).
//!
//! Every byte a sandbox writes outside its workspaces and mounts lands in a tmpfs, i.e. in host
//! RAM. With a cgroup those pages are charged to the sandbox's memory limit; without one (an
//! unprivileged invoker without delegated cgroups) nothing else bounds them. So the writable
//! tmpfs mounts are sized to stay within `memory_mb` together:
//! - the scratch tmpfs holds the new root (`/`, `/tmp`, `/var/tmp`, `/run`, `$HOME`, every empty
//!   top-level directory) *and* the overlay upper layers (writes to `/usr`, `/etc`, …) and the
//!   generated `/etc` files: one budget, so a sandbox may use it where it needs it;
//! - `/dev/shm` gets a quarter of it (POSIX shared memory, browsers, `multiprocessing`);
//! - `/dev` holds only device-node mount points and links: a fixed 1 MiB.
//!
//! Read-only mask tmpfs mounts hold nothing and cannot be written, so they need no size.

/// `size=` of `/dev` (KiB).
pub const DEV_KIB: u64 = 1024;

/// Sizes in KiB of the writable tmpfs mounts; `None` leaves the kernel's default (half of RAM),
/// used only when the sandbox has no memory limit at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmpfsSizes {
    pub scratch_kib: Option<u64>,
    pub shm_kib: Option<u64>,
    pub dev_kib: u64,
}

impl TmpfsSizes {
    /// Sizes for a sandbox limited to `memory_mb` (or unlimited).
    pub fn for_memory(memory_mb: Option<u64>) -> TmpfsSizes {
        let Some(mb) = memory_mb else {
            return TmpfsSizes {
                scratch_kib: None,
                shm_kib: None,
                dev_kib: DEV_KIB,
            };
        };
        let total = mb.saturating_mul(1024).max(4 * DEV_KIB);
        let shm = total / 4;
        TmpfsSizes {
            scratch_kib: Some(total - shm - DEV_KIB),
            shm_kib: Some(shm),
            dev_kib: DEV_KIB,
        }
    }

    /// The `size` parameter of the scratch tmpfs (made with `fsconfig`, not a mount option
    /// string); `None` for the kernel default.
    pub fn scratch_size(&self) -> Option<String> {
        self.scratch_kib.map(|k| format!("{}k", k.max(1)))
    }

    /// The mount option for `/dev/shm`.
    pub fn shm_option(&self) -> String {
        size_option(self.shm_kib)
    }

    /// The mount option for `/dev`.
    pub fn dev_option(&self) -> String {
        size_option(Some(self.dev_kib))
    }
}

/// `,size=Nk`, or nothing for the kernel default (`size=0` would mean *unlimited*).
fn size_option(kib: Option<u64>) -> String {
    match kib {
        Some(k) => format!(",size={}k", k.max(1)),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_tmpfs_mounts_together_stay_within_memory_mb() {
        for mb in [256, 257, 1000, 8192, 16 * 1024 * 1024 * 1024] {
            let s = TmpfsSizes::for_memory(Some(mb));
            let sum = s.scratch_kib.unwrap() + s.shm_kib.unwrap() + s.dev_kib;
            assert!(sum <= mb * 1024, "{mb} MiB: {s:?}");
            assert!(s.scratch_kib.unwrap() >= mb * 1024 / 2, "{mb} MiB: {s:?}");
        }
    }

    #[test]
    fn sizes_are_never_zero_which_tmpfs_reads_as_unlimited() {
        let s = TmpfsSizes::for_memory(Some(0));
        assert_ne!(s.scratch_size().as_deref(), Some("0k"));
        assert!(!s.shm_option().contains("size=0k"));
        assert_eq!(TmpfsSizes::for_memory(None).scratch_size(), None);
        assert_eq!(
            TmpfsSizes::for_memory(Some(256)).scratch_size().as_deref(),
            Some("195584k")
        );
    }
}
