//! `airlock init [--agent A] [--image I]`: creates `.airlock/config.toml` (PRODUCT §2, C4).
//!
//! The project root is the enclosing git work tree's root, else the working directory. `init`
//! refuses — changing nothing — when the directory tree already has a project: `.airlock/` in
//! the working directory or any ancestor (an ancestor owns the project); and when the root
//! could never be a workspace (`/`, the home directory, a credential or airlock root). The directory is
//! created with `mkdir` (fails if it appeared meanwhile) and the file with `O_EXCL`, so nothing
//! existing is ever overwritten.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use clap::builder::PossibleValuesParser;
use clap::Args;

use airlock_config::project::{init_root, Project, ProjectKind, PROJECT_DIR};

use airlock_config::Roots;
use airlock_core::{KnownRoots, TrustStore};

use super::Report;
use crate::context::Context;
use crate::error::{ErrorKind, HostError};
use crate::output::{path_text, Doc, Style};
use airlock_host::create_new::create_new;
use airlock_host::paths::ensure_root;

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Agent from the built-in catalogue that the default session runs
    #[arg(long, value_name = "AGENT", value_parser = PossibleValuesParser::new(airlock_config::agents::names()))]
    pub agent: Option<String>,
    /// Root filesystem: `host` (the default) or an imported image's name (`airlock image ls`)
    #[arg(long, value_name = "IMAGE", value_parser = project_image)]
    pub image: Option<String>,
}

/// An image a project config may name (directory images are user config only).
fn project_image(v: &str) -> Result<String, String> {
    airlock_config::values::image(v, false, None).map(|_| v.to_owned())
}

pub fn run(args: InitArgs, ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let root = init_root(&ctx.cwd)?;
    // Inside a remembered project root whose markers are gone, `init` restores that root
    // rather than create the project at an enclosing git work tree (C7).
    let dir = ctx.cwd.canonicalize().unwrap_or_else(|_| ctx.cwd.clone());
    let root = KnownRoots::open(&roots.state)?
        .widened_from(&root, &dir)?
        .unwrap_or(root);
    // The project root becomes the workspace mapped read-write into the sandbox: refuse `/`,
    // the home directory and credential roots here rather than leave a project `plan` rejects.
    if let Some(reason) = airlock_config::mounts::sensitive_reason(&root, &roots) {
        return Err(HostError::new(
            ErrorKind::Config,
            "init.unsafe_root",
            format!("{} cannot be a project: {reason}", root.display()),
        )
        .with_hint("run `airlock init` in the project's own directory (e.g. a git work tree)"));
    }
    let template =
        airlock_config::templates::project_template(args.agent.as_deref(), args.image.as_deref());
    let dir = root.join(PROJECT_DIR);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => already_owned(&root),
            _ => HostError::internal("io.write", format!("cannot create {}: {e}", dir.display()))
                .with_hint("check the permissions of the project directory"),
        })?;
    let project = Project::at(root.clone(), ProjectKind::Airlock);
    let config = project.config_path.clone();
    create_new(&config, template.as_bytes(), 0o644)?;
    let script = airlock_config::templates::provision_template();
    create_new(&project.provision_path, script.as_bytes(), 0o644)?;
    // `init --agent A` is the user's own act: trust exactly the bytes written (C6), so the
    // agent's API hosts apply at once. A repository that arrives with `agent =` stays untrusted.
    let trusted = args
        .agent
        .as_ref()
        .map(|_| trust_written(&roots, &root, template.as_bytes()));

    let mut doc = Doc::new();
    doc.heading("Initialised")
        .field(1, "project", &path_text(&root))
        .field(1, "config", &path_text(&config));
    if let Some(Ok(())) = &trusted {
        doc.field(
            1,
            "trusted",
            "yes: written by you, so the agent's API hosts apply",
        );
    }
    doc.field(1, "provision script", &path_text(&project.provision_path));
    let tools = airlock_config::toolchain::found_on_host(&roots.home);
    if !tools.is_empty() {
        let entries: Vec<String> = tools
            .iter()
            .map(|t| format!("[[tool]] name = \"{t}\""))
            .collect();
        doc.field(
            1,
            "toolchains found",
            &format!(
                "{} — to map them in, add {} to your user config (`airlock config`)",
                tools.join(", "),
                entries.join(", ")
            ),
        );
    }
    doc.text(
        1,
        &[(Style::Dim, "next: review them, then run `airlock plan`")],
    );
    let json = serde_json::json!({
        "project": root,
        "config": config,
        "agent": args.agent,
        "image": args.image,
        "trusted": matches!(trusted, Some(Ok(()))),
        "provision_script": project.provision_path,
        "toolchains_found": tools,
    });
    let mut report = Report::new(doc, json);
    if let Some(Err(e)) = trusted {
        report.note(format!(
            "warning: cannot record trust for the new config ({e}); run `airlock trust` so \
             the agent's API hosts apply"
        ));
    }
    Ok(report)
}

/// Records trust for the config `init` just wrote (keyed by the hash of those bytes).
fn trust_written(roots: &Roots, root: &Path, bytes: &[u8]) -> Result<(), HostError> {
    ensure_root(roots, &roots.state)?;
    TrustStore::open(&roots.state)?.trust(root, &airlock_config::config_hash(bytes))?;
    Ok(())
}

/// `.airlock/` appeared between the check and `mkdir` (another `init` raced this one).
fn already_owned(root: &Path) -> HostError {
    let config = Project::at(root.to_owned(), ProjectKind::Airlock).config_path;
    HostError::new(
        ErrorKind::Config,
        "init.exists",
        format!(
            "{} already holds an airlock project ({}); init changes nothing",
            root.display(),
            config.display()
        ),
    )
    .with_hint(format!(
        "edit {} instead, then run `airlock plan`",
        config.display()
    ))
}
