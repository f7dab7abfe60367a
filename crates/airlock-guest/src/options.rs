//! What the runtime hands the guest when it starts it.

use airlock_linux::sys::process::Confinement;
use airlock_protocol::Key;

/// The unprivileged identity sandbox processes run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxUser {
    /// Login name (`USER`, `LOGNAME`).
    pub name: String,
    /// uid inside the sandbox.
    pub uid: u32,
    /// gid inside the sandbox.
    pub gid: u32,
    /// `HOME`, and the working directory when a request names none.
    pub home: String,
}

/// Configuration of the guest's PID 1.
#[derive(Debug, Clone)]
pub struct GuestOptions {
    /// This epoch's channel key; every stream must prove knowledge of it.
    pub key: Key,
    /// Variables every process gets (proxy settings, locale, `PATH`, CA bundle paths…);
    /// a request's own variables override them.
    pub env_base: Vec<(String, String)>,
    /// Who ordinary execs run as.
    pub sandbox_user: SandboxUser,
    /// Whether `user = root` requests are served (I5); refused with `root_not_allowed` if not.
    pub root_allowed: bool,
    /// Applied to every sandbox-user process.
    pub confinement: Confinement,
    /// Applied to `--root` processes (usually the same filter, capabilities kept inside the
    /// sandbox's user namespace).
    pub root_confinement: Confinement,
    /// Loopback ports relayed to host sockets (the egress proxy, N1; host ports, N10), bound
    /// before any exec stream is served.
    pub relays: Vec<crate::relay::Relay>,
}
