//! The directories airlock reads and writes, resolved from the environment.
//!
//! Invariants:
//! - Resolution is pure — nothing is created, canonicalized or even looked at on disk — except
//!   for the runtime root when `XDG_RUNTIME_DIR` is unset (see below).
//! - Every root is absolute. `HOME` must be set and absolute; XDG variables that are
//!   unset, empty or relative are ignored, as the XDG Base Directory specification demands
//!   ("If an implementation encounters a relative path in any of these variables it should
//!   consider the path invalid and ignore it").
//! - Each airlock root is the XDG base joined with `airlock`. The runtime root is
//!   `$XDG_RUNTIME_DIR/airlock`; when that variable is unset, `/dev/shm/airlock-<uid>/airlock`
//!   when that tmpfs directory is this user's own (created 0700 and checked, see
//!   [`crate::runtime_root`]), else `<state>/run` on disk (never `/tmp`, which other users
//!   share). Sockets and small files only live there.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::env_vars;

/// Errors resolving [`Roots`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RootsError {
    /// `HOME` is unset or empty.
    #[error("HOME is not set; airlock needs the user's home directory")]
    HomeUnset,
    /// `HOME` is set to a relative path.
    #[error("HOME is not an absolute path: {value:?}")]
    HomeRelative {
        /// The value of `HOME`.
        value: PathBuf,
    },
}

/// airlock's per-user directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Roots {
    /// The user's home directory (`$HOME`).
    pub home: PathBuf,
    /// `$XDG_CONFIG_HOME/airlock`: the user config, its schema and the user provision script.
    pub config: PathBuf,
    /// `$XDG_STATE_HOME/airlock`: sandbox records, operation records, locks, trust store.
    pub state: PathBuf,
    /// `$XDG_DATA_HOME/airlock`: secrets, the interception CA, images, persisted agent state.
    pub data: PathBuf,
    /// `$XDG_CACHE_HOME/airlock`: package-manager caches mapped into sandboxes (P2).
    pub cache: PathBuf,
    /// `$XDG_RUNTIME_DIR/airlock`, else `/dev/shm/airlock-<uid>/airlock` when it is ours, else
    /// `<state>/run`: sockets and other per-boot files.
    pub runtime: PathBuf,
}

const APP: &str = "airlock";

impl Roots {
    /// Resolves the roots from an environment lookup, e.g. `|k| std::env::var_os(k)`; without
    /// `XDG_RUNTIME_DIR`, the runtime root goes to this user's tmpfs directory when it can
    /// ([`crate::runtime_root::tmpfs_runtime_base`]).
    pub fn from_env(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Roots, RootsError> {
        Roots::from_env_with(lookup, || {
            let uid = rustix::process::geteuid().as_raw();
            let shm = Path::new(crate::runtime_root::SHM_DIR);
            crate::runtime_root::tmpfs_runtime_base(shm, uid).ok()
        })
    }

    /// [`Roots::from_env`] with the tmpfs runtime base given (`None`: none usable), asked only
    /// when `XDG_RUNTIME_DIR` is unset. Pure when `tmpfs` is.
    pub fn from_env_with(
        lookup: impl Fn(&str) -> Option<OsString>,
        tmpfs: impl FnOnce() -> Option<PathBuf>,
    ) -> Result<Roots, RootsError> {
        let home = match lookup(env_vars::HOME) {
            None => return Err(RootsError::HomeUnset),
            Some(v) if v.is_empty() => return Err(RootsError::HomeUnset),
            Some(v) => PathBuf::from(v),
        };
        if !home.is_absolute() {
            return Err(RootsError::HomeRelative { value: home });
        }
        let base = |var: &str, fallback: &str| -> PathBuf {
            absolute_var(&lookup, var).unwrap_or_else(|| home.join(fallback))
        };
        let config = base(env_vars::XDG_CONFIG_HOME, ".config").join(APP);
        let state = base(env_vars::XDG_STATE_HOME, ".local/state").join(APP);
        let data = base(env_vars::XDG_DATA_HOME, ".local/share").join(APP);
        let cache = base(env_vars::XDG_CACHE_HOME, ".cache").join(APP);
        let runtime = match absolute_var(&lookup, env_vars::XDG_RUNTIME_DIR) {
            Some(dir) => dir.join(APP),
            None => tmpfs().map_or_else(|| state.join("run"), |base| base.join(APP)),
        };
        Ok(Roots {
            home,
            config,
            state,
            data,
            cache,
            runtime,
        })
    }

    /// The user config file: `<config>/config.toml`.
    pub fn user_config_path(&self) -> PathBuf {
        self.config.join("config.toml")
    }

    /// The app-owned JSON Schema written beside the user config: `<config>/config.schema.json`.
    pub fn schema_path(&self) -> PathBuf {
        self.config.join("config.schema.json")
    }

    /// The user's provision script: `<config>/provision.sh` (P1, runs before the project's).
    pub fn provision_script_path(&self) -> PathBuf {
        self.config.join("provision.sh")
    }

    /// Where host secrets live (0600 files, N5): `<data>/secrets`.
    pub fn secrets_dir(&self) -> PathBuf {
        self.data.join("secrets")
    }

    /// All of airlock's own roots, for checks that must keep them out of sandboxes.
    pub fn own_roots(&self) -> [&Path; 5] {
        [
            &self.config,
            &self.state,
            &self.data,
            &self.cache,
            &self.runtime,
        ]
    }
}

fn absolute_var(lookup: &impl Fn(&str) -> Option<OsString>, var: &str) -> Option<PathBuf> {
    let value = PathBuf::from(lookup(var)?);
    value.is_absolute().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn roots(vars: &[(&str, &str)]) -> Result<Roots, RootsError> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Roots::from_env_with(|k| map.get(k).cloned(), || None)
    }

