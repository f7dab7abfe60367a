//! Where airlock keeps its files: the per-user roots created as private directories, and the
//! name of every state and runtime file airlock writes (one place, so a newcomer finds them
//! all here).

use std::path::{Path, PathBuf};

use airlock_config::Roots;
use airlock_core::records::SandboxPaths;
use airlock_core::DirPresence;

use crate::error::HostError;

/// The audit log's file name inside a sandbox's state directory (and a run's directory).
pub const AUDIT_LOG_FILE: &str = "audit.jsonl";

/// In a persistent sandbox's state directory: the keeper's start request (written by `up`).
pub const START_FILE: &str = "start.json";
/// In a persistent sandbox's state directory: the keeper's log (its stderr, then its stdout).
pub const LOG_FILE: &str = "keeper.log";
/// In a persistent sandbox's state directory: why its keeper stopped, for `status`.
pub const EXIT_NOTE: &str = "exit-note";
/// In a persistent sandbox's state directory: what the sandbox runs without (limits the keeper
/// had to skip), one warning a line, for `up` and `status`.
pub const START_WARNINGS: &str = "start-warnings";
/// In a persistent sandbox's runtime directory: the keeper's control socket.
pub const SOCKET: &str = "control.sock";
/// In a persistent sandbox's runtime directory: its egress directory.
pub const EGRESS_DIR: &str = "egress";

/// In an egress directory: the proxy's socket.
pub const PROXY_SOCKET: &str = "proxy.sock";
/// In an egress directory: the interception CA's public certificate.
pub const CA_CERT: &str = "ca.crt";
/// In an egress directory: the image's system bundle plus [`CA_CERT`].
pub const CA_BUNDLE: &str = "ca-bundle.crt";

/// In an egress directory: the connector socket of host loopback port `port` (N10).
pub fn port_socket(port: u16) -> String {
    format!("port-{port}.sock")
}

/// Where the per-installation interception CA lives (shared by every sandbox of the user).
pub fn ca_dir(data_root: &Path) -> PathBuf {
    data_root.join("proxy-ca")
}

/// `<state>/runs`: the state of `run`s in progress (see `lifecycle::runs`).
pub fn runs_root(state_root: &Path) -> PathBuf {
    state_root.join("runs")
}

/// `<state>/run-logs`: the audit logs kept of finished `run`s.
pub fn run_logs_root(state_root: &Path) -> PathBuf {
    state_root.join("run-logs")
}

/// Where the keeper writes, and `policy log` reads, the audit log of a sandbox.
pub fn audit_log_path(paths: &SandboxPaths) -> PathBuf {
    paths.state_dir.join(AUDIT_LOG_FILE)
}

/// The audit log of sandbox `name` as its record names it; `None` when there is no record.
pub fn recorded_audit_log(
    roots: &Roots,
    name: &airlock_core::names::SandboxName,
) -> Result<Option<PathBuf>, HostError> {
    let stores = airlock_core::lifecycle::Stores::open(&roots.state)?;
    Ok(stores
        .record(name)?
        .map(|record| audit_log_path(&record.data.paths)))
}

/// Creates `dir` — one of airlock's roots (`~/.config/airlock`) or a directory below one — as
/// a private 0700 directory, checking every component from the XDG base directory down: the
/// airlock root and everything below it must be real directories, owned by the user and not
/// writable by others. The XDG base itself (`~/.config`) is the anchor: created with default
/// permissions when missing, like any XDG base, and not held to that rule (with private user
/// groups, `umask 002`, a group-writable `~/.config` is normal).
pub fn ensure_root(roots: &Roots, dir: &Path) -> Result<(), HostError> {
    let base = anchor_for(roots, dir);
    std::fs::create_dir_all(&base).map_err(|e| {
        HostError::internal("dir.io", format!("cannot create {}: {e}", base.display()))
            .with_hint("check the permissions of that directory")
    })?;
    airlock_core::ensure_private_dir(dir, &base)?;
    Ok(())
}

/// Verifies `dir` like [`ensure_root`] (same anchor, same rule) without creating anything, for
/// read-only commands; a missing XDG base means nothing below it exists either.
pub fn check_root(roots: &Roots, dir: &Path) -> Result<DirPresence, HostError> {
    let base = anchor_for(roots, dir);
    if !base.exists() {
        return Ok(DirPresence::Absent);
    }
    Ok(airlock_core::check_private_dir(dir, &base)?)
}

/// The XDG base above the outermost airlock root containing `dir` (so `<state>/run`, the
/// runtime fallback, is checked from `$XDG_STATE_HOME` down); `dir`'s parent otherwise.
fn anchor_for(roots: &Roots, dir: &Path) -> PathBuf {
    roots
        .own_roots()
        .into_iter()
        .filter(|r| dir.starts_with(r))
        .min_by_key(|r| r.components().count())
        .unwrap_or(dir)
        .parent()
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Roots {
        // The disk fallback of the runtime root, not this machine's tmpfs.
        Roots::from_env_with(
            |k| match k {
                "HOME" => Some("/home/ana".into()),
                _ => None,
            },
            || None,
        )
        .unwrap()
    }

    #[test]
    fn each_root_is_anchored_at_its_xdg_base() {
        let r = roots();
        assert_eq!(anchor_for(&r, &r.config), Path::new("/home/ana/.config"));
        assert_eq!(
            anchor_for(&r, &r.state),
            Path::new("/home/ana/.local/state")
        );
    }

    #[test]
    fn runtime_fallback_below_state_is_checked_from_the_state_base() {
        let r = roots();
        assert!(r.runtime.starts_with(&r.state));
        assert_eq!(
            anchor_for(&r, &r.runtime),
            Path::new("/home/ana/.local/state")
        );
    }

    #[test]
    fn checking_a_root_holds_it_to_the_rule_but_not_its_xdg_base() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let r =
            Roots::from_env_with(|k| (k == "HOME").then(|| home.path().into()), || None).unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        assert_eq!(check_root(&r, &r.state).unwrap(), DirPresence::Absent);
        std::fs::create_dir_all(&r.state).unwrap();
        mode(r.state.parent().unwrap(), 0o775);
        mode(&r.state, 0o700);
        assert_eq!(check_root(&r, &r.state).unwrap(), DirPresence::Present);
        mode(&r.state, 0o770);
        assert!(check_root(&r, &r.state).is_err());
    }

    #[test]
    fn directories_below_a_root_share_its_anchor() {
        let r = roots();
        let sub = r.state.join("sandboxes/demo");
        assert_eq!(anchor_for(&r, &sub), Path::new("/home/ana/.local/state"));
    }
}
