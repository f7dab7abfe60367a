//! `image import` and `image rm` from start to end: validate, stage, unpack (here or in the
//! namespaced helper), publish or discard. Nothing is published unless every layer was
//! extracted and every digest matched; a failure removes the staging directory.

use std::path::{Path, PathBuf};

use airlock_linux::idmap::IdPlan;
use thiserror::Error;

use crate::helper::{run_here, run_in_namespace, HelperError, Job, Reply};
use crate::name::ImageName;
use crate::store::{ImageInfo, Ownership, RemovalLock, Staging, Store, StoreError};
use crate::unpack::UnpackJob;

#[derive(Debug, Error)]
pub enum ImportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Helper(#[from] HelperError),
    /// The archive was refused (hostile or malformed); nothing was published.
    #[error("{message}")]
    Refused { message: String },
    /// The host failed while importing; nothing was published.
    #[error("{message}")]
    Failed { message: String },
}

/// Where the work runs, decided from the invoker (see [`Runner::for_invoker`]).
#[derive(Debug, Clone)]
pub enum Runner {
    /// In this process; `chown` gives entries the archive's owners (root invoker).
    Here { chown: bool },
    /// In the helper, inside a user namespace mapped by `plan` (like the sandbox's).
    Namespace { exe: PathBuf, plan: IdPlan },
}

impl Runner {
    /// Root: here, archive owners kept. Unprivileged with subordinate ids (the sandbox's plan
    /// maps root): the namespaced helper. Without: here, every file the user's own.
    pub fn for_invoker(uid: u32, plan: IdPlan, exe: PathBuf) -> (Runner, Ownership) {
        if uid == 0 {
            (Runner::Here { chown: true }, Ownership::Archive)
        } else if plan.root_unavailable.is_none() {
            (Runner::Namespace { exe, plan }, Ownership::Subordinate)
        } else {
            (Runner::Here { chown: false }, Ownership::Invoker)
        }
    }

    /// [`Runner::for_invoker`] for the user running this process (name from `/etc/passwd`, else
    /// `$USER`), with the sandbox's id plan for that user.
    pub fn for_this_process(exe: PathBuf) -> (Runner, Ownership) {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let user = std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|text| airlock_linux::doctor::user_name_for(&text, uid))
            .or_else(|| std::env::var(airlock_env::USER).ok())
            .unwrap_or_default();
        let ids = airlock_linux::idmap::HostIds::probe(uid, gid, &user);
        // The root-invoker range is irrelevant: root imports in process.
        let plan = airlock_linux::idmap::plan(&ids, None);
        Runner::for_invoker(uid, plan, exe)
    }

    /// The runner that can delete a tree stored with `ownership`.
    pub fn for_removal(&self, ownership: Ownership) -> Runner {
        match (self, ownership.needs_namespace()) {
            (Runner::Namespace { .. }, true) => self.clone(),
            _ => Runner::Here { chown: false },
        }
    }

    fn run(&self, job: &Job) -> Result<Reply, HelperError> {
        match self {
            Runner::Here { .. } => Ok(run_here(job)),
            Runner::Namespace { exe, plan } => run_in_namespace(exe, plan, job),
        }
    }

    fn chown(&self) -> bool {
        match self {
            Runner::Here { chown } => *chown,
            Runner::Namespace { .. } => true,
        }
    }
}

/// One import.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    pub archive: PathBuf,
    pub name: ImageName,
    pub max_bytes: u64,
    pub max_entries: u64,
    /// `YYYY-MM-DDTHH:MM:SSZ`, recorded as `imported_at`.
    pub now: String,
}

pub fn import(
    store: &Store,
    req: &ImportRequest,
    runner: &Runner,
    ownership: Ownership,
) -> Result<ImageInfo, ImportError> {
    match store.get(&req.name) {
        Err(StoreError::NotFound { .. }) => {}
        Ok(_) | Err(StoreError::Corrupt { .. }) => {
            return Err(StoreError::Exists {
                name: req.name.to_string(),
            }
            .into())
        }
        Err(e) => return Err(e.into()),
    }
    sweep(store, runner);
    let staging = store.begin_import()?;
    let job = Job::Unpack(UnpackJob {
        archive: req.archive.clone(),
        staging: staging.dir.clone(),
        chown: runner.chown(),
        max_bytes: req.max_bytes,
        max_entries: req.max_entries,
    });
    let outcome = match runner.run(&job) {
        Ok(Reply::Unpacked(done)) => Ok(done),
        Ok(Reply::Failed { message, refusal }) => Err(if refusal {
            ImportError::Refused { message }
        } else {
            ImportError::Failed { message }
        }),
        Ok(Reply::Removed) => Err(ImportError::Failed {
            message: "the import helper answered out of turn".into(),
        }),
        Err(e) => Err(e.into()),
    };
    let done = match outcome {
        Ok(done) => done,
        Err(e) => {
            discard(runner, &staging);
            return Err(e);
        }
    };
    let info = ImageInfo {
        name: req.name.to_string(),
        source: done.source,
        digest: done.digest,
        size: done.stats.bytes,
        layers: done.layers,
        imported_at: req.now.clone(),
        ownership,
        stats: done.stats,
    };
    if let Err(e) = store.publish(&staging, &info) {
        discard(runner, &staging);
        return Err(e.into());
    }
    Ok(info)
}

/// Unpublishes image `name` and deletes its tree. The caller holds its removal lock and has
/// checked, under it, that the image is unused.
pub fn remove(
    store: &Store,
    name: &ImageName,
    lock: &RemovalLock,
    runner: &Runner,
) -> Result<ImageInfo, ImportError> {
    let info = store.get(name)?;
    let dir = store.unpublish(name, lock)?;
    let runner = runner.for_removal(info.ownership);
    delete(&runner, &dir)?;
    Ok(info)
}

fn delete(runner: &Runner, dir: &Path) -> Result<(), ImportError> {
    match runner.run(&Job::Remove {
        path: dir.to_path_buf(),
    })? {
        Reply::Removed => Ok(()),
        Reply::Failed { message, .. } => Err(ImportError::Failed { message }),
        Reply::Unpacked(_) => Err(ImportError::Failed {
            message: "the import helper answered out of turn".into(),
        }),
    }
}

fn discard(runner: &Runner, staging: &Staging) {
    let _ = delete(runner, &staging.dir);
}

/// Deletes working directories left by imports and removals that died (best effort).
fn sweep(store: &Store, runner: &Runner) {
    for dir in store.abandoned().unwrap_or_default() {
        let _ = delete(runner, &dir);
    }
}
