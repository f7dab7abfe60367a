//! Finding the active project (PRODUCT C4) for the verbs, through `airlock_config::project`.

use airlock_config::project::{self, Project, ProjectError};

use crate::context::Context;
use crate::error::{CommandError, ErrorKind};

/// The active project, if any.
pub fn discover_project(ctx: &Context) -> Result<Option<Project>, CommandError> {
    Ok(project::discover(&ctx.cwd)?)
}

/// The active project; an error pointing at `airlock init` when there is none.
pub fn active_project(ctx: &Context) -> Result<Project, CommandError> {
    discover_project(ctx)?.ok_or_else(|| no_project(ctx))
}

/// The error for a working directory outside every project.
pub fn no_project(ctx: &Context) -> CommandError {
    CommandError::new(
        ErrorKind::Config,
        "project.none",
        format!(
            "{} is not inside a project (no .airlock/ directory and no git work tree above it)",
            ctx.cwd.display()
        ),
    )
    .with_hint("run `airlock init` at the project root")
}

impl From<ProjectError> for CommandError {
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
        CommandError::new(kind, code, e.to_string()).with_hint(hint)
    }
}
