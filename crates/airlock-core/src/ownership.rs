//! Ownership proofs (PRODUCT R2): nothing is signalled or removed on assumption.
//!
//! - A process is ours only if its pid, its start time (`/proc/PID/stat` field 22) and its
//!   command line all equal a recorded [`ProcessIdentity`]. A zombie counts as gone: it runs
//!   nothing and holds no resources but its pid.
//! - A directory is ours only if it lies under one of our roots (lexically, after the caller
//!   canonicalised the roots), is a real directory (not a symlink) owned by this uid, and holds
//!   a [`MARKER`] file whose content is exactly what the record expects.
//!
//! Anything that fails a proof is *unmanaged*: reported, never touched.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use crate::records::ProcessIdentity;

/// Name of the ownership marker file inside every directory airlock owns.
pub const MARKER: &str = ".airlock-owner";

/// Failures to read a process's identity or write a marker.
#[derive(Debug, thiserror::Error)]
pub enum OwnershipError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not in the format of /proc/PID/stat")]
    StatFormat { path: PathBuf },
    #[error("cannot write ownership marker {path}: {source}")]
    WriteMarker {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The state of a recorded process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Running, and provably the recorded process.
    Ours,
    /// Exited (or a zombie).
    Gone,
    /// The pid is in use by a different process (start time or command line differ).
    Reused,
}

/// Reads the identity of `pid` from `/proc`.
pub fn process_identity(pid: u32) -> Result<ProcessIdentity, OwnershipError> {
    process_identity_in(Path::new("/proc"), pid)
}

/// [`process_identity`] against another `/proc` (tests).
pub fn process_identity_in(proc_root: &Path, pid: u32) -> Result<ProcessIdentity, OwnershipError> {
    let (_, start_time) = read_stat(proc_root, pid)?;
    Ok(ProcessIdentity {
        pid,
        start_time,
        cmdline: read_cmdline(proc_root, pid)?,
    })
}

/// The arguments of `pid` (`/proc/PID/cmdline`, empty for a process that exited).
fn read_cmdline(proc_root: &Path, pid: u32) -> Result<Vec<String>, OwnershipError> {
    let path = proc_root.join(pid.to_string()).join("cmdline");
    let raw = read_proc_file(&path).map_err(|source| OwnershipError::Read { path, source })?;
    Ok(raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect())
}

/// State character (field 3) and start time (field 22) of `pid`.
fn read_stat(proc_root: &Path, pid: u32) -> Result<(char, u64), OwnershipError> {
    let path = proc_root.join(pid.to_string()).join("stat");
    let raw = read_proc_file(&path).map_err(|source| OwnershipError::Read {
        path: path.clone(),
        source,
    })?;
    std::str::from_utf8(&raw)
        .ok()
        .and_then(parse_stat)
        .ok_or(OwnershipError::StatFormat { path })
}

/// Reads a `/proc` file whole. It reports size 0, so `fs::read` would ask for the size
/// (statx), then probe with 32 bytes and double the buffer (six reads of a `stat` line, each a
/// pass over the process); 1 KiB takes a `stat` line or a usual command line in one read, and
/// the next one sees the end. Longer files still come whole (the buffer grows).
fn read_proc_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut raw = Vec::with_capacity(1024);
    fs::File::open(path)?.take(u64::MAX).read_to_end(&mut raw)?;
    Ok(raw)
}

/// Parses state and start time from a `stat` line. The command name (field 2) may contain
/// spaces and parentheses, so fields are counted after its *last* `)`.
pub fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3), field 22 is the 19th.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Proves whether the recorded process is still the one running under its pid.
pub fn check_process(expected: &ProcessIdentity) -> Liveness {
    check_process_in(Path::new("/proc"), expected)
}

/// [`check_process`] against another `/proc` (tests).
pub fn check_process_in(proc_root: &Path, expected: &ProcessIdentity) -> Liveness {
    let Ok((state, start)) = read_stat(proc_root, expected.pid) else {
        return Liveness::Gone;
    };
    if start != expected.start_time {
        return Liveness::Reused;
    }
    if matches!(state, 'Z' | 'X' | 'x') {
        return Liveness::Gone;
    }
    // The start time was read above; reading `stat` again here added nothing to the proof.
    match read_cmdline(proc_root, expected.pid) {
        Ok(cmdline) if cmdline == expected.cmdline => Liveness::Ours,
        // A process that exited between the two reads has an empty command line.
        Ok(cmdline) if cmdline.is_empty() => Liveness::Gone,
        Ok(_) => Liveness::Reused,
        Err(_) => Liveness::Gone,
    }
}

/// What a directory proof found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirOwnership {
    Ours,
    Absent,
    /// Present but not provably ours; the reason is for the user.
    Unmanaged {
        reason: String,
    },
}

