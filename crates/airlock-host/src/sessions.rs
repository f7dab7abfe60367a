//! Sessions of a persistent sandbox, host side (PRODUCT S1–S4): what the default session runs,
//! and the one-shot requests (`ensure`, `list`, `kill`) over a stream to the guest's PID 1.
//! Attaching a terminal is `airlock-term`'s (the client owns the terminal); the stream it
//! attaches over is opened here, with the detach key and the default session's spec.
//!
//! The default session's command comes from one place, [`default_command`]: with an agent
//! selected (A1), the agent's command and its catalogue (or configured) arguments; otherwise the
//! sandbox user's login shell (the host user's `$SHELL` when the image has it). With `layout = "tmux"` (S4) that command runs in the
//! `agent` window of a tmux session with `edit` and `shell` windows, attached if it exists and
//! created otherwise ([`tmux_command`]).

use std::collections::BTreeMap;
use std::time::Duration;

use airlock_config::Effective;
use airlock_core::names::SandboxName;
use airlock_core::records::SandboxRecord;
use airlock_protocol::session::EnsureRequest;
use airlock_protocol::{
    DetachKey, Opened, SessionClient, SessionClientError, SessionCommand, SessionErrorCode,
    SessionInfo, SessionSpec, WindowSize,
};

use crate::error::{ErrorKind, HostError};
pub use crate::lifecycle::open_stream;
use crate::lifecycle::Host;
use crate::wire::{StartRequest, START_FILE};

pub use airlock_protocol::DEFAULT_SESSION;

/// The tmux session `layout = "tmux"` attaches to or creates.
pub const TMUX_SESSION: &str = "airlock";
/// How long a one-shot request may wait for the guest (a wedged guest must not hang `status`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The ready sandbox `name`'s record; `Failed` (exit 1) with the next action otherwise.
pub fn ready_record(host: &Host, name: &SandboxName) -> Result<SandboxRecord, HostError> {
    crate::lifecycle::ready(host, name, "session.not_ready")
}

fn client(host: &Host, record: &SandboxRecord) -> Result<SessionClient, HostError> {
    let (stream, key) = open_stream(host, record)?;
    let timeout = Some(REQUEST_TIMEOUT);
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .map_err(|e| HostError::internal("session.channel", e.to_string()))?;
    SessionClient::connect(stream, &key).map_err(|e| session_error(e, ""))
}

/// Every session of the sandbox, ordered by name.
pub fn list(host: &Host, record: &SandboxRecord) -> Result<Vec<SessionInfo>, HostError> {
    client(host, record)?
        .list()
        .map_err(|e| session_error(e, ""))
}

/// Ends session `name`'s processes and removes it; its final state.
pub fn kill(host: &Host, record: &SandboxRecord, name: &str) -> Result<SessionInfo, HostError> {
    client(host, record)?
        .kill(name)
        .map_err(|e| session_error(e, name))
}

/// Makes sure a running session `name` exists (created with `spec` when absent or exited).
pub fn ensure(
    host: &Host,
    record: &SandboxRecord,
    name: &str,
    spec: SessionSpec,
    size: WindowSize,
) -> Result<Opened, HostError> {
    ensure_on(client(host, record)?, name, spec, size)
}

/// An authenticated session stream to the ready sandbox `record`, for one request later:
/// `up` opens it while it writes the home files, so that the handshake overlaps them.
pub fn connect(host: &Host, record: &SandboxRecord) -> Result<SessionClient, HostError> {
    client(host, record)
}

/// [`ensure`] over a stream opened by [`connect`].
pub fn ensure_on(
    client: SessionClient,
    name: &str,
    spec: SessionSpec,
    size: WindowSize,
) -> Result<Opened, HostError> {
    let request = EnsureRequest {
        name: name.to_owned(),
        size,
        spec,
    };
    client.ensure(request).map_err(|e| session_error(e, name))
}

