//! The agent in its sandbox (A1–A5): what `up` adds around the selected agent.
//!
//! Order in `up`:
//! 1. [`extend_spec`] (pure, also used by `plan` to compare with a running sandbox): the agent's
//!    tool directory read-only at `/var/lib/airlock/agents/<name>` with its `bin` at the end of
//!    `PATH` (so an agent the image ships wins), persisted state directories (A4, opt-in), and a
//!    clone-mode workspace's private clone in place of the work tree (A5).
//! 2. [`prepare_host`], after validation, before the sandbox starts: creates those directories,
//!    the private clone and its `airlock-<name>` remote, and a linked worktree's missing `hooks`
//!    directory (so the sandbox cannot plant one, C8).
//! 3. once the sandbox is ready: [`install::ensure`] installs a missing agent command in a
//!    separate installer sandbox; [`home::apply`] writes the synced configuration (A2) and git's
//!    configuration (A5) into the sandbox home.
//!
//! [`session_command`] is what the default session runs when an agent is selected (S1, A1).

pub mod clone;
pub mod home;
pub mod install;

use std::path::{Path, PathBuf};

use airlock_config::agents::AgentSpec;
use airlock_config::effective::Agent;
use airlock_config::raw::WorkspaceMode;
use airlock_config::{Effective, Roots};
use airlock_linux::spec::{Mapping, SandboxSpec};

use crate::error::HostError;
use crate::paths::ensure_root;

/// Where agents' tool directories appear inside every sandbox.
pub const TOOLS_INSIDE: &str = "/var/lib/airlock/agents";

/// The selected agent (`agent = …`), if any.
pub fn selected(eff: &Effective) -> Option<&Agent> {
    eff.agents.iter().find(|a| a.selected)
}

/// The default session's command for the selected agent: its command and its arguments
/// (the catalogue's, or `[agents.<name>] args`); `None` without an agent.
pub fn session_command(eff: &Effective) -> Option<Vec<String>> {
    let agent = selected(eff)?;
    let mut argv = vec![agent.spec.command.to_owned()];
    argv.extend(agent.args.value.iter().cloned());
    Some(argv)
}

/// The agent's tool directory on the host: `<cache>/agents/<name>`.
pub fn tool_dir(roots: &Roots, spec: &AgentSpec) -> PathBuf {
    roots.cache.join("agents").join(spec.name)
}

/// The agent's tool directory inside sandboxes.
pub fn tool_dir_inside(spec: &AgentSpec) -> PathBuf {
    Path::new(TOOLS_INSIDE).join(spec.name)
}

/// The agent's persisted state on the host (A4): `<data>/agent-state/<name>`.
pub fn state_dir(roots: &Roots, spec: &AgentSpec) -> PathBuf {
    roots.data.join("agent-state").join(spec.name)
}

/// Adds the agent's and the clone's mappings to `spec` (pure: creates nothing).
pub fn extend_spec(eff: &Effective, roots: &Roots, sandbox: &str, spec: &mut SandboxSpec) {
    if let Some(agent) = selected(eff) {
        let inside = tool_dir_inside(agent.spec);
        spec.mounts.push(Mapping {
            host: tool_dir(roots, agent.spec),
            sandbox: inside.clone(),
            writable: false,
        });
        let bin = inside.join("bin");
        crate::provision::host_env::add_to_path(
            spec,
            &bin.to_string_lossy(),
            crate::provision::host_env::PathEnd::Back,
        );
    }
    for agent in eff.agents.iter().filter(|a| a.persist_state.value) {
        let host = state_dir(roots, agent.spec);
        for path in agent.spec.state_paths {
            let rel = path.trim_end_matches('/');
            spec.mounts.push(Mapping {
                host: host.join(rel),
                sandbox: eff.home.sandbox_path.join(rel),
                writable: true,
            });
        }
    }
    for w in &eff.workspaces {
        if w.mode.value != WorkspaceMode::Clone {
            continue;
        }
        let clone = clone::clone_dir(roots, sandbox, &w.name);
        if let Some(m) = spec
            .workspaces
            .iter_mut()
            .find(|m| m.sandbox == w.sandbox_path)
        {
            m.host = clone.clone();
        }
    }
}

/// [`prepare_host`], then [`extend_spec`]: what `up` runs once validation is over.
pub fn prepare(
    eff: &Effective,
    roots: &Roots,
    sandbox: &str,
    spec: &mut SandboxSpec,
) -> Result<Vec<String>, HostError> {
    let notes = prepare_host(eff, roots, sandbox)?;
    extend_spec(eff, roots, sandbox, spec);
    Ok(notes)
}

/// Creates on the host what [`extend_spec`] mapped; returns notes for `up`'s output.
pub fn prepare_host(
    eff: &Effective,
    roots: &Roots,
    sandbox: &str,
) -> Result<Vec<String>, HostError> {
    let mut notes = Vec::new();
    if let Some(agent) = selected(eff) {
        ensure_root(roots, &tool_dir(roots, agent.spec))?;
    }
    for agent in eff.agents.iter().filter(|a| a.persist_state.value) {
        let host = state_dir(roots, agent.spec);
        ensure_root(roots, &host)?;
        for path in agent.spec.state_paths {
            match path.strip_suffix('/') {
                Some(dir) => ensure_root(roots, &host.join(dir))?,
                None => state_file(&host.join(path))?,
            }
        }
    }
    for w in &eff.workspaces {
        if let Some(linked) = &w.linked_git_dir {
            let hooks = linked.common_dir.join("hooks");
            if std::fs::symlink_metadata(&hooks).is_err() {
                std::fs::create_dir(&hooks).map_err(|e| io_error(&hooks, e))?;
            }
        }
        if w.mode.value == WorkspaceMode::Clone {
            notes.extend(clone::ensure(roots, sandbox, w)?);
        }
    }
    Ok(notes)
}

