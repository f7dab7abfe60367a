//! Control-file contents: which files a limit is written to, in which order, and small
//! readers for `cgroup.procs` and `key value` files.
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{CgroupError, CgroupLimits, Controller, Hierarchy};

/// CFS period used for CPU bandwidth limits: 100 ms, the kernel default.
pub const CPU_PERIOD_US: u64 = 100_000;
/// Smallest quota the kernel accepts (1 ms).
const CPU_MIN_QUOTA_US: u64 = 1_000;

/// One write to a control file of a sandbox cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitWrite {
    pub file: &'static str,
    pub value: String,
}

fn w(file: &'static str, value: impl ToString) -> LimitWrite {
    LimitWrite {
        file,
        value: value.to_string(),
    }
}

/// The quota in microseconds per [`CPU_PERIOD_US`] for `cpus` CPUs.
pub fn cpu_quota_us(cpus: f64) -> u64 {
    ((cpus * CPU_PERIOD_US as f64).round() as u64).max(CPU_MIN_QUOTA_US)
}

/// Writes that apply `limits` in `h`, in order; `exists(file)` says whether an optional file
/// (swap accounting) is present in the sandbox directory.
///
/// Memory also caps swap (v2 `memory.swap.max = 0`, v1 `memsw = limit`) so a hog is OOM-killed
/// instead of pushing the host into swap. v1 writes `memory.limit_in_bytes` first because the
/// kernel refuses a `memsw` limit below the memory limit.
pub fn limit_writes(
    h: &Hierarchy,
    limits: &CgroupLimits,
    exists: impl Fn(&str) -> bool,
) -> Vec<LimitWrite> {
    let mut out = Vec::new();
    let has = |c| h.controllers.contains(&c);
    if let (Some(bytes), true) = (limits.memory_bytes, has(Controller::Memory)) {
        if h.v2 {
            out.push(w("memory.max", bytes));
            if exists("memory.swap.max") {
                out.push(w("memory.swap.max", 0));
            }
        } else {
            out.push(w("memory.limit_in_bytes", bytes));
            if exists("memory.memsw.limit_in_bytes") {
                out.push(w("memory.memsw.limit_in_bytes", bytes));
            }
        }
    }
    if let (Some(max), true) = (limits.pids_max, has(Controller::Pids)) {
        out.push(w("pids.max", max));
    }
    if let (Some(cpus), true) = (limits.cpus, has(Controller::Cpu)) {
        let quota = cpu_quota_us(cpus);
        if h.v2 {
            out.push(w("cpu.max", format!("{quota} {CPU_PERIOD_US}")));
        } else {
            out.push(w("cpu.cfs_period_us", CPU_PERIOD_US));
            out.push(w("cpu.cfs_quota_us", quota));
        }
    }
    out
}

/// The line enabling `controllers` in a v2 `cgroup.subtree_control`.
pub fn v2_enable_line(controllers: &[Controller]) -> String {
    controllers
        .iter()
        .map(|c| format!("+{}", c.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes `value` to an existing control file in one `write` (cgroupfs parses per write).
pub fn write_control(path: &Path, value: &str) -> Result<(), CgroupError> {
    let err = |source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_owned(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(err)?;
    file.write_all(value.as_bytes()).map_err(err)
}

/// Pids listed in `dir/cgroup.procs`; a directory already gone counts as empty.
pub fn read_procs(dir: &Path) -> Result<Vec<u32>, CgroupError> {
    let path: PathBuf = dir.join("cgroup.procs");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(CgroupError::Read { path, source }),
    }
}

/// The value of `key` in a `key value` per line file (`memory.events`, `memory.oom_control`).
pub fn parse_key_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}
