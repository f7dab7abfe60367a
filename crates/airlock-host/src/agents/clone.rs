//! `workspace_mode = "clone"` (A5): the sandbox works in a private clone, never in the host
//! work tree.
//!
//! - [`ensure`] (before the sandbox starts): `git clone` of the host work tree's committed
//!   `HEAD` into `<data>/clones/<sandbox>/<workspace>` (owned by the invoking user, 0700
//!   parents), mapped at the work tree's path instead of the work tree (I3). The host
//!   repository gets a remote `airlock-<sandbox>` naming the clone, so `git fetch
//!   airlock-<sandbox>` shows the sandbox's commits while it runs and after. Uncommitted changes
//!   stay on the host. The clone is a workspace, so the protected paths (C8: `.git/config`,
//!   `.git/hooks`, …) are read-only inside it like in any work tree.
//! - [`after_down`]: a clone whose branches all point at commits the host repository has is
//!   removed with its remote; one holding commits the host has not fetched is kept, and `down`
//!   says which branches and how to fetch them. [`sweep`] (`clean`) removes the fetched ones of
//!   sandboxes that no longer exist.
//!
//! The clone is written by the sandbox, so it is hostile to the host: the host never runs git
//! *inside* it. It only reads it as a remote (`git ls-remote`, `git fetch`), through
//! `upload-pack`, which git documents as safe against the served repository's configuration
//! and hooks.

use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_config::effective::Workspace;
use airlock_config::Roots;

use crate::error::{ErrorKind, HostError};
use crate::paths::ensure_root;

/// `<data>/clones`.
pub fn clones_root(roots: &Roots) -> PathBuf {
    roots.data.join("clones")
}

/// The private clone of workspace `workspace` of sandbox `sandbox`.
pub fn clone_dir(roots: &Roots, sandbox: &str, workspace: &str) -> PathBuf {
    clones_root(roots).join(sandbox).join(workspace)
}

/// The name of the host repository's remote for the clone.
pub fn remote_name(sandbox: &str) -> String {
    format!("airlock-{sandbox}")
}

/// The file beside a clone naming the host work tree it was cloned from.
fn origin_file(clone: &Path) -> PathBuf {
    clone.with_extension("origin")
}

/// Creates the clone and the host's remote when absent; returns notes for `up`.
pub fn ensure(roots: &Roots, sandbox: &str, w: &Workspace) -> Result<Vec<String>, HostError> {
    let clone = clone_dir(roots, sandbox, &w.name);
    let remote = remote_name(sandbox);
    if clone.join(".git").is_dir() {
        return Ok(vec![]);
    }
    let parent = clone.parent().unwrap_or(&clone).to_path_buf();
    ensure_root(roots, &parent)?;
    if clone.exists() {
        // A clone interrupted half-way (no `.git` yet): start over.
        std::fs::remove_dir_all(&clone).map_err(|e| super::io_error(&clone, e))?;
    }
    git(
        &w.host_path,
        &[
            "clone",
            "--quiet",
            "--no-hardlinks",
            "--",
            &w.host_path.to_string_lossy(),
            &clone.to_string_lossy(),
        ],
    )
    .map_err(|e| clone_failed(&w.host_path, e))?;
    std::fs::write(
        origin_file(&clone),
        w.host_path.to_string_lossy().as_bytes(),
    )
    .map_err(|e| super::io_error(&origin_file(&clone), e))?;
    let url = clone.to_string_lossy().into_owned();
    if git(&w.host_path, &["remote", "get-url", &remote]).is_ok() {
        git(&w.host_path, &["remote", "set-url", &remote, &url])
    } else {
        git(&w.host_path, &["remote", "add", &remote, &url])
    }
    .map_err(|e| clone_failed(&w.host_path, e))?;
    Ok(vec![format!(
        "workspace {} is a private clone at {}; see its commits with `git fetch {remote}`",
        w.name,
        clone.display()
    )])
}

