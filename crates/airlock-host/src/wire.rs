//! Every message one airlock process sends another on this host, in one place. The messages
//! themselves (versioned, with a schema snapshot) are `airlock_protocol::host`; this module
//! adds what names this crate's types: the hidden verbs that start a keeper or a proxy child,
//! the file the start request is written to, and the start request with the linux
//! [`SandboxSpec`]. A keeper can outlive the binary that started it, so a change of any of these
//! is a change of protocol between two versions of airlock (bump `HOST_VERSION`).

use std::path::PathBuf;

use airlock_config::env_vars;
use airlock_linux::spec::SandboxSpec;
pub use airlock_protocol::host::{
    check_version, decode, FailureClass, HostVersionError, KeeperAnswer, KeeperOutcome,
    KeeperReport, ProxyAnswer, ProxyStart, StartFailure, HOST_VERSION, MODE_DETACHED, MODE_RELOAD,
    MODE_STREAM, PROXY_RELOAD,
};
pub use airlock_protocol::host::{Forward, PortsReply, PortsRequest, MODE_PORTS};

/// The hidden verb of the keeper.
pub const KEEPER_VERB: &str = "__keeper";
pub use crate::paths::START_FILE;
/// The keeper's table of published ports ([`Forward`]s, JSON), in the sandbox's state directory.
pub const PORTS_FILE: &str = "ports.json";
/// The hidden verb of the proxy child.
pub const PROXY_VERB: &str = "__proxy";

/// What the keeper is asked to start (`start.json`).
pub type StartRequest = airlock_protocol::host::StartRequest<SandboxSpec>;

/// What the proxy child needs to start (see [`ProxyStart`]).
pub type EgressStart = ProxyStart;

/// The proxy child's start request for `dir`, capturing the roots' environment of this process.
pub fn egress_start(
    dir: PathBuf,
    project_root: Option<PathBuf>,
    audit_path: PathBuf,
) -> EgressStart {
    let env = [
        env_vars::HOME,
        env_vars::XDG_CONFIG_HOME,
        env_vars::XDG_STATE_HOME,
        env_vars::XDG_DATA_HOME,
        env_vars::XDG_CACHE_HOME,
        env_vars::XDG_RUNTIME_DIR,
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
    .collect();
    ProxyStart {
        version: HOST_VERSION,
        dir,
        env,
        project_root,
        audit_path,
    }
}