/// What the default session runs, before the layout: the selected agent's command with its
/// arguments (A1; `up` installed it before the session starts), else the login shell.
pub fn default_command(effective: &Effective, host_shell: Option<String>) -> SessionCommand {
    match crate::agents::session_command(effective) {
        Some(argv) => SessionCommand::Argv { argv },
        None => SessionCommand::LoginShell {
            preferred: host_shell,
        },
    }
}

/// `command` in the `agent` window of the tmux session [`TMUX_SESSION`], with windows `edit`
/// (`$VISUAL`, `$EDITOR` or `vi` in the workspace) and `shell`, attached when it exists and
/// created otherwise. Without tmux in the image the session prints why and exits 127.
pub fn tmux_command(command: &SessionCommand) -> SessionCommand {
    // Arguments reach the script as "$@", never through the shell's parser.
    const SCRIPT: &str = r#"if ! command -v tmux >/dev/null 2>&1; then
  echo 'airlock: layout = "tmux" needs tmux in the sandbox image: add "tmux" to packages, or set layout = "plain"' >&2
  exit 127
fi
if tmux has-session -t "=$0" 2>/dev/null; then exec tmux attach-session -t "=$0"; fi
exec tmux new-session -s "$0" -n agent "$@" \; new-window -d -n edit 'exec ${VISUAL:-${EDITOR:-vi}} .' \; new-window -d -n shell"#;
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        SCRIPT.to_owned(),
        TMUX_SESSION.to_owned(),
    ];
    match command {
        SessionCommand::Argv { argv: inner } => argv.extend(inner.iter().cloned()),
        // tmux starts its default shell (`$SHELL`, set in the spec) as a login shell itself.
        SessionCommand::LoginShell { .. } => {}
    }
    SessionCommand::Argv { argv }
}

/// The configured detach key sequence; a configuration error for one that would take a key
/// typing needs. `up` and `attach` check it before any side effect (L2).
pub fn detach_key(effective: &Effective) -> Result<DetachKey, HostError> {
    let configured = &effective.detach_key.value;
    DetachKey::from_bytes(&configured.text, &configured.bytes).map_err(|e| {
        HostError::new(
            ErrorKind::Config,
            "config.invalid",
            format!("detach_key: {e}"),
        )
        .with_hint("fix detach_key in your configuration (`airlock config`)")
    })
}

/// What attaching to `session` creates when no running session has the name: the
/// [`default_spec`] (with the host user's `$SHELL` when it is absolute) for the default
/// session, nothing for any other.
pub fn create_spec(
    effective: &Effective,
    record: &SandboxRecord,
    data_root: &std::path::Path,
    session: &str,
    term: String,
) -> Option<SessionSpec> {
    (session == DEFAULT_SESSION).then(|| {
        let shell = std::env::var(airlock_config::env_vars::SHELL)
            .ok()
            .filter(|s| s.starts_with('/'));
        default_spec(effective, record, data_root, term, shell)
    })
}

/// The default session's full spec for the ready sandbox `record`: [`default_command`] in the
/// configured layout, started in the first workspace, with `TERM` = `term` and the placeholder
/// of every secret stored now (a secret added since the start reaches the new session too).
pub fn default_spec(
    effective: &Effective,
    record: &SandboxRecord,
    data_root: &std::path::Path,
    term: String,
    host_shell: Option<String>,
) -> SessionSpec {
    let command = default_command(effective, host_shell.clone());
    let mut env = BTreeMap::new();
    let command = match effective.layout.value {
        airlock_config::raw::Layout::Plain => command,
        airlock_config::raw::Layout::Tmux => {
            if let Some(shell) = host_shell {
                env.insert(airlock_config::env_vars::SHELL.to_owned(), shell);
            }
            tmux_command(&command)
        }
    };
    if has_egress(record) {
        crate::egress::add_current_placeholders(data_root, &mut env);
    }
    SessionSpec {
        command,
        env,
        cwd: record
            .plan
            .workspaces
            .first()
            .map(|w| w.sandbox.to_string_lossy().into_owned()),
        term,
    }
}

