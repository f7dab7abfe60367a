//! The host environment a sandbox gets from the user config (P2, P4): the package cache mapped
//! read-write at [`env_vars::SANDBOX_CACHE_DIR`] with every package manager pointed into it,
//! `[[tool]]` directories mapped read-only at their host path, and `[env]`.
//!
//! The cache is one directory per project (`<cache>/projects/<dir>-<16 hex of the root's
//! sha256>`) unless the user config shares one (`<cache>/shared`): a project cannot poison
//! another's downloads. airlock creates only that directory (0700, every component checked, no
//! link followed); what is inside is the sandbox's and the host never reads it. It survives
//! `down`: that is its purpose.

use std::path::{Path, PathBuf};

use airlock_config::toolchain::CacheScope;
use airlock_config::{config_hash, env_vars, Effective, Roots};
use airlock_linux::spec::{Mapping, SandboxSpec};

use crate::error::HostError;
use crate::paths::ensure_root;

/// Why the cache directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("the sandbox has no project to key its package cache by")]
    NoProject,
}

/// The package cache directory of `eff`'s project (see the module docs).
pub fn cache_dir(roots: &Roots, eff: &Effective) -> Result<PathBuf, CacheError> {
    match eff.cache.value {
        CacheScope::Shared => Ok(roots.cache.join("shared")),
        CacheScope::Project => {
            let project = eff.project.as_ref().ok_or(CacheError::NoProject)?;
            let digest = config_hash(project.root.as_os_str().as_encoded_bytes());
            let dir = project
                .root
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let dir: String = dir
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .take(32)
                .collect();
            Ok(roots
                .cache
                .join("projects")
                .join(format!("{dir}-{}", &digest[..16])))
        }
    }
}

/// Creates the cache directory (a side effect: call after validation) and returns it.
pub fn prepare_cache(roots: &Roots, eff: &Effective) -> Result<PathBuf, HostError> {
    let dir = cache_dir(roots, eff).map_err(|e| {
        HostError::internal("cache.no_project", e.to_string())
            .with_hint("run airlock in a project (see `airlock init`)")
    })?;
    ensure_root(roots, &dir)?;
    Ok(dir)
}

/// Adds the cache and tool mappings and the environment to `spec`.
pub fn attach_host_environment(spec: &mut SandboxSpec, eff: &Effective, cache: &Path) {
    let sandbox_cache = Path::new(env_vars::SANDBOX_CACHE_DIR);
    spec.mounts.push(Mapping {
        host: cache.to_path_buf(),
        sandbox: sandbox_cache.to_path_buf(),
        writable: true,
    });
    for tool in &eff.tools {
        for dir in &tool.dirs {
            spec.mounts.push(Mapping {
                host: dir.clone(),
                sandbox: dir.clone(),
                writable: false,
            });
        }
    }
    let mut env: Vec<(String, String)> = env_vars::CACHE_DIRS
        .iter()
        .map(|(name, rel)| {
            let value = sandbox_cache.join(rel).to_string_lossy().into_owned();
            ((*name).to_owned(), value)
        })
        .collect();
    for tool in &eff.tools {
        env.extend(tool.env.iter().cloned());
    }
    env.extend(eff.env.value.vars.iter().cloned());
    let prepend: Vec<String> = eff
        .env
        .value
        .path_prepend
        .iter()
        .chain(eff.tools.iter().flat_map(|t| t.path.iter()))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    set_env(spec, env, &prepend);
}

/// Sets `env` on `spec` (replacing a variable of the same name) and puts `prepend` in front of
/// `PATH`.
fn set_env(spec: &mut SandboxSpec, env: Vec<(String, String)>, prepend: &[String]) {
    for (name, value) in env {
        spec.env.retain(|(n, _)| *n != name);
        spec.env.push((name, value));
    }
    if prepend.is_empty() {
        return;
    }
    add_to_path(spec, &prepend.join(":"), PathEnd::Front);
}

/// Where [`add_to_path`] puts its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathEnd {
    /// Searched before everything already on `PATH` (`[env] path_prepend`, `[[tool]]`).
    Front,
    /// Searched after it (an installed agent: the image's own command wins).
    Back,
}

/// Adds `entries` (one or more `:`-separated directories) to the sandbox's `PATH`, creating the
/// variable when the spec has none: the one place that edits `PATH` of a spec.
pub(crate) fn add_to_path(spec: &mut SandboxSpec, entries: &str, end: PathEnd) {
    match spec.env.iter_mut().find(|(n, _)| n == env_vars::PATH) {
        Some((_, path)) => {
            *path = match end {
                PathEnd::Front => format!("{entries}:{path}"),
                PathEnd::Back => format!("{path}:{entries}"),
            }
        }
        None => spec
            .env
            .push((env_vars::PATH.to_owned(), entries.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_linux::spec::HostUser;

    fn spec() -> SandboxSpec {
        let user = HostUser {
            uid: 1,
            gid: 1,
            name: "u".into(),
            home: "/home/u".into(),
        };
        SandboxSpec {
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            ..SandboxSpec::bare("t", user)
        }
    }

    #[test]
    fn path_prepends_go_in_front_in_order_and_variables_replace() {
        let mut s = spec();
        set_env(
            &mut s,
            vec![("A".into(), "1".into()), ("A".into(), "2".into())],
            &["/x/bin".into(), "/y/bin".into()],
        );
        assert_eq!(
            s.env,
            [
                ("PATH".to_owned(), "/x/bin:/y/bin:/usr/bin:/bin".to_owned()),
                ("A".to_owned(), "2".to_owned())
            ]
        );
    }

    #[test]
    fn an_agent_directory_goes_behind_path_and_creates_it_when_absent() {
        let mut with = spec();
        add_to_path(&mut with, "/a/bin", PathEnd::Back);
        assert_eq!(
            with.env,
            vec![("PATH".to_owned(), "/usr/bin:/bin:/a/bin".to_owned())]
        );
        let mut without = spec();
        without.env.clear();
        add_to_path(&mut without, "/a/bin", PathEnd::Back);
        assert_eq!(without.env, vec![("PATH".to_owned(), "/a/bin".to_owned())]);
    }
}
