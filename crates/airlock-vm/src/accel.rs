//! `vm.accel = "auto" | "kvm" | "tcg"`: which accelerator a VM gets, decided before anything
//! is started.
//!
//! - `tcg`: QEMU's translator, always (needs nothing from the host; many times slower).
//! - `kvm`: KVM, refused with the reason when `/dev/kvm` is absent or not openable; no probe
//!   (the user chose it: a guest that does not come up reports its console as any boot does).
//! - `auto` (the default): KVM only when a **probe boot** succeeds — the real guest kernel and
//!   initramfs under KVM, up to its hello, within [`PROBE_TIMEOUT`] — because a usable
//!   `/dev/kvm` is not proof (a nested or paravirtualized KVM can stall a stock kernel during
//!   boot). Otherwise it refuses with the reason and names `vm.accel = "tcg"`: falling back to
//!   emulation silently would turn a 1 s start into tens of seconds without saying why.

use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::boot::{GuestConfig, GuestUser, BOOT_VERSION};
use crate::doctor::KvmDevice;
use crate::machine::{Accel, Machine, MachineSpec};

/// How long a probe boot may take to the guest's hello (KVM boots it in about a second).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// The `vm.accel` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    #[default]
    Auto,
    Kvm,
    Tcg,
}

/// The accelerator could not be chosen.
#[derive(Debug, thiserror::Error)]
pub enum AccelError {
    #[error("vm.accel = {value:?} is not an accelerator: use \"auto\", \"kvm\" or \"tcg\"")]
    Unknown { value: String },
    #[error(
        "vm.accel = \"kvm\" but {why}; fix /dev/kvm (see `airlock doctor`) or set \
         vm.accel = \"tcg\" to emulate (many times slower)"
    )]
    KvmUnavailable { why: String },
    #[error(
        "vm.accel = \"auto\" found no working KVM: {why}; set vm.accel = \"tcg\" to run the vm \
         backend under emulation (correct, many times slower), or use a host whose KVM boots \
         a stock kernel (see `airlock doctor`)"
    )]
    NoKvm { why: String },
}

impl FromStr for AccelChoice {
    type Err = AccelError;

    fn from_str(value: &str) -> Result<Self, AccelError> {
        match value {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            other => Err(AccelError::Unknown {
                value: other.to_owned(),
            }),
        }
    }
}

/// Why `/dev/kvm` cannot be used, if it cannot.
fn device_problem(device: KvmDevice) -> Option<&'static str> {
    match device {
        KvmDevice::Absent => Some("/dev/kvm does not exist"),
        KvmDevice::NoAccess => Some(
            "/dev/kvm cannot be opened read-write by the monitor (the invoker; for a root \
             invoker, an unprivileged id without groups)",
        ),
        KvmDevice::Usable => None,
    }
}

/// The accelerator for `choice` on a host whose `/dev/kvm` is `device`; `probe` boots a guest
/// under KVM and says why it did not come up (called only for `auto` with a usable device).
pub fn resolve(
    choice: AccelChoice,
    device: KvmDevice,
    probe: impl FnOnce() -> Result<(), String>,
) -> Result<Accel, AccelError> {
    match choice {
        AccelChoice::Tcg => Ok(Accel::Tcg),
        AccelChoice::Kvm => match device_problem(device) {
            Some(why) => Err(AccelError::KvmUnavailable { why: why.into() }),
            None => Ok(Accel::Kvm),
        },
        AccelChoice::Auto => {
            if let Some(why) = device_problem(device) {
                return Err(AccelError::NoKvm { why: why.into() });
            }
            probe().map_err(|why| AccelError::NoKvm { why })?;
            Ok(Accel::Kvm)
        }
    }
}

