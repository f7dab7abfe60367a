//! Host toolchains, environment and the package cache (P2, P4): `[[tool]]`, `[env]` and
//! `[cache]`, all user config only (the parser refuses them in a project config, C6).
//!
//! Order of checks: `[env]` names (charset, then airlock's own variables), values (no NUL),
//! `path_prepend` entries (absolute, normalized, no `:`) → each `[[tool]]` name against the
//! catalogue, duplicates, then every directory the tool maps: a real directory (no symbolic
//! link component), not sensitive (credential or airlock roots, C3), no overlap with the
//! workspace or a `[[mount]]`.
//!
//! A tool maps only directories that hold no credentials: `rust` maps `~/.rustup` and
//! `~/.cargo/bin`, never `~/.cargo` itself (which holds `credentials.toml`); cargo's writable
//! home (`CARGO_HOME`, with the registry) is a directory in the package cache instead.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::diagnostics::Diagnostic;
use crate::effective::{Mount, Origin, Sourced};
use crate::env_vars;
use crate::mounts::{check_real_directory, overlaps, sensitive_reason};
use crate::parse::ParsedFile;
use crate::roots::Roots;

/// `[env]`: variables for every sandbox process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostEnv {
    /// `NAME = value`, in name order.
    pub vars: Vec<(String, String)>,
    /// Directories put in front of `PATH`, in order.
    pub path_prepend: Vec<PathBuf>,
}

/// One catalogue toolchain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSpec {
    /// Name in `[[tool]] name = ...`.
    pub name: &'static str,
    /// Home-relative directories mapped read-only at their host path.
    pub dirs: &'static [&'static str],
    /// Variables set to a home-relative path.
    pub env: &'static [(&'static str, &'static str)],
    /// Home-relative directories put in front of `PATH`.
    pub path: &'static [&'static str],
}

/// The toolchains `[[tool]]` may name.
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "rust",
        dirs: &[".rustup", ".cargo/bin"],
        env: &[(env_vars::RUSTUP_HOME, ".rustup")],
        path: &[".cargo/bin"],
    },
    ToolSpec {
        name: "pyenv",
        dirs: &[".pyenv"],
        env: &[(env_vars::PYENV_ROOT, ".pyenv")],
        path: &[".pyenv/shims", ".pyenv/bin"],
    },
    ToolSpec {
        name: "nvm",
        dirs: &[".nvm"],
        env: &[(env_vars::NVM_DIR, ".nvm")],
        path: &[],
    },
    ToolSpec {
        name: "local-bin",
        dirs: &[".local/bin"],
        env: &[],
        path: &[".local/bin"],
    },
];

/// A `[[tool]]` after validation: absolute host paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tool {
    /// Catalogue name.
    pub name: &'static str,
    /// Directories mapped read-only at the same path inside.
    pub dirs: Vec<PathBuf>,
    /// Variables it sets.
    pub env: Vec<(String, String)>,
    /// Directories it puts in front of `PATH`.
    pub path: Vec<PathBuf>,
}

/// Whose downloads a cache holds (P2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// One cache per project (default): a project cannot poison another's downloads.
    Project,
    /// One cache for every project (`[cache] shared = true`).
    Shared,
}

/// Variables airlock sets itself; `[env]` may not replace them.
const RESERVED: &[&str] = &[
    env_vars::PATH,
    env_vars::HOME,
    env_vars::USER,
    env_vars::LOGNAME,
    env_vars::NO_PROXY,
    env_vars::NO_PROXY_LOWER,
];

fn reserved_reason(name: &str) -> Option<&'static str> {
    if name == env_vars::PATH {
        return Some("is airlock's: put directories in `env.path_prepend` instead");
    }
    let own = RESERVED.contains(&name)
        || env_vars::PROXY_VARS.contains(&name)
        || env_vars::CA_BUNDLE_VARS.contains(&name)
        || env_vars::CACHE_VARS.contains(&name)
        || name.starts_with("AIRLOCK_");
    own.then_some("is set by airlock (proxy, CA trust, cache or identity) and cannot be replaced")
}

fn valid_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// An absolute, normalized directory name usable in `PATH`.
fn path_entry(v: &str) -> Result<PathBuf, String> {
    let p = Path::new(v);
    if !p.is_absolute() {
        return Err(format!("{v:?} is not an absolute path"));
    }
    if v.contains(':') || v.contains('\0') {
        return Err(format!(
            "{v:?} contains `:` or NUL, which `PATH` cannot hold"
        ));
    }
    if p.components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!(
            "{v:?} contains `.` or `..`; write the normalized path"
        ));
    }
    Ok(p.components().collect())
}

/// `[env]` of the user config.
pub(crate) fn env(user: Option<&ParsedFile>, d: &mut Vec<Diagnostic>) -> Sourced<HostEnv> {
    let Some((file, raw)) = user.and_then(|f| f.raw.env.as_ref().map(|e| (f, e))) else {
        return Sourced::new(HostEnv::default(), Origin::Default);
    };
    let mut out = HostEnv::default();
    for (name, value) in raw.vars.iter().flatten() {
        let key = format!("env.vars.{}", crate::diagnostics::key_segment(name));
        if !valid_env_name(name) {
            d.push(file.diag(
                &key,
                format!("invalid variable name {name:?}: use [A-Za-z_][A-Za-z0-9_]*"),
            ));
        } else if let Some(reason) = reserved_reason(name) {
            d.push(file.diag(&key, format!("{name} {reason}")));
        } else if value.contains('\0') {
            d.push(file.diag(&key, "the value contains a NUL byte"));
        } else {
            out.vars.push((name.clone(), value.clone()));
        }
    }
    for (i, v) in raw.path_prepend.iter().flatten().enumerate() {
        match path_entry(v) {
            Ok(p) => out.path_prepend.push(p),
            Err(m) => d.push(file.diag(&format!("env.path_prepend[{i}]"), m)),
        }
    }
    Sourced::new(out, Origin::User)
}

