//! Finding the active project (PRODUCT C4) from a working directory, through
//! `airlock_config::project`.

use std::path::Path;

use airlock_config::project::{self, Project, ProjectError};
use airlock_config::Roots;
use airlock_core::KnownRoots;

use crate::error::{ErrorKind, HostError};
use crate::paths::ensure_root;

/// The active project, if any. Refuses when the project found is an ancestor of a project
/// root airlock has used that contains the working directory (C7): its markers were deleted,
/// and mapping the ancestor would widen the workspace.
pub fn discover_project(cwd: &Path) -> Result<Option<Project>, HostError> {
    // `dir` is the canonical working directory the project was found from.
    let (Some(found), dir) = project::discover_with_dir(cwd)? else {
        return Ok(None);
    };
    let roots = Roots::from_env(|k| std::env::var_os(k))?;
    match KnownRoots::open(&roots.state)?.widened_from(&found.root, &dir)? {
        None => Ok(Some(found)),
        Some(remembered) => Err(widened(&dir, &remembered, &found.root, &roots.state)),
    }
}

/// Remembers the project root a sandbox is built for (after validation, before the sandbox).
pub fn remember_project(roots: &Roots, project: &Project) -> Result<(), HostError> {
    ensure_root(roots, &roots.state)?;
    KnownRoots::open(&roots.state)?.remember(&project.root)?;
    Ok(())
}

fn widened(dir: &Path, remembered: &Path, found: &Path, state: &Path) -> HostError {
    HostError::new(
        ErrorKind::Config,
        "project.widened",
        format!(
            "{} is inside {}, a project airlock has used, which no longer has a .airlock/ or \
             .git marker; the project found instead is {}, which contains it, so it is not \
             mapped into a sandbox",
            dir.display(),
            remembered.display(),
            found.display()
        ),
    )
    .with_hint(format!(
        "run `airlock init` in {} to keep it the project; to use {} instead, run airlock from \
         there or forget the old root by removing it from {}",
        remembered.display(),
        found.display(),
        state
            .join(airlock_core::known_roots::KNOWN_ROOTS_RECORD)
            .display()
    ))
}

/// The active project; an error pointing at `airlock init` when there is none.
pub fn active_project(cwd: &Path) -> Result<Project, HostError> {
    discover_project(cwd)?.ok_or_else(|| no_project(cwd))
}

/// The error for a working directory outside every project.
pub fn no_project(cwd: &Path) -> HostError {
    HostError::new(
        ErrorKind::Config,
        "project.none",
        format!(
            "{} is not inside a project (no .airlock/ directory and no git work tree above it)",
            cwd.display()
        ),
    )
    .with_hint("run `airlock init` at the project root")
}

impl From<ProjectError> for HostError {
    fn from(e: ProjectError) -> Self {
        let (kind, code, hint) = match &e {
            ProjectError::AlreadyInitialized { .. } | ProjectError::OwnedByAncestor { .. } => (
                ErrorKind::Config,
                "init.exists",
                "edit the existing .airlock/config.toml instead, then run `airlock plan`",
            ),
            ProjectError::Canonicalize { .. } | ProjectError::Inspect { .. } => (
                ErrorKind::Internal,
                "project.io",
                "check that the working directory exists and is readable",
            ),
        };
        HostError::new(kind, code, e.to_string()).with_hint(hint)
    }
}
