//! Installing a missing agent command (A1).
//!
//! When the selected agent's command is not on the project sandbox's `PATH` (the image lacks
//! it and the tool directory holds nothing yet), [`ensure`] installs it from the catalogue's
//! package into the agent's tool directory `<cache>/agents/<name>` on the host, so the next
//! `up` (of any project) does not download it again.
//!
//! The install runs in a **separate installer sandbox**: the same image, *no* workspace, the
//! tool directory the only writable mapping (at `/var/lib/airlock/agents/<name>`, the path every
//! project sandbox sees it at, so scripts and links it writes stay valid), network through its
//! own egress proxy with the user's policy only (a project config does not apply). Project
//! sandboxes map the tool directory read-only, so one project cannot poison the agent for
//! another. The host writes the marker `.airlock-installed` only after the installer succeeded
//! and the command exists; a directory without the marker is a half-finished install and is
//! emptied before the next attempt.

use std::collections::BTreeMap;
use std::path::Path;

use airlock_config::agents::{AgentSpec, Package};
use airlock_config::{Effective, Roots};
use airlock_core::records::SandboxRecord;
use airlock_linux::spec::Mapping;
use airlock_protocol::{ExecRequest, ExecUser, Key};

use super::home::{exec, exec_on};
use super::{selected, tool_dir, tool_dir_inside};
use crate::error::{ErrorKind, HostError};
use crate::lifecycle::backend::LinuxBackend;
use crate::run::{build_spec, EphemeralRun, Phases};

/// The marker of a finished install in a tool directory.
pub const MARKER: &str = ".airlock-installed";

/// What [`ensure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// No agent is selected.
    NoAgent,
    /// The command was already on `PATH` (in the image or the tool directory).
    Present,
    /// It was installed now from `package`.
    Now {
        /// The package, e.g. `npm @anthropic-ai/claude-code`.
        package: String,
    },
}

/// Makes sure the selected agent's command runs in the ready sandbox `record`.
pub fn ensure(
    eff: &Effective,
    roots: &Roots,
    backend: &LinuxBackend,
    record: &SandboxRecord,
) -> Result<Installed, HostError> {
    let Some(agent) = selected(eff) else {
        return Ok(Installed::NoAgent);
    };
    let spec = agent.spec;
    if on_path(backend, record, spec.command)? {
        return Ok(Installed::Present);
    }
    let Some(package) = spec.package else {
        return Err(HostError::new(
            ErrorKind::Failed,
            "agent.missing",
            format!(
                "`{}` ({}) is not in the image and the agent names no package to install",
                spec.command, spec.display_name
            ),
        )
        .with_hint(format!(
            "add `package = \"npm:<name>\"` (or pip:) under [agents.{}] in the user config, \
             or install it in the image",
            spec.name
        )));
    };
    let dir = tool_dir(roots, spec);
    // One installer per agent at a time, across projects: another `up` may be installing it.
    let _lock = lock(&dir)?;
    if on_path(backend, record, spec.command)? {
        return Ok(Installed::Present);
    }
    if dir.join(MARKER).exists() {
        return Err(install_failed(
            spec,
            format!(
                "{} holds a finished install, but `{}` is not found inside the sandbox",
                dir.display(),
                spec.command
            ),
        ));
    }
    empty_dir(&dir)?;
    run_installer(eff, roots, spec, package)?;
    let bin = dir.join("bin").join(spec.command);
    if std::fs::symlink_metadata(&bin).is_err() {
        return Err(install_failed(
            spec,
            format!("the package did not provide {}", bin.display()),
        ));
    }
    std::fs::write(dir.join(MARKER), package_text(package))
        .map_err(|e| super::io_error(&dir.join(MARKER), e))?;
    if !on_path(backend, record, spec.command)? {
        return Err(install_failed(
            spec,
            format!("`{}` is still not found inside the sandbox", spec.command),
        ));
    }
    Ok(Installed::Now {
        package: package_text(package),
    })
}

/// An exclusive `flock` on `<tool dir>.lock`, released when the file is dropped.
fn lock(dir: &Path) -> Result<std::fs::File, HostError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|e| super::io_error(&path, e))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| super::io_error(&path, e.into()))?;
    Ok(file)
}

fn package_text(p: Package) -> String {
    match p {
        Package::Npm(name) => format!("npm {name}"),
        Package::Pip(name) => format!("pip {name}"),
    }
}

