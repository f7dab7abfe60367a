//! Files `up` writes into the sandbox home on every run (base setup, P1): the agents' synced
//! configuration (A2) and git's configuration (A5).
//!
//! [`base_files`] decides what to write (reading host files only through
//! `airlock_config::agent_sync`, which never follows links and scans for credential shapes);
//! [`apply`] writes it through the guest's file transfer as the sandbox user, each file
//! published atomically, with no process started inside. A skipped file is a note in `up`'s output naming the file and line; `up`
//! still succeeds.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_config::agent_sync;
use airlock_config::sandbox_git::{self, GitSetup};
use airlock_config::{Effective, Roots};
use airlock_core::backend::Backend;
use airlock_core::records::SandboxRecord;
use airlock_protocol::{ExecClient, ExecRequest};

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
    let (user_name, user_email) = host_git_identity(&roots.home);
    let setup = GitSetup {
        safe_directories: safe,
        user_name,
        user_email,
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

/// The host user's global `user.name` and `user.email` (the user's own configuration, never a
/// project's: git runs outside any repository), read by one git process on `up`'s path. As with
/// `git config --get`, the last value of a key wins; an empty value counts as unset. Without a
/// global configuration file there is nothing to read, and no process is started.
fn host_git_identity(home: &Path) -> (Option<String>, Option<String>) {
    let xdg_config = std::env::var_os(airlock_config::env_vars::XDG_CONFIG_HOME);
    let explicit = std::env::var_os(airlock_config::env_vars::GIT_CONFIG_GLOBAL).is_some();
    if !explicit && !global_git_config_exists(home, xdg_config.as_deref()) {
        return (None, None);
    }
    let Ok(out) = Command::new("git")
        .args([
            "config",
            "--global",
            "-z",
            "--get-regexp",
            r"^user\.(name|email)$",
        ])
        .current_dir(home)
        .env(airlock_config::env_vars::HOME, home)
        .env("GIT_CEILING_DIRECTORIES", home)
        .output()
    else {
        return (None, None);
    };
    if !out.status.success() {
        return (None, None);
    }
    let (mut name, mut email) = (None, None);
    // `-z`: each entry is `key\nvalue\0`; keys come lower-cased.
    for entry in out.stdout.split(|b| *b == 0) {
        let Ok(entry) = std::str::from_utf8(entry) else {
            continue;
        };
        let Some((key, value)) = entry.split_once('\n') else {
            continue;
        };
        let value = (!value.is_empty()).then(|| value.to_owned());
        match key {
            "user.name" => name = value,
            "user.email" => email = value,
            _ => {}
        }
    }
    (name, email)
}

/// Whether `git config --global` (run with `HOME` = `home`, without `GIT_CONFIG_GLOBAL`) has a
/// file to read: it reads `~/.gitconfig`, or `$XDG_CONFIG_HOME/git/config` (an unset or empty
/// `XDG_CONFIG_HOME` is `~/.config`) when that is absent. Anything at either path counts, a
/// link or an unreadable file too: git then decides.
fn global_git_config_exists(home: &Path, xdg_config_home: Option<&std::ffi::OsStr>) -> bool {
    let xdg = xdg_config_home
        .filter(|v| !v.is_empty())
        .map_or_else(|| home.join(".config"), PathBuf::from);
    [home.join(".gitconfig"), xdg.join("git").join("config")]
        .iter()
        .any(|p| p.symlink_metadata().is_ok())
}

/// Writes `files` into the sandbox home of the ready sandbox `record` through the guest's file
/// transfer (the path of `airlock push`), so nothing is run inside: an image without a shell
/// takes them too. The files are staged with their modes as one tree in a private temporary
/// directory of the sandbox's runtime directory (missing parents as empty 0700 directories) and pushed over one
/// stream, which the guest serves as the sandbox user, publishing each push atomically and
/// following no link: a file with `replace` into its parent; a directory without, so one
/// that exists is kept and its staged entries are pushed into it the same way (a fresh home
/// takes each top-level entry in one push).
pub fn apply(
    backend: &LinuxBackend,
    record: &SandboxRecord,
    home: &Path,
    files: &[HomeFile],
) -> Result<(), HostError> {
    // Staged in the sandbox's private runtime directory (0700, on tmpfs where the runtime
    // root is): no journalled metadata writes on a busy disk, and one left by a killed `up`
    // goes with the sandbox. The sandbox never sees this directory.
    let staging = tempfile::Builder::new()
        .prefix(".home-")
        .tempdir_in(&record.paths.runtime_dir)
        .map_err(|e| write_error(home, &format!("cannot stage the home files: {e}")))?;
    let root = staging.path().join("home");
    std::fs::create_dir(&root)
        .map_err(|e| write_error(home, &format!("cannot stage the home files: {e}")))?;
    for f in files {
        let target = home.join(&f.home_rel);
        stage(&root, f).map_err(|e| write_error(&target, &e))?;
    }
    let mut pusher = Pusher {
        backend,
        record,
        wire: None,
    };
    push_entries(&mut pusher, &root, home)
}

/// Stages `f` below `root`, creating its missing parents as empty 0700 directories.
fn stage(root: &Path, f: &HomeFile) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let plain = f
        .home_rel
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    let (Some(_), Some(parent), true) = (f.home_rel.file_name(), f.home_rel.parent(), plain) else {
        return Err("not a file name below the home".to_owned());
    };
    let staged = |e: std::io::Error| format!("cannot stage it on the host: {e}");
    let mut dir = root.to_path_buf();
    for component in parent.components() {
        dir.push(component);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(staged)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(staged(e)),
        }
    }
    let path = root.join(&f.home_rel);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(staged)?;
    std::io::Write::write_all(&mut out, &f.contents).map_err(staged)?;
    out.set_permissions(std::fs::Permissions::from_mode(f.mode & 0o777))
        .map_err(staged)
}

