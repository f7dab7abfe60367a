//! Every message one airlock process sends another on this host, in one place: the hidden verbs
//! that start a keeper or a proxy child, what a keeper is asked to start (`start.json`) and its
//! one-line report, the mode byte a client of a keeper's control socket sends first, and what a
//! proxy child reads on its stdin. A keeper can outlive the binary that started it, so a change
//! here is a change of protocol between two versions of airlock.
//!
//! The proxy child answers its owner in lines (`ready`, `ok`, `error: …`; see
//! [`crate::egress::child`] and [`crate::egress::supervisor`]).

use std::path::PathBuf;

use airlock_config::env_vars;
use airlock_core::backend::StartFailure;
use airlock_linux::spec::SandboxSpec;
use serde::{Deserialize, Serialize};

/// The hidden verb of the keeper.
pub const KEEPER_VERB: &str = "__keeper";
/// The keeper's start request ([`StartRequest`]), in the sandbox's state directory.
pub const START_FILE: &str = "start.json";

/// First byte a client sends: hand my connection to the guest.
pub const MODE_STREAM: u8 = b'S';
/// First byte a client sends: run the request that follows detached, owned by the keeper.
pub const MODE_DETACHED: u8 = b'D';
/// First byte a client sends: reload the egress proxy's policy and secrets; the keeper answers
/// one line, `ok` or `error: …`.
pub const MODE_RELOAD: u8 = b'R';

/// The hidden verb of the proxy child.
pub const PROXY_VERB: &str = "__proxy";

/// What the keeper is asked to start (`start.json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct StartRequest {
    pub spec: SandboxSpec,
    pub runtime_dir: PathBuf,
    /// The egress proxy to run beside the sandbox (absent: the sandbox has no way out).
    #[serde(default)]
    pub egress: Option<EgressStart>,
}

/// The keeper's one-line report on its stdout.
#[derive(Debug, Serialize, Deserialize)]
pub enum KeeperReport {
    Ready {
        guest_pid: u32,
        init_pid: u32,
        timings: Vec<(String, u64)>,
    },
    /// Why the sandbox did not start, classified by the keeper (the same code and hint a
    /// failing `run` shows).
    Failed(StartFailure),
}

/// What the proxy child needs to start (sent as the first line of its stdin, never on disk
/// inside the sandbox). Holds no secret: the child reads secrets from the store itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EgressStart {
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

impl EgressStart {
    /// Captures the roots' environment of this process.
    pub fn new(dir: PathBuf, project_root: Option<PathBuf>, audit_path: PathBuf) -> EgressStart {
        let env = [
            env_vars::HOME,
            env_vars::XDG_CONFIG_HOME,
            env_vars::XDG_STATE_HOME,
            env_vars::XDG_DATA_HOME,
            env_vars::XDG_CACHE_HOME,
            env_vars::XDG_RUNTIME_DIR,
        ]
        .iter()
        .filter_map(|k| {
            std::env::var(k)
                .ok()
                .map(|v| ((*k).to_owned(), v.to_owned()))
        })
        .collect();
        EgressStart {
            dir,
            env,
            project_root,
            audit_path,
        }
    }
}
