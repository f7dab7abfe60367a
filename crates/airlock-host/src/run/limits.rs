//! The sandbox's cgroup for `run` (PRODUCT I8): created before the sandbox, joined by the init
//! stage between its fork and its exec, before PID 1 exists, removed after it (and by the janitor if airlock is killed).
//! A persistent sandbox's keeper runs no janitor ([`prepare_without_janitor`]): should it be
//! killed, the PDEATHSIG chain ends the sandbox's processes and `down`/`clean`/`up` remove the
//! cgroup it left (`Cgroup::orphaned`: its owner mark names the dead keeper).
//!
//! Rule (issue 3): where this user may not create cgroups, *default* limits are skipped with a
//! warning naming `airlock doctor`; a limit set explicitly (config or flag) refuses the run.

use std::time::Duration;

use airlock_linux::cgroup::{Cgroup, CgroupError, CgroupLimits};
use airlock_linux::spec::SandboxSpec;
use airlock_linux::sys::janitor::Janitor;

use crate::error::{ErrorKind, HostError};

/// How long a janitor keeps trying to remove the cgroup after airlock's end.
const JANITOR_GRACE: Duration = Duration::from_secs(2);

/// Where a warning goes (the text after `airlock: warning: `): this crate prints nothing, its
/// caller decides (the terminal for `run`, the keeper's log for `up`).
pub type Warn = fn(&str);

/// The cgroup of one run, or nothing when default limits were skipped.
pub struct RunCgroup {
    cgroup: Option<(Cgroup, Option<Janitor>)>,
    memory_mb: Option<u64>,
    warn: Warn,
    /// The warning given when default limits were skipped (kept for `up` and `status`).
    skipped: Option<String>,
}

/// The kernel's OOM killer ended a process of the sandbox (its cgroup's `oom_kill` counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The sandbox's memory limit, when one was set.
    pub memory_mb: Option<u64>,
    /// How many processes the OOM killer ended.
    pub kills: u64,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.memory_mb {
            Some(mb) => write!(f, "out of memory (memory_mb = {mb})")?,
            None => write!(f, "out of memory")?,
        }
        write!(
            f,
            ": the kernel killed {} process{} in the sandbox; raise memory_mb (config or \
             --memory-mb) if the command needs more",
            self.kills,
            if self.kills == 1 { "" } else { "es" }
        )
    }
}

impl RunCgroup {
    /// Why this sandbox runs without cgroup limits, when it does.
    pub fn skipped_warning(&self) -> Option<&str> {
        self.skipped.as_deref()
    }

    /// `Some` when the OOM killer ended a process in this cgroup (read before [`destroy`]).
    ///
    /// [`destroy`]: RunCgroup::destroy
    pub fn out_of_memory(&self) -> Option<OutOfMemory> {
        let (cg, _) = self.cgroup.as_ref()?;
        let kills = cg.oom_kills().ok()?;
        (kills > 0).then_some(OutOfMemory {
            memory_mb: self.memory_mb,
            kills,
        })
    }

    /// The files through which a child joins the cgroup before its exec (the init stage, the
    /// proxy child); `None` without a cgroup. See `airlock_linux::cgroup::JoinFds`.
    pub fn join_fds(
        &self,
    ) -> Result<Option<airlock_linux::cgroup::JoinFds>, airlock_linux::cgroup::CgroupError> {
        self.cgroup
            .as_ref()
            .map(|(cg, _)| cg.join_fds())
            .transpose()
    }

    /// Moves a running process (host pid) into the cgroup. Waits for an RCU grace period on
    /// hosts without `favordynmods`: a child about to exec joins through
    /// [`RunCgroup::join_fds`] instead.
    pub fn join(&self, pid: u32) -> Result<(), airlock_linux::cgroup::CgroupError> {
        match &self.cgroup {
            Some((cg, _)) => cg.add_pid(pid),
            None => Ok(()),
        }
    }

    /// Kills what is left in the cgroup and removes it (bounded).
    pub fn destroy(&mut self) {
        if let Some((cg, janitor)) = self.cgroup.take() {
            let removed = cg.destroy(Duration::from_secs(5));
            match (janitor, removed) {
                // The cgroup is gone: the janitor has nothing left to do.
                (Some(janitor), Ok(())) => {
                    janitor.dismiss(Duration::from_millis(500));
                }
                // It is not: the janitor tries once more on its own.
                (Some(janitor), Err(e)) => {
                    (self.warn)(&e.to_string());
                    janitor.release(Duration::from_millis(500));
                }
                (None, Err(e)) => (self.warn)(&e.to_string()),
                (None, Ok(())) => {}
            }
        }
    }
}

/// Creates the cgroup with the spec's limits (see the module docs for the skip rule), with a
/// janitor that removes it should this process die first.
pub fn prepare(spec: &SandboxSpec, warn: Warn) -> Result<RunCgroup, HostError> {
    let mut cgroup = create(spec, warn)?;
    cgroup.start_janitor()?;
    Ok(cgroup)
}

