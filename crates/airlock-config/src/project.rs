//! Finding the active project (C4) and where `init` may create one.
//!
//! Rule: the project is the nearest ancestor of the (canonical) working directory that holds a
//! `.airlock/` *directory*; failing that, the root of the enclosing git work tree (the nearest
//! ancestor holding `.git`, a directory or — for linked worktrees and submodules — a file; no
//! git binary is run); failing that, there is none. Only metadata is read; nothing is created.
//! A `.airlock` that is a symbolic link marks the project too (it is never followed: reading
//! the config then fails naming the link).

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Name of the per-project directory.
pub const PROJECT_DIR: &str = ".airlock";

/// Errors of project discovery.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// The working directory cannot be resolved.
    #[error("cannot resolve the working directory {path}: {source}")]
    Canonicalize {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A path's metadata cannot be read (other than "not found").
    #[error("cannot inspect {path}: {source}")]
    Inspect {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// `init` in a directory that already has `.airlock/`.
    #[error("{root} already has {PROJECT_DIR}/")]
    AlreadyInitialized {
        /// The project root.
        root: PathBuf,
    },
    /// `init` below a directory that already owns the project.
    #[error("{cwd} is inside the project at {root}, which already has {PROJECT_DIR}/")]
    OwnedByAncestor {
        /// The working directory.
        cwd: PathBuf,
        /// The ancestor holding `.airlock/`.
        root: PathBuf,
    },
}

/// What marks a directory as the project root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProjectKind {
    /// A `.airlock/` directory.
    Airlock,
    /// The root of a git work tree, without `.airlock/`.
    Git,
}

/// The active project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Project {
    /// Canonical project root (the workspace mapped into the sandbox).
    pub root: PathBuf,
    /// How it was found.
    pub kind: ProjectKind,
    /// `<root>/.airlock/config.toml` (may not exist).
    pub config_path: PathBuf,
    /// `<root>/.airlock/provision.sh` (may not exist).
    pub provision_path: PathBuf,
}

impl Project {
    /// The project rooted at `root` (assumed canonical).
    pub fn at(root: PathBuf, kind: ProjectKind) -> Project {
        let dir = root.join(PROJECT_DIR);
        Project {
            config_path: dir.join("config.toml"),
            provision_path: dir.join("provision.sh"),
            root,
            kind,
        }
    }

    /// The workspace name: the root's last component, reduced to `[a-z0-9_-]`.
    pub fn name(&self) -> String {
        let base = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let cleaned: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let trimmed = cleaned.trim_matches('-');
        if trimmed.is_empty() {
            "workspace".to_owned()
        } else {
            trimmed.chars().take(32).collect()
        }
    }
}

fn canonical(cwd: &Path) -> Result<PathBuf, ProjectError> {
    cwd.canonicalize()
        .map_err(|source| ProjectError::Canonicalize {
            path: cwd.to_owned(),
            source,
        })
}

/// Whether `path` exists as a directory (`Some(true)`), as something else (`Some(false)`).
fn probe(path: &Path) -> Result<Option<bool>, ProjectError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m.is_dir())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(None),
        Err(source) => Err(ProjectError::Inspect {
            path: path.to_owned(),
            source,
        }),
    }
}