/// A persisted state *file* (e.g. `~/.claude.json`): created once, `{}` for JSON so the agent
/// reads an empty object rather than an empty file.
fn state_file(path: &Path) -> Result<(), HostError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let initial: &[u8] = if path.extension().is_some_and(|e| e == "json") {
        b"{}\n"
    } else {
        b""
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => f.write_all(initial).map_err(|e| io_error(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Base setup of the agent and git in the ready sandbox (A1, A2, A3, A5), under the sandbox's
/// lock so a concurrent `down` cannot pull the sandbox away mid-write: installs a missing agent
/// command ([`install::ensure`]), then writes the synced configuration and git's configuration
/// ([`home`]; `base` is [`home::base_files`], which `up` collects from the host while the
/// sandbox starts). When the sandbox `up` made ready is no longer the ready one (a concurrent
/// `down` won the lock), nothing is done and [`ReadySetup::Gone`] says so.
pub fn setup_ready(
    host: &crate::Host,
    name: &airlock_core::names::SandboxName,
    epoch: &airlock_core::records::Epoch,
    eff: &Effective,
    roots: &Roots,
    base: home::BaseFiles,
) -> Result<ReadySetup, HostError> {
    let lifecycle_error = crate::lifecycle::lifecycle_error;
    let _guard = host
        .stores
        .lock(name, crate::lifecycle::lock_wait())
        .map_err(lifecycle_error)?;
    let Some(record) = still_ready(host, name, epoch)? else {
        return Ok(ReadySetup::Gone);
    };
    let mut notes = Vec::new();
    match install::ensure(eff, roots, &host.backend, &record)? {
        install::Installed::Now { package } => {
            notes.push(format!("installed the agent from {package}"))
        }
        install::Installed::NoAgent | install::Installed::Present => {}
    }
    // The home files (synced agent configuration, git's configuration) are conveniences: an
    // image that cannot take them (no working /bin/sh, a read-only home) still comes up, and
    // `up` says what is missing instead of failing.
    if let Err(e) = home::apply(&host.backend, &record, &eff.home.sandbox_path, &base.files) {
        let hint = e
            .hint
            .as_deref()
            .map(|h| format!(" ({h})"))
            .unwrap_or_default();
        notes.push(format!("warning: {}{hint}", e.message));
    }
    notes.extend(base.notes);
    notes.extend(credential_notes(eff, roots));
    Ok(ReadySetup::Done(notes))
}

/// What [`setup_ready`] found and did.
#[derive(Debug)]
pub enum ReadySetup {
    /// The sandbox is still the ready one `up` made; notes for `up`'s output.
    Done(Vec<String>),
    /// A concurrent command (`down`, a newer `up`) stopped or replaced it: nothing was done.
    Gone,
}

/// The record of sandbox `name` when it is still the ready sandbox of `epoch`, proven the way
/// `status` proves readiness (without its disk-use walk); `None` once a concurrent command
/// stopped or replaced it. Callers that act on the answer hold the sandbox's lock.
pub fn still_ready(
    host: &crate::Host,
    name: &airlock_core::names::SandboxName,
    epoch: &airlock_core::records::Epoch,
) -> Result<Option<airlock_core::records::SandboxRecord>, HostError> {
    use airlock_core::lifecycle::{self, Health};
    let report = lifecycle::readiness(&host.stores, &host.backend, name)
        .map_err(crate::lifecycle::lifecycle_error)?;
    Ok(report
        .record
        .filter(|r| report.health == Health::Ready && r.epoch == *epoch))
}

/// Notes for agents with `credentials = true` (A3) whose key is not stored as a secret: the
/// key reaches the sandbox only as a placeholder of a stored secret (N5).
pub fn credential_notes(eff: &Effective, roots: &Roots) -> Vec<String> {
    let stored: Vec<String> = airlock_secrets::SecretStore::open_existing(&roots.data)
        .ok()
        .flatten()
        .and_then(|s| s.list().ok())
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.name)
        .collect();
    let mut notes = Vec::new();
    for agent in eff.agents.iter().filter(|a| a.credentials.value) {
        let spec = agent.spec;
        if spec.api_key_env.is_empty()
            || spec
                .api_key_env
                .iter()
                .any(|k| stored.iter().any(|s| s == k))
        {
            continue;
        }
        let host = spec.api_hosts.first().copied().unwrap_or("<api host>");
        notes.push(format!(
            "note: agent {}: credentials = true, but no secret {} is stored; run \
             `airlock secret set {} --host {host}` (the sandbox then sees only a placeholder)",
            spec.name,
            spec.api_key_env.join(" or "),
            spec.api_key_env[0]
        ));
    }
    notes
}

pub(crate) fn io_error(path: &Path, e: std::io::Error) -> HostError {
    HostError::internal("agent.io", format!("{}: {e}", path.display()))
        .with_hint("check the permissions of that path")
}
