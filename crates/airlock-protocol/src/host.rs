//! The host↔host protocol: what one airlock process tells another on this host. A keeper
//! (`airlock __keeper`) outlives the `up` that started it and may outlive the binary itself (an
//! upgrade replaces it while sandboxes run), so everything that crosses between two airlock
//! processes carries [`HOST_VERSION`], and a reader refuses a message of another version
//! instead of guessing ([`check_version`]). The JSON shapes are frozen by the snapshot
//! `schema/host.json` (see VERSIONING.md).
//!
//! - `start.json` ([`StartRequest`]): what `up` asks a keeper to start, written into the
//!   sandbox's state directory before the keeper is spawned.
//! - The keeper's one-line report on its stdout ([`KeeperReport`]): ready, or why not.
//! - The first byte a client of a keeper's control socket sends ([`MODE_STREAM`],
//!   [`MODE_DETACHED`], [`MODE_RELOAD`], [`MODE_PORTS`]); the ports requests and answers
//!   ([`PortsRequest`], [`PortsReply`]).
//! - The proxy child (`airlock __proxy`): its start request, the first line of its stdin
//!   ([`ProxyStart`]), then `reload` lines ([`PROXY_RELOAD`]); each answered by one JSON line
//!   ([`ProxyAnswer`]).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The version of every message in this module. Bump it on any change of their shape or
/// meaning and re-bless `schema/host.json`.
pub const HOST_VERSION: u32 = 1;

/// First byte a client sends: hand my connection to the guest.
pub const MODE_STREAM: u8 = b'S';
/// First byte a client sends: run the request that follows (one JSON line) detached, owned by
/// the keeper; it answers one [`KeeperAnswer`] line, `started` or `error`.
pub const MODE_DETACHED: u8 = b'D';
/// First byte a client sends: reload the egress proxy's policy and secrets; the keeper answers
/// one [`KeeperAnswer`] line, `ok` or `error`.
pub const MODE_RELOAD: u8 = b'R';

/// The line an owner sends a proxy child to have it reload policy and secrets.
pub const PROXY_RELOAD: &str = "reload";
/// First byte a client sends: one JSON [`PortsRequest`] line follows; the keeper answers one
/// JSON [`PortsReply`] line (published ports, `airlock ports`).
pub const MODE_PORTS: u8 = b'P';

/// A message whose version is not [`HOST_VERSION`] (or that carries none: an airlock from
/// before versioning).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostVersionError {
    #[error("it was written by another airlock version (host protocol {found}, this airlock speaks {HOST_VERSION})")]
    Other { found: u32 },
    #[error("it was written by an older airlock version (no host protocol version, this airlock speaks {HOST_VERSION})")]
    Unversioned,
    #[error("it is not a host protocol message: {0}")]
    Malformed(String),
}

/// Only the version of a message, read before the rest so another version is never misread.
#[derive(Deserialize)]
struct VersionOnly {
    version: Option<u32>,
}

/// Checks the `version` of the JSON message `text` before it is decoded as anything.
pub fn check_version(text: &[u8]) -> Result<(), HostVersionError> {
    let probe: VersionOnly =
        serde_json::from_slice(text).map_err(|e| HostVersionError::Malformed(e.to_string()))?;
    match probe.version {
        Some(HOST_VERSION) => Ok(()),
        Some(found) => Err(HostVersionError::Other { found }),
        None => Err(HostVersionError::Unversioned),
    }
}

/// Decodes a host protocol message after checking its version.
pub fn decode<T: serde::de::DeserializeOwned>(text: &[u8]) -> Result<T, HostVersionError> {
    check_version(text)?;
    serde_json::from_slice(text).map_err(|e| HostVersionError::Malformed(e.to_string()))
}

/// What a keeper is asked to start (`start.json`). `S` is the backend's sandbox description
/// (opaque here).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StartRequest<S> {
    pub version: u32,
    pub spec: S,
    pub runtime_dir: PathBuf,
    /// The egress proxy to run beside the sandbox (absent: the sandbox has no way out).
    #[serde(default)]
    pub egress: Option<ProxyStart>,
}