/// Pushes every entry of the staged directory `staged` into the sandbox directory `into`
/// (see [`apply`]), in name order.
fn push_entries(pusher: &mut Pusher<'_>, staged: &Path, into: &Path) -> Result<(), HostError> {
    let mut entries: Vec<(std::ffi::OsString, bool)> = std::fs::read_dir(staged)
        .and_then(|dir| {
            dir.map(|e| e.and_then(|e| Ok((e.file_name(), e.file_type()?.is_dir()))))
                .collect()
        })
        .map_err(|e| write_error(into, &format!("cannot read its staged copy: {e}")))?;
    entries.sort();
    for (name, is_dir) in entries {
        let shown = into.join(&name);
        match pusher.push(staged, &name, into, !is_dir, &shown)? {
            Pushed::Published => {}
            Pushed::Exists => push_entries(pusher, &staged.join(&name), &shown)?,
        }
    }
    Ok(())
}

/// What one push did.
enum Pushed {
    Published,
    /// A directory pushed without `replace` exists already (kept as it is).
    Exists,
}

/// Pushes over one authenticated stream, opened on first use and kept while pushes succeed.
struct Pusher<'a> {
    backend: &'a LinuxBackend,
    record: &'a SandboxRecord,
    wire: Option<airlock_files::Wire>,
}

impl Pusher<'_> {
    fn connect(&self, shown: &Path) -> Result<airlock_files::Wire, HostError> {
        let channel = self
            .backend
            .connect(self.record)
            .map_err(|e| HostError::internal("agent.connect", e.to_string()))?;
        let key = key_of(&channel.key)?;
        airlock_files::connect(channel.stream, &key).map_err(|e| write_error(shown, &e.to_string()))
    }

    /// Pushes the staged `dir/name` into the sandbox directory `into`; without `replace`, an
    /// existing entry there is left as it is ([`Pushed::Exists`]).
    fn push(
        &mut self,
        dir: &Path,
        name: &std::ffi::OsStr,
        into: &Path,
        replace: bool,
        shown: &Path,
    ) -> Result<Pushed, HostError> {
        let fail = |why: String| write_error(shown, &why);
        let dest = into
            .to_str()
            .ok_or_else(|| fail("the path is not UTF-8".to_owned()))?;
        loop {
            let (mut wire, reused) = match self.wire.take() {
                Some(wire) => (wire, true),
                None => (self.connect(shown)?, false),
            };
            let parent = rustix::fs::open(
                dir,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| fail(format!("cannot open its staged copy: {e}")))?;
            let source = airlock_files::Source {
                parent,
                name: name.to_string_lossy().into_owned(),
            };
            match airlock_files::push(
                &mut wire,
                &source,
                dest,
                replace,
                &airlock_files::NoProgress,
            ) {
                Ok(_) => {
                    self.wire = Some(wire);
                    return Ok(Pushed::Published);
                }
                // The guest ends the stream after a refusal: the next push opens another.
                Err(airlock_files::TransferError::Remote(r))
                    if !replace && r.code == airlock_protocol::ErrorCode::AlreadyExists =>
                {
                    return Ok(Pushed::Exists)
                }
                // A guest from before streams of several pushes closed it after the last one.
                Err(airlock_files::TransferError::Closed) if reused => continue,
                Err(e) => return Err(fail(e.to_string())),
            }
        }
    }
}

fn write_error(target: &Path, why: &str) -> HostError {
    HostError::new(
        ErrorKind::Failed,
        "agent.home_write",
        format!("cannot write {} in the sandbox: {why}", target.display()),
    )
    .with_hint("check that the sandbox home is writable and holds no link on the way")
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

#[cfg(test)]
mod tests {
    use super::global_git_config_exists;
    use std::ffi::OsStr;

    #[test]
    fn no_global_git_config_file_means_no_git_process() {
        let home = tempfile::tempdir().unwrap();
        assert!(!global_git_config_exists(home.path(), None));
        let xdg = home.path().join("xdg");
        std::fs::create_dir_all(xdg.join("git")).unwrap();
        assert!(!global_git_config_exists(
            home.path(),
            Some(xdg.as_os_str())
        ));
    }

    #[test]
    fn either_file_git_config_global_reads_counts_a_link_too() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::write(h.join(".gitconfig"), "[user]\n").unwrap();
        assert!(global_git_config_exists(h, None));
        std::fs::remove_file(h.join(".gitconfig")).unwrap();
        // `$XDG_CONFIG_HOME/git/config`; unset or empty is `~/.config`.
        let xdg = h.join("xdg");
        std::fs::create_dir_all(xdg.join("git")).unwrap();
        std::fs::write(xdg.join("git/config"), "[user]\n").unwrap();
        assert!(global_git_config_exists(h, Some(xdg.as_os_str())));
        assert!(!global_git_config_exists(h, None));
        assert!(!global_git_config_exists(h, Some(OsStr::new(""))));
        std::fs::create_dir_all(h.join(".config/git")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", h.join(".config/git/config")).unwrap();
        assert!(global_git_config_exists(h, Some(OsStr::new(""))));
    }
}
