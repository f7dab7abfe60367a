//! State that `airlock run` leaves under `<state>/runs/<id>/` (the ephemeral sandbox's audit
//! log, N7), and its ownership-checked removal (PRODUCT L9, R2).
//!
//! Lifetime (decided): the directory outlives its run. Unlike a container started with
//! `docker run --rm`, whose logs go with it, an ephemeral sandbox has no record that `policy
//! log` could show later, so the audit log file is the only account of what the run's
//! sandbox reached; deleting it the moment the run exits would leave nothing to review. It is
//! removed by the next stale cleanup instead: `clean`, and every mutating lifecycle command
//! (`up`, `down`), which run this sweep on the way in (L9).
//!
//! Ownership: `run` creates the directory (0700) and, before anything else is written to it,
//! its owner marker [`OWNER_MARKER`]: the run process's identity (pid, kernel start time,
//! command line) as JSON. The sweep removes a directory only when the marker parses and that
//! process is provably gone (exited, or its pid now belongs to another process); a live run's
//! directory is never touched. A directory it cannot prove it owns (no or unreadable marker,
//! a symbolic link, another user's) is left alone and reported as unmanaged.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use airlock_core::ownership::{self, Liveness};
use airlock_core::records::ProcessIdentity;

use crate::error::HostError;

/// The file naming the `run` process that owns a `<state>/runs/<id>/` directory.
pub const OWNER_MARKER: &str = ".airlock-run-owner";

/// `<state>/runs`.
pub fn runs_root(state_root: &Path) -> PathBuf {
    state_root.join("runs")
}

/// Creates `<runs>/<id>/` (0700, must not exist) with this process's owner marker; returns it.
/// The caller has made `runs` a private root already.
pub fn create_run_dir(runs: &Path, id: &str) -> Result<PathBuf, HostError> {
    let dir = runs.join(id);
    let fail = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        HostError::internal(
            "run.state",
            format!("cannot {what} {}: {e}", path.display()),
        )
        .with_hint("check the permissions of airlock's state directory")
    };
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| fail("create", &dir, &e))?;
    let me = ownership::process_identity(std::process::id())
        .map_err(|e| fail("read the identity of this process for", &dir, &e))?;
    let text = serde_json::to_vec(&me).map_err(|e| fail("encode the owner of", &dir, &e))?;
    let marker = dir.join(OWNER_MARKER);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&marker)
        .and_then(|mut f| f.write_all(&text))
        .map_err(|e| fail("write", &marker, &e))?;
    Ok(dir)
}

/// One removed run directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedRun {
    pub id: String,
    pub path: PathBuf,
    /// Disk use measured just before removal.
    pub bytes: u64,
}

/// What one sweep of `<state>/runs` did.
#[derive(Debug, Default)]
pub struct RunSweep {
    pub removed: Vec<RemovedRun>,
    /// Directories of runs still alive: `(id, pid)`.
    pub live: Vec<(String, u32)>,
    /// Directories nobody can prove are ours, with the reason.
    pub unmanaged: Vec<(PathBuf, String)>,
}

/// Whose a run directory is.
enum Owner {
    Alive(u32),
    Gone,
    Unproven(&'static str),
}

fn owner_of(dir: &Path) -> Owner {
    let meta = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(_) => return Owner::Unproven("it cannot be inspected"),
    };
    if !meta.is_dir() {
        return Owner::Unproven("it is not a directory (or is a symbolic link)");
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Owner::Unproven("it belongs to another user");
    }
    let marker = dir.join(OWNER_MARKER);
    let Ok(marker_meta) = fs::symlink_metadata(&marker) else {
        return Owner::Unproven("it carries no run owner marker");
    };
    if !marker_meta.is_file() {
        return Owner::Unproven("its owner marker is not a regular file");
    }
    let Some(identity) = fs::read(&marker)
        .ok()
        .and_then(|b| serde_json::from_slice::<ProcessIdentity>(&b).ok())
    else {
        return Owner::Unproven("its owner marker cannot be read");
    };
    match ownership::check_process(&identity) {
        Liveness::Ours => Owner::Alive(identity.pid),
        Liveness::Gone | Liveness::Reused => Owner::Gone,
    }
}

