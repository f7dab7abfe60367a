//! Protected paths (issue 9.9): paths inside every workspace that sandbox processes may not
//! change, rename or remove, because the host later executes or trusts them.
//!
//! The defaults are [`DEFAULTS`]. The user config may add paths (`protect = [...]`) and lift
//! protected paths for one project (`[[unprotect]]`); both keys are user config only, so a
//! repository can never lift its own protection (C6). `.airlock` cannot be lifted at all: the
//! host reads it as the project's configuration.
//!
//! Validation is strict and reports every problem: a path is relative, `/`-separated, without
//! empty, `.` or `..` components, without NUL or `\`, at most [`MAX_PATH_LEN`] bytes; `*` is
//! allowed only as a whole component; no duplicates, no re-adding a default; at most
//! [`MAX_PROTECT`] additions; an `[[unprotect]]` names an absolute project path and only paths
//! that are protected.

use std::collections::HashSet;
use std::path::Path;

use serde::Serialize;

use crate::diagnostics::Diagnostic;
use crate::effective::Origin;
use crate::parse::ParsedFile;

/// Most paths `protect` may add.
pub const MAX_PROTECT: usize = 32;
/// Longest accepted path.
pub const MAX_PATH_LEN: usize = 256;
/// The path that can never be lifted.
pub const NEVER_LIFTED: &str = ".airlock";

/// What happens when a protected path is missing but its parent directory exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IfMissing {
    /// Stays missing; the sandbox may create it.
    Skip,
    /// An empty directory is created (owned by the invoker) and protected.
    Dir,
    /// An empty file is created (owned by the invoker) and protected.
    File,
}

/// One default protected path and why.
#[derive(Debug, Clone, Copy)]
pub struct DefaultPath {
    pub path: &'static str,
    pub if_missing: IfMissing,
    /// Only when it is not a directory.
    pub files_only: bool,
    pub reason: &'static str,
}

const fn d(path: &'static str, if_missing: IfMissing, reason: &'static str) -> DefaultPath {
    DefaultPath {
        path,
        if_missing,
        files_only: false,
        reason,
    }
}

/// The built-in protected paths.
pub const DEFAULTS: &[DefaultPath] = &[
    d(".airlock", IfMissing::Skip, "the project's airlock configuration, read by the host (a new one arrives untrusted)"),
    DefaultPath { path: ".git", if_missing: IfMissing::Skip, files_only: true, reason: "a `gitdir:` file (linked worktree, submodule) could point host git at a directory the sandbox wrote" },
    d(".git/hooks", IfMissing::Dir, "host git runs these scripts"),
    d(".git/config", IfMissing::File, "core.hooksPath, core.fsmonitor, filters and aliases make host git run programs"),
    d(".git/config.worktree", IfMissing::Skip, "per-worktree config (read only when .git/config enables it)"),
    d(".git/modules/*/hooks", IfMissing::Dir, "hooks of submodules"),
    d(".git/modules/*/config", IfMissing::File, "config of submodules"),
];

/// One protected path of the effective configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtectedPath {
    /// Relative to each workspace root.
    pub path: String,
    /// `default` or `user`.
    pub origin: Origin,
    /// Lifted for this project by `[[unprotect]]`: not protected.
    pub lifted: bool,
    pub if_missing: IfMissing,
    pub files_only: bool,
}

/// Checks one path; `Err` says what is wrong.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the path is empty".into());
    }
    if path.len() > MAX_PATH_LEN {
        return Err(format!("the path is longer than {MAX_PATH_LEN} bytes"));
    }
    if path.contains(['\0', '\\']) || path.chars().any(char::is_control) {
        return Err("the path contains NUL, `\\` or a control character".into());
    }
    if path.starts_with('/') {
        return Err("use a path relative to the workspace root, e.g. \".envrc\"".into());
    }
    for c in path.split('/') {
        match c {
            "" => return Err("the path has an empty component (`//` or a trailing `/`)".into()),
            "." | ".." => return Err(format!("the path has a `{c}` component")),
            c if c.contains('*') && c != "*" => {
                return Err(
                    "`*` is allowed only as a whole component, e.g. \"packages/*/.envrc\"".into(),
                )
            }
            _ => {}
        }
    }
    Ok(())
}