    #[test]
    fn xdg_fallbacks_live_under_home() {
        let r = roots(&[("HOME", "/home/u")]).unwrap();
        assert_eq!(r.config, Path::new("/home/u/.config/airlock"));
        assert_eq!(r.state, Path::new("/home/u/.local/state/airlock"));
        assert_eq!(r.data, Path::new("/home/u/.local/share/airlock"));
        assert_eq!(r.cache, Path::new("/home/u/.cache/airlock"));
        assert_eq!(r.runtime, Path::new("/home/u/.local/state/airlock/run"));
        assert_eq!(
            r.user_config_path(),
            Path::new("/home/u/.config/airlock/config.toml")
        );
        assert_eq!(
            r.schema_path(),
            Path::new("/home/u/.config/airlock/config.schema.json")
        );
        assert_eq!(
            r.provision_script_path(),
            Path::new("/home/u/.config/airlock/provision.sh")
        );
    }

    #[test]
    fn without_xdg_runtime_dir_the_runtime_root_goes_to_the_usable_tmpfs_base() {
        let lookup = |k: &str| (k == "HOME").then(|| OsString::from("/home/u"));
        let r =
            Roots::from_env_with(lookup, || Some(PathBuf::from("/dev/shm/airlock-1000"))).unwrap();
        assert_eq!(r.runtime, Path::new("/dev/shm/airlock-1000/airlock"));
        // XDG_RUNTIME_DIR wins, and the tmpfs base is not even looked at.
        let lookup = |k: &str| match k {
            "HOME" => Some(OsString::from("/home/u")),
            "XDG_RUNTIME_DIR" => Some(OsString::from("/run/user/1000")),
            _ => None,
        };
        let r = Roots::from_env_with(lookup, || panic!("probed")).unwrap();
        assert_eq!(r.runtime, Path::new("/run/user/1000/airlock"));
    }

    #[test]
    fn absolute_xdg_values_are_used() {
        let r = roots(&[
            ("HOME", "/home/u"),
            ("XDG_CONFIG_HOME", "/c"),
            ("XDG_STATE_HOME", "/s"),
            ("XDG_DATA_HOME", "/d"),
            ("XDG_CACHE_HOME", "/k"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ])
        .unwrap();
        assert_eq!(r.config, Path::new("/c/airlock"));
        assert_eq!(r.state, Path::new("/s/airlock"));
        assert_eq!(r.data, Path::new("/d/airlock"));
        assert_eq!(r.cache, Path::new("/k/airlock"));
        assert_eq!(r.runtime, Path::new("/run/user/1000/airlock"));
    }

    #[test]
    fn relative_and_empty_xdg_values_are_ignored_per_spec() {
        let r = roots(&[
            ("HOME", "/home/u"),
            ("XDG_CONFIG_HOME", "rel/config"),
            ("XDG_STATE_HOME", ""),
            ("XDG_RUNTIME_DIR", "run"),
        ])
        .unwrap();
        assert_eq!(r.config, Path::new("/home/u/.config/airlock"));
        assert_eq!(r.state, Path::new("/home/u/.local/state/airlock"));
        assert_eq!(r.runtime, Path::new("/home/u/.local/state/airlock/run"));
    }

    #[test]
    fn missing_or_relative_home_is_a_typed_error() {
        assert_eq!(roots(&[]), Err(RootsError::HomeUnset));
        assert_eq!(roots(&[("HOME", "")]), Err(RootsError::HomeUnset));
        assert_eq!(
            roots(&[("HOME", "home/u")]),
            Err(RootsError::HomeRelative {
                value: PathBuf::from("home/u")
            })
        );
    }
}