/// Removes every `<state>/runs/<id>/` whose owning `run` is provably gone; reports live runs
/// and unprovable directories without touching them. A missing `runs` root is nothing to do.
pub fn sweep(state_root: &Path) -> RunSweep {
    let mut out = RunSweep::default();
    let Ok(entries) = fs::read_dir(runs_root(state_root)) else {
        return out;
    };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match owner_of(&dir) {
            Owner::Alive(pid) => out.live.push((id, pid)),
            Owner::Unproven(why) => out.unmanaged.push((dir, why.to_owned())),
            Owner::Gone => {
                let bytes = ownership::disk_usage(&dir);
                match fs::remove_dir_all(&dir) {
                    Ok(()) => out.removed.push(RemovedRun {
                        id,
                        path: dir,
                        bytes,
                    }),
                    Err(e) => out
                        .unmanaged
                        .push((dir, format!("its run is gone but removing failed: {e}"))),
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_marker(dir: &Path, identity: &ProcessIdentity) {
        fs::write(
            dir.join(OWNER_MARKER),
            serde_json::to_vec(identity).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn a_live_runs_directory_is_kept_and_a_dead_runs_is_removed() {
        let state = tempfile::tempdir().unwrap();
        let runs = runs_root(state.path());
        fs::create_dir(&runs).unwrap();
        let live = create_run_dir(&runs, "live").unwrap();
        fs::write(live.join("audit.jsonl"), b"{}\n").unwrap();

        // A process that has exited: a child we reap.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let identity = ownership::process_identity(child.id()).unwrap();
        child.wait().unwrap();
        let dead = runs.join("dead");
        fs::create_dir(&dead).unwrap();
        write_marker(&dead, &identity);
        fs::write(dead.join("audit.jsonl"), vec![b'x'; 10_000]).unwrap();

        let out = sweep(state.path());
        assert!(
            live.join("audit.jsonl").exists(),
            "a live run's log was removed"
        );
        assert!(!dead.exists(), "a dead run's directory was kept");
        assert_eq!(out.removed.len(), 1, "{out:?}");
        assert_eq!(out.removed[0].id, "dead");
        assert!(out.removed[0].bytes >= 10_000, "{out:?}");
        assert_eq!(out.live, vec![("live".to_owned(), std::process::id())]);
        assert!(out.unmanaged.is_empty(), "{out:?}");
    }

    #[test]
    fn a_recycled_pid_does_not_keep_a_dead_runs_directory() {
        let state = tempfile::tempdir().unwrap();
        let runs = runs_root(state.path());
        let dir = runs.join("recycled");
        fs::create_dir_all(&dir).unwrap();
        // Our own pid, but another start time: the run that wrote this is gone.
        let mut identity = ownership::process_identity(std::process::id()).unwrap();
        identity.start_time += 1;
        write_marker(&dir, &identity);
        let out = sweep(state.path());
        assert!(!dir.exists());
        assert_eq!(out.removed.len(), 1, "{out:?}");
    }

    #[test]
    fn directories_without_a_provable_owner_are_reported_and_left() {
        let state = tempfile::tempdir().unwrap();
        let runs = runs_root(state.path());
        let bare = runs.join("bare");
        fs::create_dir_all(&bare).unwrap();
        fs::write(bare.join("audit.jsonl"), b"keep").unwrap();
        let garbled = runs.join("garbled");
        fs::create_dir(&garbled).unwrap();
        fs::write(garbled.join(OWNER_MARKER), b"12 34").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), runs.join("link")).unwrap();

        let out = sweep(state.path());
        assert!(bare.join("audit.jsonl").exists() && garbled.exists());
        assert!(elsewhere.path().exists());
        assert!(out.removed.is_empty(), "{out:?}");
        let reported: Vec<&Path> = out.unmanaged.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(
            reported,
            vec![
                bare.as_path(),
                garbled.as_path(),
                runs.join("link").as_path()
            ]
        );
    }

    #[test]
    fn creating_a_run_directory_twice_fails_instead_of_adopting_it() {
        let state = tempfile::tempdir().unwrap();
        let runs = runs_root(state.path());
        fs::create_dir(&runs).unwrap();
        create_run_dir(&runs, "one").unwrap();
        assert!(create_run_dir(&runs, "one").is_err());
    }
}
