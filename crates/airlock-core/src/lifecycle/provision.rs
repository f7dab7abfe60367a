//! Provisioning as a phase of `up` (PRODUCT P1, P3, L7, L8).
//!
//! `up` runs provisioning on every call, fresh or retained, once the sandbox is ready and while
//! it still holds the sandbox lock: two `up`s never provision the same sandbox at once, and an
//! `up` killed mid-step leaves its operation `running`, which the next lock holder marks
//! `interrupted` (L8). Each step's phase is written to the operation record (as
//! `provision:<phase>`) before the step starts, so `status` says which step an interrupted or
//! failed `up` reached.
//!
//! Provisioning never changes the sandbox record: a failed or cancelled step leaves a ready
//! sandbox `ready` (P3), and the failure is recorded in the operation record only.

use crate::records::SandboxRecord;
use crate::state::StateError;

/// Runs the provisioning steps in a ready sandbox. Implemented by the backend's host side;
/// core only orders it after readiness and records its phases.
pub trait Provision {
    /// Runs every step in order. Before each step, call `phase(name)`, which records it.
    /// `fresh`: this `up` created the sandbox (nothing ran in it yet); else it was retained.
    fn provision(
        &mut self,
        record: &SandboxRecord,
        fresh: bool,
        phase: &mut dyn FnMut(&str) -> Result<(), StateError>,
    ) -> Result<(), ProvisionError>;
}

/// No provisioning (tests, and callers that provision nothing).
pub struct NoProvision;

impl Provision for NoProvision {
    fn provision(
        &mut self,
        _record: &SandboxRecord,
        _fresh: bool,
        _phase: &mut dyn FnMut(&str) -> Result<(), StateError>,
    ) -> Result<(), ProvisionError> {
        Ok(())
    }
}

/// Why provisioning stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// A step failed; `detail` names its owner file, the workspace and how it ended (P3).
    #[error("provisioning step {phase} failed: {detail}")]
    Failed { phase: String, detail: String },
    /// The user cancelled during `phase` (L7).
    #[error("provisioning was cancelled during {phase}")]
    Cancelled { phase: String },
    /// Recording a phase failed.
    #[error(transparent)]
    State(#[from] StateError),
}
