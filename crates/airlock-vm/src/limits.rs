//! A sandbox's `memory_mb` and `cpus` as a VM's size: guest RAM (`-m`) and vCPUs (`-smp`).
//!
//! In a `linux` sandbox both are ceilings (cgroup `memory.max`, `cpu.max`) and a ceiling above
//! what the host has is the host. A VM gets them the same way: its RAM is `memory_mb`, at most
//! the host's memory (QEMU allocates guest RAM as it is touched, so a large value costs
//! nothing until used); its vCPUs are `cpus` rounded up (a fraction like `0.5` still needs one
//! vCPU: the fraction itself is a CPU-time ceiling on the monitor's cgroup), at least one, at
//! most the host's CPUs; no `cpus` means every host CPU, as no `cpu.max` does.

use std::path::Path;

/// The least guest RAM: the kernel, the ~40 MB initramfs unpacked in RAM and the guest's
/// own processes (the same minimum as the configuration's `memory_mb`).
pub const MIN_MEMORY_MB: u64 = 256;

/// A limit could not be turned into a VM's size.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("memory_mb = {value} is too small for a VM: it needs at least {MIN_MEMORY_MB} MiB")]
    MemoryTooSmall { value: u64 },
    #[error("cpus = {value} is not a CPU count: it must be a finite number greater than 0")]
    Cpus { value: f64 },
    #[error("cannot read the host's {what} from {path}: {why}")]
    Host {
        what: &'static str,
        path: &'static str,
        why: String,
    },
}

/// What the host has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub memory_mb: u64,
    pub cpus: u32,
}

impl Host {
    /// This host: `MemTotal` from `/proc/meminfo`, the CPUs this process may run on.
    pub fn current() -> Result<Host, LimitsError> {
        let meminfo = "/proc/meminfo";
        let host = |why: String| LimitsError::Host {
            what: "memory",
            path: meminfo,
            why,
        };
        let text = std::fs::read_to_string(Path::new(meminfo)).map_err(|e| host(e.to_string()))?;
        let kb = text
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| host("no MemTotal line in kB".into()))?;
        let cpus = std::thread::available_parallelism().map_err(|e| LimitsError::Host {
            what: "CPU count",
            path: "sched_getaffinity",
            why: e.to_string(),
        })?;
        Ok(Host {
            memory_mb: kb / 1024,
            cpus: u32::try_from(cpus.get()).unwrap_or(u32::MAX),
        })
    }
}

/// A VM's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Guest RAM, MiB (`-m`).
    pub memory_mb: u64,
    /// vCPUs (`-smp`).
    pub vcpus: u32,
}

impl Limits {
    /// The size for a sandbox's `memory_mb` and `cpus` on `host`.
    pub fn new(memory_mb: u64, cpus: Option<f64>, host: Host) -> Result<Limits, LimitsError> {
        if memory_mb < MIN_MEMORY_MB {
            return Err(LimitsError::MemoryTooSmall { value: memory_mb });
        }
        let host_cpus = host.cpus.max(1);
        let vcpus = match cpus {
            None => host_cpus,
            Some(value) if !value.is_finite() || value <= 0.0 => {
                return Err(LimitsError::Cpus { value })
            }
            Some(value) if value >= f64::from(host_cpus) => host_cpus,
            // Below host_cpus (a u32), so the rounded-up value fits.
            Some(value) => (value.ceil() as u32).max(1),
        };
        Ok(Limits {
            memory_mb: memory_mb.min(host.memory_mb.max(MIN_MEMORY_MB)),
            vcpus,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: Host = Host {
        memory_mb: 8192,
        cpus: 4,
    };

    #[test]
    fn vm_limits_round_cpus_up_and_keep_them_within_the_host() {
        let vcpus = |cpus| Limits::new(512, cpus, HOST).unwrap().vcpus;
        assert_eq!(vcpus(Some(0.5)), 1);
        assert_eq!(vcpus(Some(1.0)), 1);
        assert_eq!(vcpus(Some(2.2)), 3);
        assert_eq!(vcpus(Some(64.0)), 4);
        assert_eq!(vcpus(None), 4);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(
                    Limits::new(512, Some(bad), HOST),
                    Err(LimitsError::Cpus { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn vm_limits_give_the_memory_asked_for_up_to_the_host_and_refuse_too_little() {
        assert_eq!(Limits::new(512, None, HOST).unwrap().memory_mb, 512);
        assert_eq!(Limits::new(1 << 30, None, HOST).unwrap().memory_mb, 8192);
        assert!(matches!(
            Limits::new(255, None, HOST),
            Err(LimitsError::MemoryTooSmall { value: 255 })
        ));
    }

    #[test]
    fn vm_limits_read_this_host() {
        let host = Host::current().unwrap();
        assert!(host.cpus >= 1);
        assert!(host.memory_mb >= 64, "{host:?}");
    }
}
