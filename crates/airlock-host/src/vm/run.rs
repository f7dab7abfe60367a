//! `airlock run` with the `vm` backend: the same steps as `crate::run::EphemeralRun` (the
//! cgroup with its janitor, the egress relays with a proxy started on the first connection,
//! then the sandbox), with QEMU in place of namespaces. QEMU is this process's child, dies
//! with it (`PR_SET_PDEATHSIG`) and runs inside the cgroup from its start.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock_config::Roots;
use airlock_linux::spec::SandboxSpec;

use super::{boot, cgroup_spec, BootPlace, Booted, VmSettings};
use crate::error::{ErrorKind, HostError};
use crate::paths::ensure_root;
use crate::run::limits::{self, OutOfMemory, RunCgroup};
use crate::run::{Phases, RunEgress};

/// How long `run` waits for the guest (TCG on a loaded host is slow).
const BOOT_LIMIT: Duration = Duration::from_secs(600);

/// A booted ephemeral VM with its proxy and cgroup; [`VmRun::finish`] ends all three.
pub struct VmRun {
    booted: Booted,
    egress: Option<RunEgress>,
    cgroup: RunCgroup,
    /// `<runtime>/vm-runs/<id>`: its owner marker, QEMU's log, the console, the channel socket
    /// while booting.
    dir: PathBuf,
    /// The imported image's hold: `image rm` refuses while this run's VM lives.
    _image: Option<airlock_image::ImageHold>,
}

impl VmRun {
    /// Validation is done (`super::validate` gave `settings`): builds or reuses the
    /// initramfs, then starts the cgroup, the egress relays and the VM.
    pub fn start(
        roots: &Roots,
        project_root: Option<PathBuf>,
        spec: &mut SandboxSpec,
        settings: &VmSettings,
        phases: &mut Phases,
        warn: limits::Warn,
    ) -> Result<VmRun, HostError> {
        ensure_root(roots, &roots.runtime)?;
        let image = crate::run::hold_image(roots, &spec.image)?;
        let base = roots.runtime.join("vm-runs");
        ensure_root(roots, &base)?;
        // Directories of runs whose airlock was killed (QEMU died with it, its logs stayed):
        // removed only when their owner marker names a process that is gone (L9).
        airlock_linux::host::sweep_stale(&base);
        let vm = super::start_request(settings)?;
        phases.done("initramfs");
        let dir = airlock_linux::host::create_private_dir(&base, &spec.id)
            .map_err(|e| HostError::internal("run.vm_dir", e.to_string()))?;
        let started = Self::start_in(roots, project_root, spec, &vm, &dir, phases, warn);
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        started.map(|run| VmRun {
            _image: image,
            ..run
        })
    }

    fn start_in(
        roots: &Roots,
        project_root: Option<PathBuf>,
        spec: &mut SandboxSpec,
        vm: &super::VmStart,
        dir: &std::path::Path,
        phases: &mut Phases,
        warn: limits::Warn,
    ) -> Result<VmRun, HostError> {
        let mut cgroup = limits::prepare(&cgroup_spec(spec, vm), warn)?;
        phases.done("cgroup");
        let cgroup_error = |e: airlock_linux::cgroup::CgroupError| {
            HostError::new(
                ErrorKind::BackendUnavailable,
                "backend.cgroup",
                format!("cannot open the sandbox's cgroup: {e}"),
            )
        };
        let egress =
            match spec.egress.is_some() {
                true => match cgroup.join_fds().map_err(cgroup_error).and_then(|join| {
                    crate::run::start_egress(roots, project_root, spec, join, warn)
                }) {
                    Ok(e) => Some(e),
                    Err(e) => {
                        cgroup.destroy();
                        return Err(e);
                    }
                },
                false => None,
            };
        phases.done("egress");
        let booted = cgroup.join_fds().map_err(cgroup_error).and_then(|join| {
            let place = BootPlace {
                dir,
                join: join.as_ref().map(|j| j.raw()).unwrap_or_default(),
                egress_socket: spec
                    .egress
                    .as_ref()
                    .map(|e| e.host_dir.join(crate::egress::PROXY_SOCKET)),
            };
            boot(spec, vm, place, Instant::now() + BOOT_LIMIT)
        });
        match booted {
            Ok(booted) => {
                phases.done("vm-boot");
                Ok(VmRun {
                    booted,
                    egress,
                    cgroup,
                    dir: dir.to_path_buf(),
                    _image: None,
                })
            }
            Err(e) => {
                drop(egress);
                cgroup.destroy();
                Err(e)
            }
        }
    }

    /// A new stream to the guest's PID 1; authenticate it with [`VmRun::key`].
    pub fn open_stream(&self) -> Result<UnixStream, HostError> {
        self.booted.machine.open().map_err(|e| {
            HostError::internal("run.stream", format!("cannot open a stream to the VM: {e}"))
        })
    }

    /// The epoch key of this VM's streams.
    pub fn key(&self) -> [u8; 32] {
        self.booted.key
    }

    /// `Some` when the OOM killer ended a process of the cgroup (QEMU or the proxy).
    pub fn out_of_memory(&self) -> Option<OutOfMemory> {
        self.cgroup.out_of_memory()
    }

    /// Stops the guest (closing its channel; QEMU killed after 5 s), the proxy and the
    /// cgroup, and removes the run's directory. Returns whether QEMU had to be killed.
    pub fn finish(self, phases: &mut Phases) -> bool {
        let VmRun {
            booted,
            egress,
            mut cgroup,
            dir,
            _image,
        } = self;
        let killed = booted.machine.shutdown(Duration::from_secs(5));
        phases.done("vm-stop");
        cgroup.destroy();
        drop(egress);
        let _ = std::fs::remove_dir_all(&dir);
        phases.done("cleanup");
        killed
    }
}