/// [`prepare`] in two steps, for a caller that makes the cgroup on another thread: the cgroup
/// (nothing but cgroupfs calls, so any thread may make it), then [`RunCgroup::start_janitor`]
/// on the thread that lives as long as the sandbox, before any process joins the cgroup.
pub fn create(spec: &SandboxSpec, warn: Warn) -> Result<RunCgroup, HostError> {
    let l = &spec.limits;
    let limits = CgroupLimits {
        memory_bytes: l.memory_mb.map(|m| m.value.saturating_mul(1024 * 1024)),
        pids_max: l.pids_max.map(|p| p.value),
        cpus: l.cpus.map(|c| c.value),
    };
    // Without cgroups the runtime still bounds processes (RLIMIT_NPROC, counted per sandbox on
    // Linux >= 5.14) and the tmpfs mounts (sized from memory_mb), but not the memory processes
    // use: an explicit pids_max stays enforceable, an explicit memory_mb does not.
    let nproc = airlock_linux::init::nproc_limit_is_per_sandbox();
    let explicit: Vec<&str> = [
        l.memory_mb.filter(|m| m.explicit).map(|_| "memory_mb"),
        l.pids_max
            .filter(|p| p.explicit && !nproc)
            .map(|_| "pids_max"),
        l.cpus.filter(|c| c.explicit).map(|_| "cpus"),
    ]
    .into_iter()
    .flatten()
    .collect();
    match Cgroup::create(&spec.id, &limits) {
        Ok(cg) => Ok(RunCgroup {
            cgroup: Some((cg, None)),
            memory_mb: l.memory_mb.map(|m| m.value),
            warn,
            skipped: None,
        }),
        Err(e @ (CgroupError::NotDelegated { .. } | CgroupError::NoControllers)) => {
            if explicit.is_empty() {
                let message = format!(
                    "running without cgroup limits (the memory processes use and CPU time are \
                     not bounded; tmpfs sizes and the process count are): {e}; run `airlock \
                     doctor` for the fix"
                );
                warn(&message);
                Ok(RunCgroup {
                    cgroup: None,
                    memory_mb: None,
                    warn,
                    skipped: Some(message),
                })
            } else {
                Err(HostError::new(
                    ErrorKind::BackendUnavailable,
                    "backend.cgroup",
                    format!(
                        "the limits you set ({}) cannot be enforced: {e}",
                        explicit.join(", ")
                    ),
                )
                .with_hint("run `airlock doctor` to see how to delegate cgroups to this user"))
            }
        }
        Err(
            e @ (CgroupError::Detect(_)
            | CgroupError::InvalidName { .. }
            | CgroupError::AlreadyExists { .. }
            | CgroupError::Create { .. }
            | CgroupError::Write { .. }
            | CgroupError::Read { .. }
            | CgroupError::StillBusy { .. }
            | CgroupError::Remove { .. }
            | CgroupError::Janitor { .. }),
        ) => Err(unavailable(e)),
    }
}

impl RunCgroup {
    /// Starts the janitor of a cgroup made by [`create`] (nothing without a cgroup, or when it
    /// has one already). When it cannot be started the cgroup is removed (nothing has joined
    /// it yet) and the error returned.
    pub fn start_janitor(&mut self) -> Result<(), HostError> {
        self.start_janitor_with(|cg| cg.spawn_janitor(JANITOR_GRACE))
    }

    /// [`RunCgroup::start_janitor`] with the janitor started by `spawn`.
    fn start_janitor_with(
        &mut self,
        spawn: impl FnOnce(&Cgroup) -> Result<Janitor, CgroupError>,
    ) -> Result<(), HostError> {
        let Some((cg, janitor @ None)) = self.cgroup.as_mut() else {
            return Ok(());
        };
        match spawn(cg) {
            Ok(started) => {
                *janitor = Some(started);
                Ok(())
            }
            Err(e) => {
                self.destroy();
                Err(unavailable(e))
            }
        }
    }
}

fn unavailable(e: CgroupError) -> HostError {
    HostError::new(
        ErrorKind::BackendUnavailable,
        "backend.cgroup",
        e.to_string(),
    )
    .with_hint("run `airlock doctor` to see how to delegate cgroups to this user")
}

/// [`prepare`] without a janitor process, for the keeper of a persistent sandbox: one host
/// process fewer per idle sandbox. Its death leaves an empty cgroup (the sandbox's processes
/// die with it through PDEATHSIG), which the next `down`, `clean` or `up` removes.
pub fn prepare_without_janitor(spec: &SandboxSpec, warn: Warn) -> Result<RunCgroup, HostError> {
    create(spec, warn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_linux::spec::{HostUser, SandboxSpec};

    fn no_warning(_: &str) {}

    /// `run` (both backends) starts the janitor right after making the cgroup: a janitor that
    /// cannot be started fails the run, and the cgroup made for it must not stay behind.
    #[test]
    fn a_janitor_that_cannot_start_leaves_no_cgroup_behind() {
        if !airlock_testkit::needs_root("creates cgroups") {
            return;
        }
        let id = format!("limits-test-{}", std::process::id());
        let user = HostUser {
            uid: 0,
            gid: 0,
            name: "root".into(),
            home: "/root".into(),
        };
        let spec = SandboxSpec::bare(&id, user);
        let mut cgroup = create(&spec, no_warning).expect("root can create cgroups");
        let failed = cgroup.start_janitor_with(|_| {
            Err(CgroupError::Janitor {
                source: std::io::Error::other("no janitor in this test"),
            })
        });
        assert!(failed.is_err(), "the run must fail without its janitor");
        drop(cgroup);
        // The same name can be made again only when nothing of the first one is left.
        let again = Cgroup::create(&id, &CgroupLimits::default())
            .expect("the cgroup of the failed start is gone");
        again
            .destroy(Duration::from_secs(5))
            .expect("the test's own cgroup is removed");
    }
}
