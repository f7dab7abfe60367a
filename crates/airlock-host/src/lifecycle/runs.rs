//! State that `airlock run` keeps under `<state>/runs/<id>/` while it runs (the ephemeral
//! sandbox's audit log, N7), what it keeps after it ends, and the ownership-checked removal of
//! the directories of runs that were killed (PRODUCT L9, R2).
//!
//! Lifetime (decided): a finished run removes its own state directory ([`retire`]), whether
//! its command succeeded or failed. The audit log is the only account of what an ephemeral
//! sandbox reached, so when the run audited anything it is not deleted but moved to
//! `<state>/run-logs/<id>/` (a rename on the same filesystem), a bounded directory holding the
//! logs of the newest [`KEPT_RUN_LOGS`] runs; older ones are pruned by the run that adds one.
//! A run whose proxy audited nothing leaves nothing. A run that is killed before it can retire
//! leaves its directory; the next stale cleanup removes it ([`sweep`]: `clean`, and every
//! mutating lifecycle command, L9).
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

pub use crate::paths::{run_logs_root, runs_root};

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

/// How many finished runs' audit logs `<state>/run-logs` keeps.
pub const KEPT_RUN_LOGS: usize = 20;

/// Ends this process's own run directory `dir` (created by [`create_run_dir`]): moves it to
/// `logs/<id>` when it holds a non-empty audit log (and prunes `logs` to the newest
/// [`KEPT_RUN_LOGS`]), removes it otherwise. `logs` is a private root the caller created.
/// Returns where the log was kept.
pub fn retire(dir: &Path, logs: &Path) -> Result<Option<PathBuf>, HostError> {
    let fail = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        HostError::internal(
            "run.state",
            format!("cannot {what} {}: {e}", path.display()),
        )
        .with_hint("check the permissions of airlock's state directory")
    };
    if !audited_anything(dir) {
        return fs::remove_dir_all(dir)
            .map(|()| None)
            .map_err(|e| fail("remove", dir, &e));
    }
    let Some(id) = dir.file_name() else {
        return Err(fail("name", dir, &"no file name"));
    };
    let kept = logs.join(id);
    fs::remove_file(dir.join(OWNER_MARKER)).map_err(|e| fail("unmark", dir, &e))?;
    fs::rename(dir, &kept).map_err(|e| fail("keep the audit log of", dir, &e))?;
    prune(logs, KEPT_RUN_LOGS);
    Ok(Some(kept))
}

/// Whether any audit file in `dir` (the log or a rotated one) holds a byte.
fn audited_anything(dir: &Path) -> bool {
    fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with(crate::paths::AUDIT_LOG_FILE)
            && e.metadata().is_ok_and(|m| m.is_file() && m.len() > 0)
    })
}

/// Keeps the `keep` most recently modified directories of `logs`; removes the others. Only
/// real directories of this user are considered (a link is never followed or removed).
fn prune(logs: &Path, keep: usize) {
    let me = rustix::process::geteuid().as_raw();
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(logs)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let m = fs::symlink_metadata(e.path()).ok()?;
            (m.is_dir() && m.uid() == me).then_some((m.modified().ok()?, e.path()))
        })
        .collect();
    if dirs.len() <= keep {
        return;
    }
    dirs.sort();
    let excess = dirs.len() - keep;
    for (_, old) in dirs.into_iter().take(excess) {
        let _ = fs::remove_dir_all(old);
    }
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
    fn a_retired_run_keeps_only_a_non_empty_audit_log_and_at_most_the_newest_logs() {
        let state = tempfile::tempdir().unwrap();
        let runs = runs_root(state.path());
        let logs = run_logs_root(state.path());
        fs::create_dir(&runs).unwrap();
        fs::create_dir(&logs).unwrap();
        let quiet = create_run_dir(&runs, "quiet").unwrap();
        fs::write(quiet.join("audit.jsonl"), b"").unwrap();
        assert_eq!(retire(&quiet, &logs).unwrap(), None);
        assert!(!quiet.exists());
        for i in 0..KEPT_RUN_LOGS + 3 {
            let dir = create_run_dir(&runs, &format!("r{i:02}")).unwrap();
            fs::write(dir.join("audit.jsonl"), b"{}\n").unwrap();
            let kept = retire(&dir, &logs).unwrap().expect("kept");
            assert!(!dir.exists());
            assert!(kept.join("audit.jsonl").exists());
            assert!(!kept.join(OWNER_MARKER).exists());
            // Distinct modification times, oldest first.
            let t =
                std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            fs::File::open(&kept).unwrap().set_modified(t).unwrap();
        }
        let mut left: Vec<String> = fs::read_dir(&logs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), KEPT_RUN_LOGS, "{left:?}");
        assert_eq!(left[0], "r03", "the oldest logs go first: {left:?}");
        assert_eq!(fs::read_dir(&runs).unwrap().count(), 0);
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