/// `.airlock/` as a directory, or as a symbolic link: a link is never followed (C7), but it
/// still marks the project, so reading its config fails with an error naming the link instead
/// of discovery silently falling back to an enclosing git work tree.
fn has_airlock_dir(dir: &Path) -> Result<bool, ProjectError> {
    let path = dir.join(PROJECT_DIR);
    match std::fs::symlink_metadata(&path) {
        Ok(m) => Ok(m.is_dir() || m.file_type().is_symlink()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(false),
        Err(source) => Err(ProjectError::Inspect { path, source }),
    }
}

fn has_git(dir: &Path) -> Result<bool, ProjectError> {
    Ok(probe(&dir.join(".git"))?.is_some())
}

fn nearest(
    start: &Path,
    test: fn(&Path) -> Result<bool, ProjectError>,
) -> Result<Option<PathBuf>, ProjectError> {
    for dir in start.ancestors() {
        if test(dir)? {
            return Ok(Some(dir.to_owned()));
        }
    }
    Ok(None)
}

/// The active project for working directory `cwd` (C4).
pub fn discover(cwd: &Path) -> Result<Option<Project>, ProjectError> {
    Ok(discover_with_dir(cwd)?.0)
}

/// [`discover`], with the canonical `cwd` it searched from: a caller that needs that directory
/// too resolves it once (the same answer, not a second walk of the path's links).
pub fn discover_with_dir(cwd: &Path) -> Result<(Option<Project>, PathBuf), ProjectError> {
    let cwd = canonical(cwd)?;
    if let Some(root) = nearest(&cwd, has_airlock_dir)? {
        return Ok((Some(Project::at(root, ProjectKind::Airlock)), cwd));
    }
    let found = nearest(&cwd, has_git)?.map(|root| Project::at(root, ProjectKind::Git));
    Ok((found, cwd))
}

/// The project rooted exactly at `root`, a root a sandbox was already built for (e.g. the
/// egress proxy reloading the policy of a running sandbox). Never an ancestor: if the sandbox
/// deleted `.airlock/` and `.git`, the result is still `root`, now without a project config
/// (C7), instead of whatever project encloses it.
pub fn at_root(root: &Path) -> Result<Project, ProjectError> {
    let root = canonical(root)?;
    let kind = if has_airlock_dir(&root)? {
        ProjectKind::Airlock
    } else {
        ProjectKind::Git
    };
    Ok(Project::at(root, kind))
}

/// Where `airlock init` run in `cwd` creates `.airlock/`: the enclosing git work tree root,
/// else `cwd` itself. Refuses when `cwd` or any ancestor already holds `.airlock/`.
pub fn init_root(cwd: &Path) -> Result<PathBuf, ProjectError> {
    let cwd = canonical(cwd)?;
    if let Some(root) = nearest(&cwd, has_airlock_dir)? {
        return Err(if root == cwd {
            ProjectError::AlreadyInitialized { root }
        } else {
            ProjectError::OwnedByAncestor { cwd, root }
        });
    }
    Ok(nearest(&cwd, has_git)?.unwrap_or(cwd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        (t, root)
    }

    #[test]
    fn nearest_airlock_dir_wins_over_git_root() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("repo/.git")).unwrap();
        fs::create_dir_all(root.join("repo/sub/.airlock")).unwrap();
        fs::create_dir_all(root.join("repo/sub/deep")).unwrap();
        let p = discover(&root.join("repo/sub/deep")).unwrap().unwrap();
        assert_eq!(p.root, root.join("repo/sub"));
        assert_eq!(p.kind, ProjectKind::Airlock);
        assert_eq!(p.config_path, root.join("repo/sub/.airlock/config.toml"));
        assert_eq!(
            p.provision_path,
            root.join("repo/sub/.airlock/provision.sh")
        );
    }

    #[test]
    fn airlock_dir_above_the_git_root_still_owns_the_project() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join(".airlock")).unwrap();
        fs::create_dir_all(root.join("repo/.git")).unwrap();
        let p = discover(&root.join("repo")).unwrap().unwrap();
        assert_eq!(p.root, root);
    }

    #[test]
    fn git_work_tree_root_is_the_fallback_and_a_git_file_counts() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("wt/src")).unwrap();
        fs::write(root.join("wt/.git"), "gitdir: /elsewhere\n").unwrap();
        let p = discover(&root.join("wt/src")).unwrap().unwrap();
        assert_eq!(p.root, root.join("wt"));
        assert_eq!(p.kind, ProjectKind::Git);
    }

    #[test]
    fn a_file_named_airlock_is_not_a_project_marker() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("a")).unwrap();
        fs::write(root.join("a/.airlock"), "").unwrap();
        assert_eq!(discover(&root.join("a")).unwrap(), None);
    }

    #[test]
    fn no_marker_means_no_project() {
        let (_t, root) = tree();
        assert_eq!(discover(&root).unwrap(), None);
    }

    #[test]
    fn discovery_resolves_symlinked_working_directories() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("real/.airlock")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let p = discover(&root.join("link")).unwrap().unwrap();
        assert_eq!(p.root, root.join("real"));
    }

    #[test]
    fn discovery_returns_the_canonical_directory_it_searched_from() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("real/.git")).unwrap();
        fs::create_dir_all(root.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let (p, dir) = discover_with_dir(&root.join("link/sub")).unwrap();
        assert_eq!(p.unwrap().root, root.join("real"));
        assert_eq!(dir, root.join("real/sub"));
        let (none, dir) = discover_with_dir(&root).unwrap();
        assert_eq!((none, dir), (None, root.clone()));
    }

    #[test]
    fn init_refuses_where_airlock_exists_or_an_ancestor_owns_the_project() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("p/.airlock")).unwrap();
        fs::create_dir_all(root.join("p/sub")).unwrap();
        assert!(matches!(
            init_root(&root.join("p")),
            Err(ProjectError::AlreadyInitialized { .. })
        ));
        match init_root(&root.join("p/sub")) {
            Err(ProjectError::OwnedByAncestor { root: owner, .. }) => {
                assert_eq!(owner, root.join("p"))
            }
            other => panic!("expected OwnedByAncestor, got {other:?}"),
        }
    }

    #[test]
    fn init_targets_the_git_root_else_the_working_directory() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("repo/.git")).unwrap();
        fs::create_dir_all(root.join("repo/sub")).unwrap();
        fs::create_dir_all(root.join("plain")).unwrap();
        assert_eq!(
            init_root(&root.join("repo/sub")).unwrap(),
            root.join("repo")
        );
        assert_eq!(init_root(&root.join("plain")).unwrap(), root.join("plain"));
    }

    #[test]
    fn a_known_root_without_markers_stays_the_project_and_never_becomes_its_parent() {
        let (_t, root) = tree();
        fs::create_dir_all(root.join("parent/.airlock")).unwrap();
        fs::create_dir_all(root.join("parent/proj")).unwrap();
        let proj = root.join("parent/proj");
        assert_eq!(discover(&proj).unwrap().unwrap().root, root.join("parent"));
        let p = at_root(&proj).unwrap();
        assert_eq!(p.root, proj);
        assert_eq!(p.config_path, proj.join(".airlock/config.toml"));
    }

    #[test]
    fn workspace_names_are_reduced_to_a_safe_charset() {
        let p = Project::at(PathBuf::from("/x/My Project!"), ProjectKind::Git);
        assert_eq!(p.name(), "my-project");
    }
}
