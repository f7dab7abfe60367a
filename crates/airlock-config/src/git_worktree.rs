//! Linked git worktrees as workspaces (A5), with the workspace's `.git` file as hostile input
//! (C7).
//!
//! A linked worktree (`git worktree add`) has a `.git` *file* holding `gitdir: <path>`, the
//! worktree's private git directory `<common>/worktrees/<id>`, whose `commondir` names the main
//! repository's git directory (objects, refs, config). Inside the sandbox git needs that common
//! directory, so it must be mapped in. But the `.git` file lies in the workspace: a cloned
//! repository or the sandbox itself wrote it, and could make it name any directory on the host.
//!
//! [`linked_worktree`] therefore maps the common directory only when all of these hold:
//! 1. `.git` is read beneath the workspace without following links, as a regular file of at
//!    most [`GITFILE_CAP`] bytes, and its first line is `gitdir: <path>`;
//! 2. the named worktree directory and the common directory are absolute, normalized, existing
//!    directories without a symbolic link in any component (the C3 path rules);
//! 3. git's own back-pointer confirms the link: `<gitdir>/gitdir` (written by git on the host)
//!    names this workspace's `.git` file, and `<gitdir>` is `<common>/worktrees/<id>`;
//! 4. the common directory is no sensitive path (`/`, the home, credential or airlock roots) and
//!    does not contain the workspace (which would map more than the repository).
//!
//! A common directory inside the workspace needs no mapping (it is already in). Forged links
//! fail at step 3: the back-pointer lives outside the workspace, where the sandbox cannot write
//! (the common directory does not overlap the workspace, step 4).

use std::path::{Component, Path, PathBuf};

use crate::beneath::{self, BeneathError};
use crate::mounts;
use crate::roots::Roots;

/// Most bytes read from a `.git` file, `gitdir` or `commondir`.
pub const GITFILE_CAP: u64 = 4096;

/// The main repository's git directory a linked worktree needs mapped in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LinkedGitDir {
    /// The worktree's own git directory (`<common>/worktrees/<id>`).
    pub worktree_git_dir: PathBuf,
    /// The main repository's git directory, mapped read-write at the same path.
    pub common_dir: PathBuf,
}

/// Why a workspace's `.git` file is not honoured.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// `.git` (or a file it leads to) could not be read safely.
    #[error(transparent)]
    Read(#[from] BeneathError),
    /// The file is not in git's `gitdir: <path>` form.
    #[error("{path}: not a git link file (`gitdir: <path>` expected)")]
    Malformed {
        /// The file.
        path: PathBuf,
    },
    /// A directory it names breaks the path rules.
    #[error("{path}: {reason}")]
    BadPath {
        /// The `.git` file or git's back-pointer.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Git's back-pointer does not name this workspace.
    #[error(
        "{gitdir} does not point back to {dot_git} (it names {names}); the `.git` file may be \
         forged or stale: run `git worktree repair` in the main repository"
    )]
    NotConfirmed {
        /// The `.git` file.
        dot_git: PathBuf,
        /// The back-pointer file.
        gitdir: PathBuf,
        /// What it names.
        names: String,
    },
}

/// The common git directory to map for `workspace`, or `None` when the workspace is not a
/// linked worktree (no `.git`, a `.git` directory) or its common directory is already inside.
pub fn linked_worktree(
    workspace: &Path,
    roots: &Roots,
) -> Result<Option<LinkedGitDir>, WorktreeError> {
    let dot_git = workspace.join(".git");
    let text = match beneath::read_beneath(workspace, Path::new(".git"), GITFILE_CAP) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(BeneathError::NotRegular {
            kind: "a directory",
            ..
        }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let named = gitdir_line(&text).ok_or_else(|| WorktreeError::Malformed {
        path: dot_git.clone(),
    })?;
    let worktree_git_dir = resolve(workspace, &named);
    real_dir(&dot_git, &worktree_git_dir)?;

    // Git's back-pointer: `<gitdir>/gitdir` names the `.git` file of the worktree.
    let back = read_line(&worktree_git_dir, "gitdir")?;
    let back_path = resolve(&worktree_git_dir, &back);
    if back_path != dot_git {
        return Err(WorktreeError::NotConfirmed {
            dot_git,
            gitdir: worktree_git_dir.join("gitdir"),
            names: back,
        });
    }
    let common = read_line(&worktree_git_dir, "commondir")?;
    let common_dir = resolve(&worktree_git_dir, &common);
    let commondir_file = worktree_git_dir.join("commondir");
    real_dir(&commondir_file, &common_dir)?;
    if worktree_git_dir.parent() != Some(&common_dir.join("worktrees")) {
        return Err(WorktreeError::BadPath {
            path: commondir_file,
            reason: format!(
                "{} is not a worktree of {} (expected {}/worktrees/<id>)",
                worktree_git_dir.display(),
                common_dir.display(),
                common_dir.display()
            ),
        });
    }
    if common_dir.starts_with(workspace) {
        return Ok(None);
    }
    if workspace.starts_with(&common_dir) {
        return Err(WorktreeError::BadPath {
            path: commondir_file,
            reason: format!(
                "the repository's git directory {} contains the workspace",
                common_dir.display()
            ),
        });
    }
    if let Some(reason) = mounts::sensitive_reason(&common_dir, roots) {
        return Err(WorktreeError::BadPath {
            path: dot_git,
            reason,
        });
    }
    Ok(Some(LinkedGitDir {
        worktree_git_dir,
        common_dir,
    }))
}

/// The path of a `gitdir: <path>` first line.
fn gitdir_line(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let line = text.lines().next()?;
    let path = line.strip_prefix("gitdir:")?.trim();
    (!path.is_empty() && !path.contains('\0')).then(|| path.to_owned())
}

/// The first line of `dir/name`, read beneath `dir` without links.
fn read_line(dir: &Path, name: &str) -> Result<String, WorktreeError> {
    let path = dir.join(name);
    let bytes = beneath::read_beneath(dir, Path::new(name), GITFILE_CAP)?.ok_or_else(|| {
        WorktreeError::BadPath {
            path: path.clone(),
            reason: "missing; the worktree is not registered with its repository (run \
                     `git worktree repair` in the main repository)"
                .to_owned(),
        }
    })?;
    let text =
        String::from_utf8(bytes).map_err(|_| WorktreeError::Malformed { path: path.clone() })?;
    let line = text.lines().next().unwrap_or("").trim().to_owned();
    if line.is_empty() || line.contains('\0') {
        return Err(WorktreeError::Malformed { path });
    }
    Ok(line)
}

/// `named` made absolute against `base` and normalized lexically (git writes relative paths
/// only with `worktree.useRelativePaths`; the result is checked for links afterwards).
fn resolve(base: &Path, named: &str) -> PathBuf {
    let joined = base.join(named);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn real_dir(named_by: &Path, dir: &Path) -> Result<(), WorktreeError> {
    mounts::check_real_directory(dir).map_err(|reason| WorktreeError::BadPath {
        path: named_by.to_owned(),
        reason,
    })
}