/// Boots `spec` (its accelerator forced to KVM, no shares, no egress) up to the guest's hello,
/// then shuts it down. Returns the time to the hello, or why the guest did not come up.
pub fn probe_boot(spec: &MachineSpec) -> Result<Duration, String> {
    let spec = MachineSpec {
        accel: Accel::Kvm,
        shares: spec
            .shares
            .iter()
            .filter(|s| !s.writable)
            .cloned()
            .collect(),
        egress_socket: None,
        ..spec.clone()
    };
    let key = airlock_protocol::Key::generate().map_err(|e| e.to_string())?;
    let config = GuestConfig {
        version: BOOT_VERSION,
        key: key.to_hex(),
        hostname: "airlock-probe".into(),
        user: GuestUser {
            name: "probe".into(),
            uid: 65534,
            gid: 65534,
            home: "/".into(),
        },
        env: Vec::new(),
        root_allowed: false,
        usr_tag: spec
            .shares
            .first()
            .map(|s| s.tag.clone())
            .unwrap_or_default(),
        // The hello comes before the root is built: which share this is does not matter.
        image_root: false,
        shares: Vec::new(),
        protect: Vec::new(),
        egress_port: None,
    };
    let started = Instant::now();
    let machine = Machine::boot(&spec, &config, started + PROBE_TIMEOUT)
        .map_err(|e| format!("a probe boot under KVM did not reach the guest's init ({e})"))?;
    let took = started.elapsed();
    machine.shutdown(Duration::from_secs(5));
    Ok(took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accel_setting_parses_the_three_values_and_names_them_for_anything_else() {
        assert_eq!("auto".parse::<AccelChoice>().unwrap(), AccelChoice::Auto);
        assert_eq!("kvm".parse::<AccelChoice>().unwrap(), AccelChoice::Kvm);
        assert_eq!("tcg".parse::<AccelChoice>().unwrap(), AccelChoice::Tcg);
        assert_eq!(AccelChoice::default(), AccelChoice::Auto);
        let err = "KVM".parse::<AccelChoice>().unwrap_err().to_string();
        assert!(err.contains("\"KVM\"") && err.contains("\"tcg\""), "{err}");
        let toml: AccelChoice = serde_json::from_str("\"tcg\"").unwrap();
        assert_eq!(toml, AccelChoice::Tcg);
        assert!(serde_json::from_str::<AccelChoice>("\"hvf\"").is_err());
    }

    #[test]
    fn auto_takes_kvm_only_when_the_probe_boot_succeeds() {
        assert_eq!(
            resolve(AccelChoice::Auto, KvmDevice::Usable, || Ok(())).unwrap(),
            Accel::Kvm
        );
        let err = resolve(AccelChoice::Auto, KvmDevice::Usable, || {
            Err("stalled after Probing EDD".into())
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("stalled after Probing EDD") && err.contains("vm.accel = \"tcg\""),
            "{err}"
        );
    }

    #[test]
    fn auto_refuses_without_a_usable_dev_kvm_and_does_not_probe() {
        for device in [KvmDevice::Absent, KvmDevice::NoAccess] {
            let err = resolve(AccelChoice::Auto, device, || {
                panic!("probed without a usable /dev/kvm")
            })
            .unwrap_err();
            assert!(matches!(err, AccelError::NoKvm { .. }), "{err}");
            assert!(err.to_string().contains("/dev/kvm"), "{err}");
        }
    }

    #[test]
    fn explicit_kvm_needs_the_device_but_no_probe_and_tcg_needs_nothing() {
        let no_probe = || -> Result<(), String> { panic!("an explicit choice was probed") };
        assert_eq!(
            resolve(AccelChoice::Kvm, KvmDevice::Usable, no_probe).unwrap(),
            Accel::Kvm
        );
        let err = resolve(AccelChoice::Kvm, KvmDevice::NoAccess, no_probe).unwrap_err();
        assert!(matches!(err, AccelError::KvmUnavailable { .. }), "{err}");
        for device in [KvmDevice::Absent, KvmDevice::NoAccess, KvmDevice::Usable] {
            assert_eq!(
                resolve(AccelChoice::Tcg, device, no_probe).unwrap(),
                Accel::Tcg
            );
        }
    }
}