/// The protected paths for `project` (None: no project) from the user config.
pub(crate) fn resolve(
    user: Option<&ParsedFile>,
    project: Option<&Path>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<ProtectedPath> {
    let mut out: Vec<ProtectedPath> = DEFAULTS
        .iter()
        .map(|d| ProtectedPath {
            path: d.path.to_owned(),
            origin: Origin::Default,
            lifted: false,
            if_missing: d.if_missing,
            files_only: d.files_only,
        })
        .collect();
    let Some(file) = user else {
        return out;
    };
    let added = file.raw.protect.as_deref().unwrap_or_default();
    if added.len() > MAX_PROTECT {
        diags.push(file.diag(
            &format!("protect[{MAX_PROTECT}]"),
            format!(
                "at most {MAX_PROTECT} paths may be added, found {}",
                added.len()
            ),
        ));
    }
    let mut seen: HashSet<&str> = DEFAULTS.iter().map(|d| d.path).collect();
    for (i, path) in added.iter().enumerate().take(MAX_PROTECT) {
        let key = format!("protect[{i}]");
        if let Err(why) = check_path(path) {
            diags.push(file.diag(&key, format!("invalid protected path {path:?}: {why}")));
        } else if !seen.insert(path) {
            diags.push(file.diag(&key, format!("{path:?} is already protected")));
        } else {
            out.push(ProtectedPath {
                path: path.clone(),
                origin: Origin::User,
                lifted: false,
                if_missing: IfMissing::Skip,
                files_only: false,
            });
        }
    }
    lift(file, project, &mut out, diags);
    out
}

/// Applies the `[[unprotect]]` entries naming `project`; validates every entry.
fn lift(
    file: &ParsedFile,
    project: Option<&Path>,
    out: &mut [ProtectedPath],
    diags: &mut Vec<Diagnostic>,
) {
    for (i, entry) in file.raw.unprotect.iter().enumerate() {
        let root = Path::new(&entry.project);
        if !root.is_absolute() || entry.project.split('/').any(|c| c == ".." || c == ".") {
            diags.push(file.diag(
                &format!("unprotect[{i}].project"),
                format!(
                    "{:?} is not an absolute, normalized project path",
                    entry.project
                ),
            ));
            continue;
        }
        let applies = project == Some(root);
        for (j, path) in entry.paths.iter().enumerate() {
            let key = format!("unprotect[{i}].paths[{j}]");
            if path == NEVER_LIFTED {
                diags.push(file.diag(&key, format!("{NEVER_LIFTED} cannot be lifted: the host reads it as the project's configuration")));
                continue;
            }
            match out.iter_mut().find(|p| p.path == *path) {
                Some(p) => p.lifted |= applies,
                None => diags.push(file.diag(
                    &key,
                    format!("{path:?} is not a protected path; `airlock plan` lists them"),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_validated_strictly() {
        for ok in [".envrc", ".github/workflows", "packages/*/.envrc", "a b/c"] {
            assert_eq!(check_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "a//b",
            "a/",
            "./a",
            "a/../b",
            "..",
            "a*",
            "a/b*c",
            "a\\b",
            "a\0b",
            "a\u{1b}[2J",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_path(&"a".repeat(MAX_PATH_LEN + 1)).is_err());
    }

    #[test]
    fn defaults_are_valid_and_airlock_git_hooks_and_config_are_among_them() {
        for d in DEFAULTS {
            assert_eq!(check_path(d.path), Ok(()), "{}", d.path);
            assert!(d.reason.len() > 10);
        }
        for must in [
            ".airlock",
            ".git/hooks",
            ".git/config",
            ".git/config.worktree",
            ".git/modules/*/config",
            ".git/modules/*/hooks",
        ] {
            assert!(DEFAULTS.iter().any(|d| d.path == must), "{must}");
        }
    }
}