/// The keeper's one-line report on its stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KeeperReport {
    pub version: u32,
    pub outcome: KeeperOutcome,
}

impl KeeperReport {
    pub fn new(outcome: KeeperOutcome) -> KeeperReport {
        KeeperReport {
            version: HOST_VERSION,
            outcome,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeeperOutcome {
    Ready {
        guest_pid: u32,
        init_pid: u32,
        /// Milliseconds per start phase.
        timings: Vec<(String, u64)>,
    },
    /// Why the sandbox did not start, classified by the keeper.
    Failed(StartFailure),
}

/// Why an owner process could not start the sandbox: the class decides the exit status, the
/// code and hint are what the user sees (the same ones a failing `run` shows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StartFailure {
    pub class: FailureClass,
    /// Stable `area.reason` code (`backend.namespaces`, `run.state`, …).
    pub code: String,
    pub message: String,
    pub hint: Option<String>,
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The class of a start failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// This host cannot provide the backend (exit 69).
    Unavailable,
    /// The start was refused or failed for a reason the user can act on (exit 1).
    Refused,
    /// A configuration problem found only at start (exit 2).
    Config,
    /// Infrastructure or a bug (exit 70).
    Internal,
}

/// A keeper's answer to a `D` or `R` request, one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeeperAnswer {
    /// The detached command started; its process id inside the sandbox.
    Started { pid: u32 },
    /// The reload was applied.
    Ok,
    /// The request failed.
    Error { message: String },
}

/// What the proxy child needs to start (the first line of its stdin, never on disk inside the
/// sandbox). Holds no secret: the child reads secrets from the store itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProxyStart {
    pub version: u32,
    /// The egress directory.
    pub dir: PathBuf,
    /// `HOME` and `XDG_*` of the invoking command, to resolve the same roots (the keeper runs
    /// with a cleared environment).
    pub env: Vec<(String, String)>,
    /// The project whose configuration decides the policy.
    pub project_root: Option<PathBuf>,
    /// The sandbox's audit log (N7).
    pub audit_path: PathBuf,
}

/// One answer of the proxy child, one JSON line each: to its start request, then to each
/// `reload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProxyAnswer {
    /// The proxy serves (the answer to the start request).
    Ready,
    /// A reload was applied.
    Ok,
    /// The start or the reload failed (after a failed reload the previous policy stays).
    Error { message: String },
}

/// One published port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Forward {
    /// Port on the host's `127.0.0.1`.
    pub host: u16,
    /// Port on the sandbox's `127.0.0.1`.
    pub guest: u16,
}

/// A request to the keeper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PortsRequest {
    /// Listen on `127.0.0.1:host` (0: any free port) and forward to `guest`.
    Publish {
        /// Host port.
        host: u16,
        /// Sandbox port.
        guest: u16,
    },
    /// Stop forwarding `host`.
    Unpublish {
        /// Host port.
        host: u16,
    },
    /// Only list.
    List,
}

/// The keeper's answer: the table after the request, or why it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PortsReply {
    /// Done; every published port.
    Ok {
        /// The table.
        forwards: Vec<Forward>,
    },
    /// Refused.
    Error {
        /// Stable kind (`in_use`, `not_published`, `already_published`, `io`).
        kind: String,
        /// One sentence.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_of_another_or_no_version_is_refused_before_it_is_decoded() {
        let ours = serde_json::to_vec(&KeeperReport::new(KeeperOutcome::Ready {
            guest_pid: 1,
            init_pid: 2,
            timings: vec![],
        }))
        .unwrap();
        assert!(decode::<KeeperReport>(&ours).is_ok());
        let newer = br#"{"version": 2, "outcome": {"ready": {"guest_pid": 1}}}"#;
        assert_eq!(
            decode::<KeeperReport>(newer),
            Err(HostVersionError::Other { found: 2 })
        );
        // What a keeper from before versioning printed: never read as a report.
        let older = br#"{"Ready": {"guest_pid": 1, "init_pid": 2, "timings": []}}"#;
        assert_eq!(
            decode::<KeeperReport>(older),
            Err(HostVersionError::Unversioned)
        );
    }
}