/// Whether `command` is on the sandbox user's `PATH`.
fn on_path(
    backend: &LinuxBackend,
    record: &SandboxRecord,
    command: &str,
) -> Result<bool, HostError> {
    let request = ExecRequest {
        argv: vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            "command -v \"$1\" >/dev/null".to_owned(),
            "airlock-probe".to_owned(),
            command.to_owned(),
        ],
        env: BTreeMap::new(),
        cwd: None,
        user: ExecUser::Sandbox,
        tty: None,
    };
    Ok(exec(backend, record, &request, Vec::new())?.0 == 0)
}

/// Removes what a half-finished install left (never following links: `remove_dir_all` does
/// not).
fn empty_dir(dir: &Path) -> Result<(), HostError> {
    let entries = std::fs::read_dir(dir).map_err(|e| super::io_error(dir, e))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let removed = if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| super::io_error(&path, e))?;
    }
    Ok(())
}

/// The shell command that installs `spec`'s package into `prefix`.
pub fn install_script(package: Package, prefix: &Path) -> Vec<String> {
    let prefix = prefix.to_string_lossy().into_owned();
    let script = match package {
        Package::Npm(_) => {
            "command -v npm >/dev/null || { echo 'npm is not installed in the image' >&2; exit 127; }; \
             npm install --global --prefix \"$1\" --no-audit --no-fund --loglevel=error \"$2\""
        }
        Package::Pip(_) => {
            "command -v python3 >/dev/null || { echo 'python3 is not installed in the image' >&2; exit 127; }; \
             python3 -m venv \"$1\" && \"$1/bin/pip\" install --quiet --disable-pip-version-check \"$2\""
        }
    };
    let name = match package {
        Package::Npm(n) | Package::Pip(n) => n,
    };
    vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        "airlock-install".to_owned(),
        prefix,
        name.to_owned(),
    ]
}

fn run_installer(
    eff: &Effective,
    roots: &Roots,
    spec: &AgentSpec,
    package: Package,
) -> Result<(), HostError> {
    let inside = tool_dir_inside(spec);
    let mut sandbox_spec = build_spec(eff, false)?;
    sandbox_spec.workspaces.clear();
    sandbox_spec.mounts = vec![Mapping {
        host: tool_dir(roots, spec),
        sandbox: inside.clone(),
        writable: true,
    }];
    crate::egress::attach(&mut sandbox_spec, &eff.network, &roots.data)?;
    let mut phases = Phases::new(None);
    let run = EphemeralRun::start(roots, None, &mut sandbox_spec, &mut phases, ignore)?;
    let result = (|| {
        let control = run.sandbox().control().ok_or_else(|| {
            HostError::internal("agent.install", "the installer's control channel is closed")
        })?;
        let stream = airlock_protocol::open_stream(control)
            .map_err(|e| HostError::internal("agent.install", e.to_string()))?;
        let key = Key::from_bytes(*run.sandbox().key());
        // npm and install scripts trust the image's whole system store (where a site's own
        // TLS-inspecting CA lives) plus airlock's CA, like every other client in the sandbox.
        let bundle = format!(
            "{}/{}",
            airlock_linux::spec::EGRESS_DIR,
            crate::egress::CA_BUNDLE
        );
        let env = BTreeMap::from([
            (
                airlock_config::env_vars::NODE_EXTRA_CA_CERTS.to_owned(),
                bundle.clone(),
            ),
            ("npm_config_cafile".to_owned(), bundle),
        ]);
        let request = ExecRequest {
            argv: install_script(package, &inside),
            env,
            cwd: None,
            user: ExecUser::Sandbox,
            tty: None,
        };
        exec_on(stream, &key, &request, Vec::new())
    })();
    let _ = run.finish(&mut phases);
    let (code, output) = result?;
    if code != 0 {
        let text = String::from_utf8_lossy(&output);
        let tail: Vec<&str> = text.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(install_failed(
            spec,
            format!("the installer exited with {code}:\n{}", tail.join("\n")),
        ));
    }
    Ok(())
}

fn ignore(_: &str) {}

fn install_failed(spec: &AgentSpec, detail: String) -> HostError {
    HostError::new(
        ErrorKind::Failed,
        "agent.install",
        format!(
            "cannot install {} ({}): {detail}",
            spec.display_name,
            spec.package
                .map_or_else(|| "no package".to_owned(), package_text)
        ),
    )
    .with_hint(
        "check `airlock policy check registry.npmjs.org` (or pypi.org), or install the agent \
         in the image",
    )
}
