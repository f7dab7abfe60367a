//! airlock-guest: what runs inside the sandbox.
//!
//! [`pid1::run`] is the whole guest: PID 1 of the sandbox's PID namespace, non-dumpable,
//! reaping every zombie, forwarding termination signals to the process groups it started,
//! and serving exec streams that the host opens over the control socket
//! (docs/architecture.md, "Control channel"). Each stream authenticates with the epoch key
//! before anything else, then runs one process in pipes or PTY mode, spawned through
//! `airlock_linux::sys::process` with the confinement the runtime handed over, or serves one
//! request about the persistent sessions PID 1 owns ([`session`]).

pub mod children;
pub mod exec;
mod handoff;
pub mod options;
pub mod pid1;
pub mod pty;
pub mod relay;
pub mod session;
pub mod transfer;

pub use options::{GuestOptions, SandboxUser};
pub use pid1::{run, GuestError};
pub use relay::{Relay, RelayError};
