//! The import helper: the same executable re-run as a hidden verb inside a new user namespace
//! mapped exactly like a sandbox's (`airlock_linux::idmap::plan`), so an unprivileged user's
//! import stores the archive's owners as the ids the sandbox will show them as (root of the
//! archive → root inside the sandbox), using the user's subordinate ids on the host.
//!
//! Protocol over the helper's stdin/stdout, one line each: host → job (JSON); helper unshares
//! its user namespace → `unshared`; host writes the id maps (`newuidmap`/`newgidmap`) →
//! `mapped`; helper becomes root of its namespace, does the job → reply (JSON). The helper
//! dies with its parent (`PR_SET_PDEATHSIG`); whatever it left is an abandoned working
//! directory that the next import or removal sweeps.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use airlock_linux::idmap::{write_maps, IdPlan};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::unpack::{unpack, UnpackJob, Unpacked};

/// argv[1] of the helper (dispatched before the public command line is parsed).
pub const HELPER_VERB: &str = "__image-helper";

#[derive(Debug, Error)]
pub enum HelperError {
    #[error("cannot start the import helper {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the import helper failed before {stage}: {detail}")]
    Protocol { stage: &'static str, detail: String },
    #[error("cannot map ids for the import helper: {0}")]
    Maps(#[from] airlock_linux::idmap::IdMapError),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Job {
    Unpack(UnpackJob),
    /// Delete a directory of the store and everything in it (never following a link).
    Remove {
        path: PathBuf,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    Unpacked(Unpacked),
    Removed,
    Failed { message: String, refusal: bool },
}

/// Runs `job` in this process (root, or an unprivileged user without subordinate ids).
pub fn run_here(job: &Job) -> Reply {
    match job {
        Job::Unpack(u) => match unpack(u) {
            Ok(done) => Reply::Unpacked(done),
            Err(e) => Reply::Failed {
                message: e.to_string(),
                refusal: e.is_refusal(),
            },
        },
        Job::Remove { path } => match remove_tree(path) {
            Ok(()) => Reply::Removed,
            Err(e) => Reply::Failed {
                message: format!("cannot remove {}: {e}", path.display()),
                refusal: false,
            },
        },
    }
}

/// Deletes `path` and everything below it without following links.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().unwrap_or_default();
    let dir = rustix::fs::open(
        parent,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    crate::tree::remove_at(dir.as_fd(), name.as_bytes()).map_err(Into::into)
}

/// Runs `job` in the helper, inside a user namespace with `plan`'s maps.
pub fn run_in_namespace(exe: &Path, plan: &IdPlan, job: &Job) -> Result<Reply, HelperError> {
    let mut child = Command::new(exe)
        .arg(HELPER_VERB)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| HelperError::Spawn {
            exe: exe.to_path_buf(),
            source,
        })?;
    let result = converse(&mut child, plan, job);
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    result
}

fn converse(
    child: &mut std::process::Child,
    plan: &IdPlan,
    job: &Job,
) -> Result<Reply, HelperError> {
    let proto = |stage: &'static str, detail: String| HelperError::Protocol { stage, detail };
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| proto("start", "no stdin".into()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| proto("start", "no stdout".into()))?;
    let mut lines = BufReader::new(stdout);
    let line = serde_json::to_string(job).map_err(|e| proto("start", e.to_string()))?;
    writeln!(stdin, "{line}").map_err(|e| proto("start", e.to_string()))?;
    let mut reply = String::new();
    lines
        .read_line(&mut reply)
        .map_err(|e| proto("unsharing", e.to_string()))?;
    if reply.trim() != "unshared" {
        return Err(proto("unsharing", reply.trim().to_owned()));
    }
    write_maps(child.id(), plan)?;
    writeln!(stdin, "mapped").map_err(|e| proto("mapping", e.to_string()))?;
    reply.clear();
    lines
        .read_line(&mut reply)
        .map_err(|e| proto("the job", e.to_string()))?;
    serde_json::from_str(reply.trim()).map_err(|_| proto("the job", reply.trim().to_owned()))
}

/// The helper's side (`airlock __image-helper`); the executable calls it before anything else,
/// while it is still single-threaded (a multi-threaded process cannot unshare its user
/// namespace).
pub fn main() -> i32 {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let fail = |out: &mut std::io::Stdout, what: String| {
        let _ = writeln!(out, "{what}");
        1
    };
    let mut line = String::new();
    if input.read_line(&mut line).is_err() {
        return 1;
    }
    let Ok(job) = serde_json::from_str::<Job>(line.trim()) else {
        return fail(&mut out, "error: malformed job".into());
    };
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        return fail(&mut out, format!("error: unshare(CLONE_NEWUSER): {e}"));
    }
    let _ = writeln!(out, "unshared");
    let _ = out.flush();
    line.clear();
    if input.read_line(&mut line).is_err() || line.trim() != "mapped" {
        return 1;
    }
    if let Err(e) = become_root() {
        return fail(
            &mut out,
            format!("error: cannot become root of the namespace: {e}"),
        );
    }
    let reply = run_here(&job);
    let text = serde_json::to_string(&reply).unwrap_or_default();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
    0
}

fn become_root() -> nix::Result<()> {
    use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
    setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))?;
    setgroups(&[])?;
    setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
}
