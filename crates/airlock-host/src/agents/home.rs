//! Files `up` writes into the sandbox home on every run (base setup, P1): the agents' synced
//! configuration (A2) and git's configuration (A5).
//!
//! [`base_files`] decides what to write (reading host files only through
//! `airlock_config::agent_sync`, which never follows links and scans for credential shapes);
//! [`apply`] writes it through the control channel as the sandbox user, each file staged and
//! renamed into place. A skipped file is a note in `up`'s output naming the file and line; `up`
//! still succeeds.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_config::agent_sync;
use airlock_config::sandbox_git::{self, GitSetup};
use airlock_config::{Effective, Roots};
use airlock_core::backend::Backend;
use airlock_core::records::SandboxRecord;
use airlock_protocol::{ExecClient, ExecRequest, ExecUser};

use crate::error::{ErrorKind, HostError};
use crate::lifecycle::backend::LinuxBackend;
use crate::lifecycle::key_of;

/// One file for the sandbox home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeFile {
    /// Path relative to the home directory.
    pub home_rel: PathBuf,
    /// Contents.
    pub contents: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
}

/// What base setup writes into the home, and the notes for `up`'s output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BaseFiles {
    /// Files to write.
    pub files: Vec<HomeFile>,
    /// Lines for `up`'s output (skipped files, dropped values).
    pub notes: Vec<String>,
}

/// Collects the synced agent configuration of every agent with `sync_config` and the git
/// configuration. Reads host files; writes nothing.
pub fn base_files(eff: &Effective, roots: &Roots) -> BaseFiles {
    let mut out = BaseFiles::default();
    for agent in eff.agents.iter().filter(|a| a.sync_config.value) {
        let set = agent_sync::collect(&roots.home, agent.spec);
        for skip in &set.skipped {
            out.notes.push(format!(
                "note: config sync ({}): {}",
                agent.spec.name,
                skip.message()
            ));
        }
        out.files.extend(set.files.into_iter().map(|f| HomeFile {
            home_rel: f.home_rel,
            contents: f.contents,
            mode: if f.executable { 0o700 } else { 0o600 },
        }));
    }
    let mut safe: Vec<PathBuf> = Vec::new();
    for w in &eff.workspaces {
        safe.push(w.sandbox_path.clone());
        if let Some(linked) = &w.linked_git_dir {
            safe.push(linked.common_dir.clone());
        }
    }
    let setup = GitSetup {
        safe_directories: safe,
        user_name: host_git_config(&roots.home, "user.name"),
        user_email: host_git_config(&roots.home, "user.email"),
    };
    let (files, dropped) = sandbox_git::render(&setup, &eff.home.sandbox_path);
    for d in dropped {
        out.notes.push(format!(
            "note: git configuration: {} left out: {}",
            d.key, d.reason
        ));
    }
    out.files.extend(files.into_iter().map(|f| HomeFile {
        home_rel: PathBuf::from(f.home_rel),
        contents: f.contents.into_bytes(),
        mode: if f.executable { 0o700 } else { 0o600 },
    }));
    out
}

/// The host user's global git setting `key` (the user's own configuration, never a project's:
/// git runs outside any repository).
fn host_git_config(home: &Path, key: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["config", "--global", "--get", key])
        .current_dir(home)
        .env(airlock_config::env_vars::HOME, home)
        .env("GIT_CEILING_DIRECTORIES", home)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    (out.status.success() && !value.is_empty()).then(|| value.to_owned())
}

/// The writer: staged in the same directory, then renamed over the target.
/// The staging name carries the writer's pid, so two writers never share one.
const WRITE_SCRIPT: &str =
    "set -e; umask 077; f=$1; t=$f.airlock-new.$$; mkdir -p -- \"${f%/*}\"; \
    cat > \"$t\"; chmod \"$2\" \"$t\"; mv -f -- \"$t\" \"$f\"";

/// Writes `files` into the sandbox home of the ready sandbox `record`, as the sandbox user.
pub fn apply(
    backend: &LinuxBackend,
    record: &SandboxRecord,
    home: &Path,
    files: &[HomeFile],
) -> Result<(), HostError> {
    for f in files {
        let target = home.join(&f.home_rel);
        let request = ExecRequest {
            argv: vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                WRITE_SCRIPT.to_owned(),
                "airlock-write".to_owned(),
                target.to_string_lossy().into_owned(),
                format!("{:o}", f.mode),
            ],
            env: BTreeMap::new(),
            cwd: None,
            user: ExecUser::Sandbox,
            tty: None,
        };
        let (code, stderr) = exec(backend, record, &request, f.contents.clone())?;
        if code != 0 {
            return Err(HostError::new(
                ErrorKind::Failed,
                "agent.home_write",
                format!(
                    "cannot write {} in the sandbox (status {code}): {}",
                    target.display(),
                    String::from_utf8_lossy(&stderr).trim()
                ),
            )
            .with_hint("check that the image has /bin/sh and that the sandbox home is writable"));
        }
    }
    Ok(())
}

/// Runs `request` in the ready sandbox with `stdin`; returns its status and stderr.
pub(crate) fn exec(
    backend: &LinuxBackend,
    record: &SandboxRecord,
    request: &ExecRequest,
    stdin: Vec<u8>,
) -> Result<(i32, Vec<u8>), HostError> {
    let channel = backend
        .connect(record)
        .map_err(|e| HostError::internal("agent.connect", e.to_string()))?;
    let key = key_of(&channel.key)?;
    exec_on(channel.stream, &key, request, stdin)
}

/// Runs `request` over an opened control stream; returns its status and output (stderr, then
/// stdout).
pub(crate) fn exec_on(
    stream: std::os::unix::net::UnixStream,
    key: &airlock_protocol::Key,
    request: &ExecRequest,
    stdin: Vec<u8>,
) -> Result<(i32, Vec<u8>), HostError> {
    let client = ExecClient::connect(stream, key)
        .map_err(|e| HostError::internal("agent.exec", e.to_string()))?;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let status = client
        .run(
            request,
            Some(Box::new(Cursor::new(stdin))),
            &mut stdout,
            &mut stderr,
        )
        .map_err(|e| HostError::internal("agent.exec", e.to_string()))?;
    stderr.extend_from_slice(&stdout);
    Ok((status.shell_code(), stderr))
}
