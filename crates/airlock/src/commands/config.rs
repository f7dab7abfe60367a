//! `airlock config`: the user config file (PRODUCT §2, C1, C2).
//!
//! Order of operations:
//! 1. Resolve the roots (pure) and create the config root as a private 0700 directory.
//! 2. Create `config.toml` from the template when absent — with `O_EXCL`, so an existing file
//!    is never rewritten, not even truncated, whatever its content.
//! 3. Refresh the app-owned `config.schema.json` beside it (atomic replace, so an editor never
//!    reads half a schema).
//! 4. On a terminal (stdin and stdout) without `--json`, open the file in `$VISUAL`, else
//!    `$EDITOR`, then validate what the user saved; otherwise print the path.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use airlock_config::env_vars;
use clap::Args;
use signal_hook::consts::{SIGINT, SIGQUIT};

use super::Report;
use crate::context::Context;
use crate::error::{ErrorKind, HostError};
use crate::output::{path_text, Doc};
use airlock_host::create_new::{create_new, CreateNewError};
use airlock_host::paths::ensure_root;

#[derive(Args, Debug)]
pub struct ConfigArgs {}

pub fn run(_args: ConfigArgs, ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let path = roots.user_config_path();
    let schema_path = roots.schema_path();
    ensure_root(&roots, &roots.config)?;
    let created = match create_new(
        &path,
        airlock_config::templates::user_template().as_bytes(),
        0o600,
    ) {
        Ok(()) => true,
        Err(CreateNewError::Exists { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    let schema = airlock_config::schema::json_schema_text();
    airlock_core::write_atomic(&schema_path, schema.as_bytes(), 0o644)?;

    let mut report = Report::new(path_doc(&path), serde_json::Value::Null);
    if created {
        report.note(format!("created {} from the template", path.display()));
    }
    report.note(format!("refreshed {}", schema_path.display()));
    let opened = match editor(ctx) {
        Some(editor) => {
            open_in_editor(&editor, &path)?;
            if let Err(e) = airlock_host::config::validate_user_config(&roots) {
                report = report.with_failure(e);
            }
            true
        }
        None => false,
    };
    report.json = serde_json::json!({
        "path": path,
        "created": created,
        "schema": schema_path,
        "opened": opened,
    });
    Ok(report)
}

/// The path alone on stdout, so `"$EDITOR" "$(airlock config)"` works in scripts.
fn path_doc(path: &Path) -> Doc {
    let mut doc = Doc::new();
    doc.text(0, &[(crate::output::Style::Plain, &path_text(path))]);
    doc
}

/// The editor to open, when this is an interactive human invocation and one is configured.
fn editor(ctx: &Context) -> Option<String> {
    if ctx.json || !ctx.stdin_is_terminal || !ctx.stdout_is_terminal {
        return None;
    }
    [env_vars::VISUAL, env_vars::EDITOR]
        .into_iter()
        .filter_map(|k| ctx.var(k))
        .filter_map(|v| v.into_string().ok())
        .find(|v| !v.trim().is_empty())
}

/// Runs the editor the way git does: through `sh -c`, so `EDITOR="code --wait"` works.
///
/// While the editor owns the terminal, Ctrl+C and Ctrl+\ belong to it: they reach the whole
/// foreground process group, so airlock catches them (handlers are reset to the default in the
/// editor by `execve`) instead of dying and handing the terminal back to the shell under a
/// running editor. git does the same.
fn open_in_editor(editor: &str, path: &Path) -> Result<(), HostError> {
    let caught = Arc::new(AtomicBool::new(false));
    let handlers: Vec<_> = [SIGINT, SIGQUIT]
        .into_iter()
        .filter_map(|sig| signal_hook::flag::register(sig, Arc::clone(&caught)).ok())
        .collect();
    let status = spawn_editor(editor, path);
    for id in handlers {
        signal_hook::low_level::unregister(id);
    }
    status
}

fn spawn_editor(editor: &str, path: &Path) -> Result<(), HostError> {
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$@\""))
        .arg(editor)
        .arg(path)
        .status()
        .map_err(|e| {
            HostError::new(
                ErrorKind::Failed,
                "editor.spawn",
                format!("cannot start the editor {editor:?}: {e}"),
            )
            .with_hint("set $VISUAL or $EDITOR to an installed editor")
        })?;
    if status.success() {
        return Ok(());
    }
    Err(HostError::new(
        ErrorKind::Failed,
        "editor.failed",
        format!("the editor {editor:?} exited with {status}"),
    )
    .with_hint(format!("edit {} directly", path.display())))
}