/// Whether the sandbox was started with an egress proxy (its start request says so).
fn has_egress(record: &SandboxRecord) -> bool {
    std::fs::read(record.paths.state_dir.join(START_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<StartRequest>(&b).ok())
        .is_some_and(|start| start.spec.egress.is_some())
}

/// A session failure as the user sees it. `name` is the session concerned ("" for none).
pub fn session_error(e: SessionClientError, name: &str) -> HostError {
    let message = e.to_string();
    let doctor = "run `airlock doctor`; if it reports nothing, this is a bug in airlock";
    match e {
        SessionClientError::Refused(refusal) => {
            let (kind, code, hint) = match refusal.code {
                SessionErrorCode::NoSuchSession => (
                    ErrorKind::Failed,
                    "session.not_found",
                    "`airlock sessions` lists the sandbox's sessions".to_owned(),
                ),
                SessionErrorCode::InvalidName | SessionErrorCode::BadRequest => (
                    ErrorKind::Usage,
                    "session.invalid",
                    "session names use letters, digits, '.', '_' and '-'".to_owned(),
                ),
                SessionErrorCode::LimitReached => (
                    ErrorKind::Failed,
                    "session.limit",
                    "remove a session with `airlock sessions kill NAME`".to_owned(),
                ),
                SessionErrorCode::CommandNotFound
                | SessionErrorCode::PermissionDenied
                | SessionErrorCode::SpawnFailed => (
                    ErrorKind::Failed,
                    "session.spawn",
                    format!("session {name}'s command must exist in the sandbox image"),
                ),
                SessionErrorCode::Internal => {
                    (ErrorKind::Internal, "session.guest", doctor.to_owned())
                }
            };
            HostError::new(kind, code, message).with_hint(hint)
        }
        SessionClientError::Unsupported { .. } => {
            HostError::new(ErrorKind::Failed, "session.unsupported", message)
                .with_hint("the sandbox runs an older airlock: `airlock down`, then `airlock up`")
        }
        SessionClientError::Name(_) | SessionClientError::Spec(_) => HostError::usage(message)
            .with_hint("session names use letters, digits, '.', '_' and '-'"),
        SessionClientError::Closed => HostError::new(
            ErrorKind::Failed,
            "session.closed",
            "the sandbox closed the session stream (did it stop?)",
        )
        .with_hint("run `airlock status` to see the sandbox's health"),
        SessionClientError::Output(_) => {
            HostError::new(ErrorKind::Failed, "session.output", message)
                .with_hint("the terminal went away; the session keeps running")
        }
        SessionClientError::Handshake(_)
        | SessionClientError::Packet(_)
        | SessionClientError::Remote(_)
        | SessionClientError::Unexpected { .. }
        | SessionClientError::Clone(_) => {
            HostError::internal("session.channel", message).with_hint(doctor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tmux_layout_passes_the_command_as_arguments_not_shell_text() {
        let agent = SessionCommand::Argv {
            argv: vec!["agent".into(), "--flag=$(rm -rf ~)".into()],
        };
        let SessionCommand::Argv { argv } = tmux_command(&agent) else {
            panic!("tmux layout is an argv")
        };
        assert_eq!(argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(argv[3], TMUX_SESSION);
        assert_eq!(argv[4..], ["agent", "--flag=$(rm -rf ~)"]);
        assert!(!argv[2].contains("rm -rf"));
    }

    #[test]
    fn the_tmux_layout_without_tmux_in_the_image_says_so_and_exits_127() {
        let SessionCommand::Argv { argv } =
            tmux_command(&SessionCommand::LoginShell { preferred: None })
        else {
            panic!("tmux layout is an argv")
        };
        let empty = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", empty.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(127), "{stderr}");
        assert!(
            stderr.contains("layout = \"tmux\" needs tmux in the sandbox image"),
            "{stderr}"
        );
    }
}
