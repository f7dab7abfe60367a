//! `backend` and `[vm]` (user config only): which backend `up` and `run` create sandboxes
//! with, and how the `vm` backend runs its microVMs. Checked here as values (spelling, ranges,
//! absolute paths); whether QEMU and the kernel are really there is the host's check, before
//! any side effect of the command that uses them.

use std::path::PathBuf;

use serde::Serialize;

use crate::diagnostics::Diagnostic;
use crate::effective::{Origin, Sourced};
use crate::parse::ParsedFile;

/// The sandbox backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Namespaces, seccomp and cgroups on the host's kernel.
    #[default]
    Linux,
    /// A QEMU microVM with its own kernel.
    Vm,
}

impl BackendKind {
    /// Parses `"linux"` or `"vm"`.
    pub fn parse(text: &str) -> Result<BackendKind, String> {
        match text {
            "linux" => Ok(BackendKind::Linux),
            "vm" => Ok(BackendKind::Vm),
            other => Err(format!(
                "{other:?} is not a backend: use \"linux\" (namespaces) or \"vm\" (a microVM)"
            )),
        }
    }
}

/// `vm.accel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VmAccel {
    #[default]
    Auto,
    Kvm,
    Tcg,
}

/// Default of `vm.memory_overhead_mb`.
pub const DEFAULT_VM_OVERHEAD_MB: u64 = 256;
/// Bounds of `vm.memory_overhead_mb`.
pub const VM_OVERHEAD_RANGE: std::ops::RangeInclusive<u64> = 64..=4096;

/// The checked `[vm]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VmSettings {
    pub accel: Sourced<VmAccel>,
    /// A kernel directory; `None`: the newest fetched one.
    pub kernel: Option<PathBuf>,
    /// QEMU's executable; `None`: the one on `PATH`.
    pub qemu: Option<PathBuf>,
    pub memory_overhead_mb: Sourced<u64>,
}

impl Default for VmSettings {
    fn default() -> Self {
        VmSettings {
            accel: Sourced::new(VmAccel::Auto, Origin::Default),
            kernel: None,
            qemu: None,
            memory_overhead_mb: Sourced::new(DEFAULT_VM_OVERHEAD_MB, Origin::Default),
        }
    }
}

/// `backend` of the user config (default `linux`).
pub(crate) fn backend(user: Option<&ParsedFile>, d: &mut Vec<Diagnostic>) -> Sourced<BackendKind> {
    match user.and_then(|f| Some((f, f.raw.backend.as_deref()?))) {
        None => Sourced::new(BackendKind::Linux, Origin::Default),
        Some((file, text)) => match BackendKind::parse(text) {
            Ok(kind) => Sourced::new(kind, Origin::User),
            Err(message) => {
                d.push(file.diag("backend", message));
                Sourced::new(BackendKind::Linux, Origin::Default)
            }
        },
    }
}

/// `[vm]` of the user config; every problem is one diagnostic naming its key.
pub(crate) fn vm(user: Option<&ParsedFile>, d: &mut Vec<Diagnostic>) -> VmSettings {
    let mut out = VmSettings::default();
    let Some((file, raw)) = user.and_then(|f| Some((f, f.raw.vm.as_ref()?))) else {
        return out;
    };
    if let Some(text) = &raw.accel {
        match text.as_str() {
            "auto" => out.accel = Sourced::new(VmAccel::Auto, Origin::User),
            "kvm" => out.accel = Sourced::new(VmAccel::Kvm, Origin::User),
            "tcg" => out.accel = Sourced::new(VmAccel::Tcg, Origin::User),
            other => d.push(file.diag(
                "vm.accel",
                format!(
                    "{other:?} is not an accelerator: use \"auto\" (KVM when it boots a guest), \
                     \"kvm\" or \"tcg\" (emulation, many times slower)"
                ),
            )),
        }
    }
    let mut absolute = |key: &str, value: &Option<String>| {
        let text = value.as_ref()?;
        let path = PathBuf::from(text);
        if path.is_absolute() {
            Some(path)
        } else {
            d.push(file.diag(
                key,
                format!("{text:?} is not an absolute path; write the full path, e.g. /usr/bin/…"),
            ));
            None
        }
    };
    out.kernel = absolute("vm.kernel", &raw.kernel);
    out.qemu = absolute("vm.qemu", &raw.qemu);
    if let Some(mb) = raw.memory_overhead_mb {
        if VM_OVERHEAD_RANGE.contains(&mb) {
            out.memory_overhead_mb = Sourced::new(mb, Origin::User);
        } else {
            d.push(file.diag(
                "vm.memory_overhead_mb",
                format!(
                    "{mb} is out of range: use {} to {} (MiB QEMU may use beyond the guest's RAM)",
                    VM_OVERHEAD_RANGE.start(),
                    VM_OVERHEAD_RANGE.end()
                ),
            ));
        }
    }
    out
}
