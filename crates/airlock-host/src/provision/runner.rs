//! [`Provisioner`]: runs a [`ProvisionPlan`] in a ready sandbox (see the module docs of
//! `provision`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use airlock_core::backend::Backend;
use airlock_core::lifecycle::{Provision, ProvisionError};
use airlock_core::records::SandboxRecord;
use airlock_core::state::StateError;
use airlock_protocol::{ExecClient, ExecController, ExecRequest, ExitStatus};

use super::output::Prefixed;
use super::{phase_name, Action, ProvisionPlan, Step, STOP_GRACE};
use crate::egress::reload::reload_running;
use crate::lifecycle::backend::LinuxBackend;
use crate::lifecycle::key_of;

/// Runs the plan's steps through the backend's exec channel; `cancel` is the Ctrl+C flag.
pub struct Provisioner<'a> {
    pub plan: ProvisionPlan,
    pub backend: &'a LinuxBackend,
    pub cancel: Arc<AtomicBool>,
    /// Each step's phase and measured time, in order.
    pub timings: Vec<(&'static str, Duration)>,
}

impl Provision for Provisioner<'_> {
    fn provision(
        &mut self,
        record: &SandboxRecord,
        fresh: bool,
        phase: &mut dyn FnMut(&str) -> Result<(), StateError>,
    ) -> Result<(), ProvisionError> {
        for step in self.plan.steps.clone() {
            let name = phase_name(step.phase);
            if self.cancel.load(Ordering::SeqCst) {
                return Err(ProvisionError::Cancelled { phase: name.into() });
            }
            // A step with nothing to do has no effect a crash could interrupt: its phase is
            // not recorded (each record write is a rename that costs a writeback on ext4).
            if self.nothing_to_do(fresh, &step) {
                self.timings.push((name, Duration::ZERO));
                continue;
            }
            phase(name)?;
            let started = Instant::now();
            let result = self.run_step(record, fresh, &step);
            self.timings.push((name, started.elapsed()));
            result?;
        }
        Ok(())
    }
}

impl Provisioner<'_> {
    /// Whether `step` does nothing in this sandbox (see [`Provisioner::run_step`]).
    fn nothing_to_do(&self, fresh: bool, step: &Step) -> bool {
        matches!(step.action, Action::Base) && fresh && self.backend.vm.is_none()
    }

    fn run_step(
        &self,
        record: &SandboxRecord,
        fresh: bool,
        step: &Step,
    ) -> Result<(), ProvisionError> {
        let name = phase_name(step.phase);
        let fail = |detail: String| ProvisionError::Failed {
            phase: name.into(),
            detail: format!(
                "{detail} (owner {}, workspace {})",
                step.owner, self.plan.workspace
            ),
        };
        let (argv, user, cwd) = match &step.action {
            // A sandbox this `up` created has loaded no policy yet: its keeper starts the
            // proxy at the first connection from inside, which needs a process in the
            // sandbox, which needs the ready record (`exec`) or a later step of this `up`;
            // that proxy loads the configuration in force then, and any change after that
            // finds the ready record and reaches it (`policy`, `secret`). A reload would
            // answer `ok` and do nothing. The `vm` keeper starts its proxy with the sandbox.
            Action::Base if self.nothing_to_do(fresh, step) => return Ok(()),
            Action::Base => {
                let sandbox = [(record.name.clone(), record.paths.runtime_dir.clone())];
                for r in reload_running(&sandbox) {
                    r.result.map_err(|e| {
                        fail(format!(
                            "cannot re-apply the network policy and secrets: {e}"
                        ))
                    })?;
                }
                return Ok(());
            }
            Action::Exec { argv, user, cwd } => (argv, user, cwd),
        };
        let channel = self
            .backend
            .connect(record)
            .map_err(|e| fail(format!("cannot reach the sandbox: {e}")))?;
        let key = key_of(&channel.key).map_err(|e| fail(e.message))?;
        let client = ExecClient::connect(channel.stream, &key)
            .map_err(|e| fail(format!("cannot open an exec stream: {e}")))?;
        let request = ExecRequest {
            argv: argv.clone(),
            env: Default::default(),
            cwd: cwd.clone(),
            user: *user,
            tty: None,
        };
        let done = Arc::new(AtomicBool::new(false));
        let watcher = watch_cancel(client.controller(), &self.cancel, &done);
        let mut out = Prefixed::new(name, std::io::stderr());
        let mut err = Prefixed::new(name, std::io::stderr());
        let status = client.run(&request, None, &mut out, &mut err);
        done.store(true, Ordering::SeqCst);
        let _ = watcher.join();
        let _ = err.flush();
        if self.cancel.load(Ordering::SeqCst) {
            return Err(ProvisionError::Cancelled { phase: name.into() });
        }
        match status {
            Ok(ExitStatus::Code(0)) => Ok(()),
            Ok(ExitStatus::Code(code)) => Err(fail(format!(
                "it exited with status {code}; its output is above"
            ))),
            Ok(ExitStatus::Signal(signal)) => Err(fail(format!(
                "it was killed by signal {signal}; its output is above"
            ))),
            Err(e) => Err(fail(e.to_string())),
        }
    }
}

/// Stops the step's process group when `cancel` is set: SIGTERM, then SIGKILL after
/// [`STOP_GRACE`]. Ends when `done` is set.
fn watch_cancel(
    controller: ExecController,
    cancel: &Arc<AtomicBool>,
    done: &Arc<AtomicBool>,
) -> thread::JoinHandle<()> {
    let (cancel, done) = (Arc::clone(cancel), Arc::clone(done));
    thread::spawn(move || {
        let tick = Duration::from_millis(50);
        while !done.load(Ordering::SeqCst) {
            if cancel.load(Ordering::SeqCst) {
                let _ = controller.signal(libc_signal::SIGTERM);
                let deadline = Instant::now() + STOP_GRACE;
                while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                    thread::sleep(tick);
                }
                if !done.load(Ordering::SeqCst) {
                    let _ = controller.signal(libc_signal::SIGKILL);
                }
                return;
            }
            thread::sleep(tick);
        }
    })
}

/// Signal numbers as the protocol carries them.
mod libc_signal {
    pub const SIGTERM: i32 = nix::sys::signal::Signal::SIGTERM as i32;
    pub const SIGKILL: i32 = nix::sys::signal::Signal::SIGKILL as i32;
}
