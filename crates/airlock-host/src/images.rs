//! The host side of `airlock image import|ls|rm` (PRODUCT I2, §2).
//!
//! Images live in `<data>/images/` (see `airlock_image::store`). [`import`] checks the name and
//! the file before anything is created, then unpacks in the way the invoker's identity allows
//! (`airlock_image::Runner::for_invoker`): root keeps the archive's owners; an unprivileged
//! user with subordinate ids unpacks in a helper inside a user namespace mapped like the
//! sandbox's; without subordinate ids every file is the user's own. A refused or failed import
//! publishes nothing. [`remove`] is refused while a sandbox record names the image.
//!
//! Messages can quote the archive (entry names): the binary escapes them before printing.

use std::path::{Path, PathBuf};

use airlock_config::Roots;
use airlock_image::store::Ownership;
use airlock_image::{ImageInfo, ImageName, ImportRequest, Runner, Store, StoreError};

use crate::error::{ErrorKind, HostError};

/// The runner (and the ownership it gives) for this invoker.
fn runner() -> (Runner, Ownership) {
    Runner::for_this_process(PathBuf::from("/proc/self/exe"))
}

fn usage(code: &'static str, message: String, hint: &str) -> HostError {
    HostError::new(ErrorKind::Usage, code, message).with_hint(hint)
}

/// `name` as an image name; a usage error (exit 2) otherwise.
pub fn parse_name(name: &str) -> Result<ImageName, HostError> {
    ImageName::parse(name).map_err(|e| usage("image.bad_name", e, "e.g. --name debian-12"))
}

/// Imports `archive` as image `name`, refusing archives whose files add up to more than
/// `max_bytes`. Everything checkable is checked before the store is created (L2).
pub fn import(
    roots: &Roots,
    archive: &Path,
    name: &str,
    max_bytes: u64,
) -> Result<ImageInfo, HostError> {
    let name = parse_name(name)?;
    let hint = "give the path of a .tar or .tar.gz archive";
    match std::fs::metadata(archive) {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            let message = format!("{} is not a regular file", archive.display());
            return Err(usage("image.not_a_file", message, hint));
        }
        Err(e) => {
            let message = format!("cannot read {}: {e}", archive.display());
            return Err(usage("image.unreadable", message, hint));
        }
    }
    let store = Store::open(&roots.data)?;
    let (runner, ownership) = runner();
    let req = ImportRequest {
        archive: archive.to_owned(),
        name,
        max_bytes,
        max_entries: airlock_image::extract::Caps::default().max_entries,
        now: airlock_core::records::utc_text(airlock_core::records::now_ms()),
    };
    Ok(airlock_image::import(&store, &req, &runner, ownership)?)
}

/// The imported images; an entry that cannot be read is an error of its own (the others are
/// still listed). No store yet: none.
pub fn list(roots: &Roots) -> Result<Vec<Result<ImageInfo, StoreError>>, HostError> {
    Ok(match Store::open_existing(&roots.data)? {
        Some(store) => store.list()?,
        None => Vec::new(),
    })
}

/// Removes image `name`; refused while a sandbox record names it or a sandbox holds it.
pub fn remove(roots: &Roots, name: &str) -> Result<ImageInfo, HostError> {
    let name = parse_name(name)?;
    let Some(store) = Store::open_existing(&roots.data)? else {
        return Err(StoreError::NotFound {
            name: name.to_string(),
        }
        .into());
    };
    let info = store.get(&name)?;
    // Under the exclusive lock no `up` or `run` can take a hold, and a record `up` wrote while
    // holding the image is already on disk: the check below cannot miss a new user.
    let lock = store.lock_for_removal(&name)?;
    let users = sandboxes_using(roots, &info)?;
    if !users.is_empty() {
        return Err(HostError::new(
            ErrorKind::Failed,
            "image.in_use",
            format!(
                "image {name:?} is used by the sandbox(es) {}",
                users.join(", ")
            ),
        )
        .with_hint("run `airlock down` in their projects first (`airlock ls` lists them)"));
    }
    let (runner, _) = runner();
    Ok(airlock_image::remove(&store, &name, &lock, &runner)?)
}

/// Names of recorded sandboxes whose plan names this image (whatever their health: a stopped
/// sandbox's record still points at it until `down` or `clean` removes it).
fn sandboxes_using(roots: &Roots, info: &ImageInfo) -> Result<Vec<String>, HostError> {
    let stores = airlock_core::lifecycle::Stores::open(&roots.state)?;
    let mut users = Vec::new();
    for name in stores.names()? {
        // A record that cannot be read might be using it: refuse rather than guess.
        let uses = match stores.record(&name) {
            Ok(Some(rec)) => airlock_image::uses_image(&rec.data.plan.image, &info.name),
            Ok(None) => false,
            Err(_) => true,
        };
        if uses {
            users.push(name.to_string());
        }
    }
    Ok(users)
}

/// `image NAME sha256:…` for `plan` (the digest `up` records and compares, L1), or the name
/// alone when the store cannot be read here (`up` reports why).
pub fn plan_label(roots: &Roots, name: &str) -> String {
    let info = Store::open_existing(&roots.data)
        .ok()
        .flatten()
        .zip(ImageName::parse(name).ok())
        .and_then(|(store, name)| store.get(&name).ok());
    match info {
        Some(info) => airlock_image::plan_label(&info),
        None => format!("image {name}"),
    }
}