/// What happened to one clone after `down`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloneFate {
    /// Every branch was fetched: the clone and its remote were removed.
    Removed(PathBuf),
    /// Branches with commits the host has not fetched: the clone stays.
    Kept {
        /// The clone.
        clone: PathBuf,
        /// The host work tree.
        origin: PathBuf,
        /// Branch names with unfetched commits.
        branches: Vec<String>,
    },
}

impl CloneFate {
    /// One line for `down`'s or `clean`'s output.
    pub fn message(&self, sandbox: &str) -> String {
        match self {
            CloneFate::Removed(clone) => {
                format!("removed clone {} (fully fetched)", clone.display())
            }
            CloneFate::Kept {
                clone,
                origin,
                branches,
            } => format!(
                "kept clone {}: {} hold commits {} has not fetched; run `git -C {} fetch {}`, \
                 then `airlock clean`",
                clone.display(),
                branches.join(", "),
                origin.display(),
                origin.display(),
                remote_name(sandbox)
            ),
        }
    }
}

/// Removes the fully fetched clones of `sandbox` (and their remotes) and keeps the others.
pub fn after_down(roots: &Roots, sandbox: &str) -> Vec<CloneFate> {
    let dir = clones_root(roots).join(sandbox);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut fates = Vec::new();
    let mut clones: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_none() && p.is_dir())
        .collect();
    clones.sort();
    for clone in clones {
        let Ok(origin) = std::fs::read_to_string(origin_file(&clone)) else {
            continue;
        };
        let origin = PathBuf::from(origin);
        let branches = unfetched(&origin, &clone);
        if branches.is_empty() {
            let _ = git(&origin, &["remote", "remove", &remote_name(sandbox)]);
            if std::fs::remove_dir_all(&clone).is_ok() {
                let _ = std::fs::remove_file(origin_file(&clone));
                fates.push(CloneFate::Removed(clone));
            }
        } else {
            fates.push(CloneFate::Kept {
                clone,
                origin,
                branches,
            });
        }
    }
    let _ = std::fs::remove_dir(&dir);
    fates
}

/// The sandbox names that have a clones directory.
pub fn sandboxes_with_clones(roots: &Roots) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(clones_root(roots)) else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// `after_down` for every sandbox with clones that is not in `live` (`clean`).
pub fn sweep(roots: &Roots, live: &[String]) -> Vec<(String, CloneFate)> {
    let Ok(entries) = std::fs::read_dir(clones_root(roots)) else {
        return vec![];
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !live.contains(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .flat_map(|n| {
            after_down(roots, &n)
                .into_iter()
                .map(move |f| (n.clone(), f))
        })
        .collect()
}

/// Branches of `clone` whose commit the host repository at `origin` does not have. Read as a
/// remote (`ls-remote`): the host never runs git inside the clone. Any failure to read counts
/// as unfetched (keep rather than lose work).
fn unfetched(origin: &Path, clone: &Path) -> Vec<String> {
    let url = clone.to_string_lossy();
    let Ok(listing) = git(origin, &["ls-remote", "--heads", "--", &url]) else {
        return vec!["(unreadable)".to_owned()];
    };
    let mut out = Vec::new();
    for line in listing.lines() {
        let Some((sha, name)) = line.split_once('\t') else {
            continue;
        };
        let branch = name.strip_prefix("refs/heads/").unwrap_or(name);
        let known = git(origin, &["cat-file", "-e", &format!("{sha}^{{commit}}")]).is_ok();
        if !known {
            out.push(branch.to_owned());
        }
    }
    out
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn clone_failed(workspace: &Path, detail: String) -> HostError {
    HostError::new(
        ErrorKind::Failed,
        "workspace.clone",
        format!(
            "cannot make the private clone of {} (workspace_mode = \"clone\"): {detail}",
            workspace.display()
        ),
    )
    .with_hint("clone mode needs a git work tree with at least one commit")
}