/// Writes the marker into `dir` (0600, replacing an older one).
pub fn write_marker(dir: &Path, content: &str) -> Result<(), OwnershipError> {
    let path = dir.join(MARKER);
    let err = |source| OwnershipError::WriteMarker {
        path: path.clone(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(err)?;
    io::Write::write_all(&mut f, content.as_bytes()).map_err(err)
}

/// Proves `dir` is ours: under one of `roots`, a real directory of this uid, marker equal to
/// `expected`.
pub fn check_dir(dir: &Path, roots: &[&Path], expected: &str) -> DirOwnership {
    let unmanaged = |reason: &str| DirOwnership::Unmanaged {
        reason: reason.to_owned(),
    };
    let lexical = dir.components().all(|c| !matches!(c, Component::ParentDir));
    if !lexical || !roots.iter().any(|r| dir.starts_with(r) && dir != *r) {
        return unmanaged("it is not under airlock's state or runtime roots");
    }
    let meta = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return DirOwnership::Absent,
        Err(_) => return unmanaged("it cannot be inspected"),
    };
    if !meta.is_dir() {
        return unmanaged("it is not a directory (or is a symbolic link)");
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return unmanaged("it belongs to another user");
    }
    match fs::read_to_string(dir.join(MARKER)) {
        Ok(text) if text == expected => DirOwnership::Ours,
        Ok(_) => unmanaged("its ownership marker names another sandbox or epoch"),
        Err(_) => unmanaged("it carries no ownership marker"),
    }
}

/// Total size in bytes of the regular files under `dir` (not following links).
pub fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            total += disk_usage(&entry.path());
        } else if meta.is_file() {
            total += meta.blocks() * 512;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "42 (a) b) (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1 2 3";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_proven_and_a_changed_start_time_is_a_reused_pid() {
        let me = process_identity(std::process::id()).unwrap();
        assert_eq!(check_process(&me), Liveness::Ours);
        let mut other = me.clone();
        other.start_time += 1;
        assert_eq!(check_process(&other), Liveness::Reused);
        let mut renamed = me;
        renamed.cmdline.push("--other".into());
        assert_eq!(check_process(&renamed), Liveness::Reused);
    }

    #[test]
    fn the_proof_compares_start_time_state_and_command_line_of_a_fake_proc() {
        let proc_root = tempfile::tempdir().unwrap();
        let dir = proc_root.path().join("7");
        fs::create_dir_all(&dir).unwrap();
        let stat = |state: char, start: u64| {
            let line = format!("7 (exe) {state} 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1 2");
            fs::write(dir.join("stat"), line).unwrap();
        };
        let cmdline = |args: &[u8]| fs::write(dir.join("cmdline"), args).unwrap();
        let expected = ProcessIdentity {
            pid: 7,
            start_time: 100,
            cmdline: vec!["/proc/self/exe".into(), "__keeper".into()],
        };
        let check = || check_process_in(proc_root.path(), &expected);
        stat('S', 100);
        cmdline(b"/proc/self/exe\0__keeper\0");
        assert_eq!(check(), Liveness::Ours);
        assert_eq!(process_identity_in(proc_root.path(), 7).unwrap(), expected);
        cmdline(b"/proc/self/exe\0__init\0");
        assert_eq!(check(), Liveness::Reused, "another command line");
        cmdline(b"");
        assert_eq!(check(), Liveness::Gone, "exited between the reads");
        cmdline(b"/proc/self/exe\0__keeper\0");
        stat('S', 101);
        assert_eq!(check(), Liveness::Reused, "another start time");
        stat('Z', 100);
        assert_eq!(check(), Liveness::Gone, "a zombie");
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(check(), Liveness::Gone, "no such pid");
    }

    #[test]
    fn directories_without_marker_or_outside_roots_are_unmanaged() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("sb");
        fs::create_dir_all(&dir).unwrap();
        assert!(matches!(
            check_dir(&dir, &[&root], "x"),
            DirOwnership::Unmanaged { .. }
        ));
        write_marker(&dir, "x").unwrap();
        assert_eq!(check_dir(&dir, &[&root], "x"), DirOwnership::Ours);
        assert!(matches!(
            check_dir(&dir, &[&root], "y"),
            DirOwnership::Unmanaged { .. }
        ));
        assert!(matches!(
            check_dir(&dir, &[tmp.path().join("elsewhere").as_path()], "x"),
            DirOwnership::Unmanaged { .. }
        ));
        let link = root.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(matches!(
            check_dir(&link, &[&root], "x"),
            DirOwnership::Unmanaged { .. }
        ));
        assert_eq!(
            check_dir(&root.join("gone"), &[&root], "x"),
            DirOwnership::Absent
        );
    }
}