/// `[cache] shared` of the user config.
pub(crate) fn cache_scope(user: Option<&ParsedFile>) -> Sourced<CacheScope> {
    match user.and_then(|f| f.raw.cache.as_ref()?.shared) {
        Some(true) => Sourced::new(CacheScope::Shared, Origin::User),
        Some(false) => Sourced::new(CacheScope::Project, Origin::User),
        None => Sourced::new(CacheScope::Project, Origin::Default),
    }
}

/// What a tool's directory may not overlap.
pub(crate) struct Taken<'a> {
    pub(crate) workspace: Option<&'a Path>,
    pub(crate) mounts: &'a [Mount],
}

/// `[[tool]]` entries of the user config.
pub(crate) fn tools(
    user: Option<&ParsedFile>,
    roots: &Roots,
    taken: &Taken<'_>,
    d: &mut Vec<Diagnostic>,
) -> Vec<Tool> {
    let Some(file) = user else {
        return Vec::new();
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, raw) in file.raw.tool.iter().enumerate() {
        let key = format!("tool[{i}].name");
        let Some(spec) = TOOLS.iter().find(|t| t.name == raw.name) else {
            let names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
            d.push(file.diag(
                &key,
                format!(
                    "unknown tool {:?}; the catalogue has: {} (other directories: \
                     `[[mount]]` with read_only = true and `env.path_prepend`)",
                    raw.name,
                    names.join(", ")
                ),
            ));
            continue;
        };
        if !seen.insert(spec.name) {
            d.push(file.diag(&key, format!("tool {:?} is listed twice", spec.name)));
            continue;
        }
        match resolve(spec, roots, taken) {
            Ok(tool) => out.push(tool),
            Err(m) => d.push(file.diag(&key, m)),
        }
    }
    out
}

fn resolve(spec: &ToolSpec, roots: &Roots, taken: &Taken<'_>) -> Result<Tool, String> {
    let home = &roots.home;
    let mut dirs = Vec::new();
    for rel in spec.dirs {
        let dir = home.join(rel);
        check_real_directory(&dir).map_err(|m| {
            format!(
                "tool {:?} maps {}, but {m}; install it on the host or remove this entry",
                spec.name,
                dir.display()
            )
        })?;
        if let Some(reason) = sensitive_reason(&dir, roots) {
            return Err(reason);
        }
        if let Some(ws) = taken.workspace.filter(|w| overlaps(&dir, w)) {
            return Err(format!(
                "{} overlaps the workspace {}",
                dir.display(),
                ws.display()
            ));
        }
        if let Some(m) = taken.mounts.iter().find(|m| overlaps(&dir, &m.host_path)) {
            return Err(format!(
                "{} overlaps mount {:?} ({}); remove one of the two",
                dir.display(),
                m.name,
                m.host_path.display()
            ));
        }
        dirs.push(dir);
    }
    Ok(Tool {
        name: spec.name,
        dirs,
        env: spec
            .env
            .iter()
            .map(|(k, rel)| {
                (
                    (*k).to_owned(),
                    home.join(rel).to_string_lossy().into_owned(),
                )
            })
            .collect(),
        path: spec.path.iter().map(|rel| home.join(rel)).collect(),
    })
}

/// Catalogue tools whose directories exist under `home` (what `init` suggests).
pub fn found_on_host(home: &Path) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|t| {
            t.dirs
                .iter()
                .all(|rel| check_real_directory(&home.join(rel)).is_ok())
        })
        .map(|t| t.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_airlock_sets_are_refused() {
        for name in [
            "PATH",
            "HOME",
            "HTTPS_PROXY",
            "SSL_CERT_FILE",
            "CARGO_HOME",
            "AIRLOCK_X",
        ] {
            assert!(reserved_reason(name).is_some(), "{name}");
        }
        assert!(reserved_reason("RUST_LOG").is_none());
    }

    #[test]
    fn path_entries_must_be_absolute_normalized_and_colon_free() {
        assert!(path_entry("/opt/x/bin").is_ok());
        assert!(path_entry("bin").is_err());
        assert!(path_entry("/opt/a:/b").is_err());
        assert!(path_entry("/opt/../etc").is_err());
        assert_eq!(path_entry("/opt//x/").unwrap(), PathBuf::from("/opt/x"));
    }

    #[test]
    fn rust_tool_never_maps_the_cargo_home_that_holds_credentials() {
        let rust = TOOLS.iter().find(|t| t.name == "rust").unwrap();
        assert!(!rust.dirs.contains(&".cargo"));
        for dir in rust.dirs {
            assert!(
                !Path::new(".cargo/credentials.toml").starts_with(dir),
                "{dir}"
            );
        }
    }
}
