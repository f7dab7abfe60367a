//! airlock-proxy: the host-side egress proxy of one sandbox (PRODUCT N1–N9).
//!
//! Shape: [`Proxy::start`] takes a [`ProxyConfig`] (policy, static hosts, extra CAs, secret
//! bindings, audit log path, CA directory) and a [`ProxyListener`] (the Unix socket bound into
//! the sandbox, or loopback TCP) and returns a [`ProxyHandle`] with
//! [`update`](ProxyHandle::update) (new policy and secrets, no restart) and
//! [`shutdown`](ProxyHandle::shutdown).
//!
//! Modules, in the order a request meets them:
//! - [`server`]: accept loop, live configuration, shutdown;
//! - `shared`: the state every connection shares (the live policy and secrets, taken as one
//!   snapshot per request), and `respond`: the answers the proxy makes itself (denial, failure,
//!   malformed request) with their audit lines;
//! - [`target`] and [`addr`]: policy decision, name resolution, internal-address refusal (N2, N3);
//! - [`denial`]: the identical N9 answer;
//! - `connect` and [`sni`]: CONNECT, the SNI check (N4), tunnel or interception (N6);
//! - `forward`, [`substitute`], `body`: HTTP forwarding, header substitution (N5);
//! - [`ca`] and [`tls`]: the interception CA and upstream verification (N6);
//! - [`handoff`]: connections the sandbox's PID 1 hands over (`SCM_RIGHTS`), checked as
//!   hostile descriptors and then served like any client;
//! - [`splice`]: zero-copy tunnels;
//! - [`audit`]: one JSON line per request (N7).
//!
//! Module edges go one way: `server` → `connect` → `forward` → `body`, each of them → `respond`
//! → `shared`; nothing points back at `server`.
//!
//! Invariants: secret values exist only in [`airlock_secrets::Redacted`] and in the headers of
//! requests to their bound hosts (N8); every refusal is explicit (N9); the proxy connects only
//! to addresses it checked itself (no second resolution).

pub mod addr;
pub mod audit;
mod body;
pub mod ca;
mod clock;
mod connect;
pub mod denial;
mod forward;
pub mod handoff;
mod host_cache;
mod respond;
pub mod server;
mod shared;
#[cfg(test)]
mod snapshot_tests;
pub mod sni;
pub mod splice;
pub mod substitute;
pub mod target;
pub mod tls;

pub use audit::{
    read_entries, AuditEntry, AuditError, AuditFollower, AuditLog, Mode, Rotation, Verdict,
};
pub use ca::{CaError, CertificateAuthority};
pub use denial::{Denial, DenyReason, POLICY_HEADER};
pub use server::{Proxy, ProxyConfig, ProxyError, ProxyHandle, ProxyListener};
