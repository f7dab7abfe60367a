//! The effective configuration as the host loads it: user and project config, trust looked up
//! read-only (C6), and what a running sandbox enforces now.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use airlock_config::effective::Network;
use airlock_config::{Effective, LoadRequest, Overrides, Project, Roots};
use airlock_core::lifecycle::Stores;
use airlock_core::names::SandboxName;
use airlock_core::ownership::{check_process, Liveness};
use airlock_core::{TrustError, TrustStore};

use crate::error::HostError;

/// Loads and validates the user and project configuration, with trust looked up read-only.
/// A trust store that cannot be read counts as "untrusted" (fail closed) and adds a note.
pub fn load_effective(
    roots: &Roots,
    project: Option<airlock_config::Project>,
    memory_mb: Option<u64>,
    notes: &mut Vec<String>,
) -> Result<Effective, HostError> {
    let store = TrustStore::open(&roots.state)?;
    let failure: RefCell<Option<TrustError>> = RefCell::new(None);
    let is_trusted = |root: &Path, sha256: &str| match store.is_trusted(root, sha256) {
        Ok(trusted) => trusted,
        Err(e) => {
            failure.borrow_mut().get_or_insert(e);
            false
        }
    };
    let images = airlock_image::Store::open_existing(&roots.data)
        .ok()
        .flatten();
    let image_exists = |name: &str| match (&images, airlock_image::ImageName::parse(name)) {
        (Some(store), Ok(name)) => store.get(&name).is_ok(),
        _ => false,
    };
    let request = LoadRequest {
        roots,
        project: project.as_ref(),
        overrides: Overrides { memory_mb },
        is_trusted: &is_trusted,
        image_exists: Some(&image_exists),
    };
    let effective = airlock_config::load(&request)?;
    if let Some(e) = failure.into_inner() {
        notes.push(format!(
            "warning: cannot read the trust store ({e}); the project is treated as untrusted"
        ));
    }
    Ok(effective)
}

/// Validates the user config alone (after `airlock config` opened it in an editor).
pub fn validate_user_config(roots: &Roots) -> Result<(), HostError> {
    load_effective(roots, None, None, &mut Vec::new()).map(drop)
}

/// The network configuration a sandbox of `project` enforces now: the user config plus the
/// project config (trust-aware, C6), with the selected agent's hosts. The keeper calls this
/// when asked to reload and hands `policy()` to the proxy's `update`.
pub fn current_network(
    roots: &Roots,
    project: Option<Project>,
    notes: &mut Vec<String>,
) -> Result<Network, HostError> {
    Ok(load_effective(roots, project, None, notes)?.network)
}

/// Sandboxes of this user whose keeper is provably running (R2: pid, start time, command line),
/// each with its runtime directory (where its keeper's control socket is). A state store that
/// cannot be read yields none: this only decides what is said, never done.
pub fn running_sandboxes(roots: &Roots) -> Vec<(SandboxName, PathBuf)> {
    let Ok(stores) = Stores::open(&roots.state) else {
        return Vec::new();
    };
    let names = stores.names().unwrap_or_default();
    names
        .into_iter()
        .filter_map(|name| {
            let record = stores.record(&name).ok()??.data;
            let keeper = record.keeper.as_ref()?;
            // A keeper of another airlock version is never talked to (it is `stale`).
            let ours = crate::lifecycle::backend::incompatible(&record).is_none();
            (ours && check_process(keeper) == Liveness::Ours)
                .then_some((name, record.paths.runtime_dir))
        })
        .collect()
}
