//! Entries others may not read under the image's wide system directories (`/usr`, and `/bin`,
//! `/sbin`, `/lib*` where they are real directories), found by one walk and cached
//! (issue 9.5a; docs/security.md, "Root filesystem").
//!
//! A root invoker's `--root` owns the id-mapped system files, so only a mask keeps it from
//! reading a file there that the host gives others no read permission on. `/etc` and `/opt`
//! are walked at every start (small, and where hosts keep secrets); `/usr` holds ~130,000
//! entries and a walk takes ~0.5 s, so its result is kept in a cache file in the runtime root
//! (root's own, not reachable from any sandbox; gone at reboot) and reused while:
//! - it is younger than [`VALIDITY`] (and not from the future: a clock set back expires it);
//! - every walked top directory is the same inode with the same mtime and ctime (a replaced or
//!   remounted `/usr`, an entry added or removed directly in it);
//! - every package database is unchanged (dpkg, rpm, pacman, apk: installing or upgrading
//!   packages is how files usually arrive under `/usr`).
//!
//! What no cheap key can see: a `chmod` in place changes only the file's own ctime, and a file
//! created deep in the tree changes only its parent directory. Proving neither happened takes
//! the walk itself (a stat of all 15,000 directories alone costs tens of milliseconds), so such
//! a change is masked from the first start after the cache expires, at most [`VALIDITY`]
//! later. docs/security.md lists this as a limitation.
//!
//! Any doubt is a miss: an unreadable, oversized, foreign or malformed cache file is ignored
//! and replaced. Failing to write the cache costs the next start a walk, nothing else.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{walk_top, IdMountError, Unreadable};

/// The directories this module walks (a top that is a symbolic link is skipped: the image
/// recreates it as the same link, into a walked directory).
pub const WIDE: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// How long a walk is trusted when none of the keys changed.
pub const VALIDITY: Duration = Duration::from_secs(600);

/// Package databases: a change to any of them expires the cache at once.
const PACKAGE_DATABASES: &[&str] = &[
    "/var/lib/dpkg/status",
    "/var/lib/dpkg/info",
    "/var/lib/rpm",
    "/var/lib/pacman/local",
    "/lib/apk/db/installed",
];

/// Name of the cache file in the runtime root.
pub const CACHE_FILE: &str = "unreadable-scan.json";

/// Largest cache file read (a host with more hidden entries than fit is walked every time).
const CACHE_MAX: u64 = 4 << 20;

const FORMAT: u32 = 1;

/// What identifies one key path's state: absent, or its inode, type and times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    path: PathBuf,
    present: Option<[i64; 7]>,
}

fn stamp(path: &Path) -> Stamp {
    let present = fs::symlink_metadata(path).ok().map(|m| {
        [
            m.dev() as i64,
            m.ino() as i64,
            i64::from(m.mode()),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        ]
    });
    Stamp {
        path: path.to_path_buf(),
        present,
    }
}

fn stamps() -> Vec<Stamp> {
    WIDE.iter()
        .chain(PACKAGE_DATABASES)
        .map(|p| stamp(Path::new(p)))
        .collect()
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    format: u32,
    /// When the walk began, in nanoseconds since the epoch.
    walked_at_ns: u128,
    stamps: Vec<Stamp>,
    found: Vec<Unreadable>,
}

fn epoch_ns(t: SystemTime) -> Option<u128> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_nanos())
}

/// Every entry under [`WIDE`] others may not read: from `cache` when it is still valid at
/// `now`, else by walking (and then written to `cache`). `None`: always walk.
pub fn wide_unreadable(
    cache: Option<&Path>,
    now: SystemTime,
) -> Result<Vec<Unreadable>, IdMountError> {
    let current = stamps();
    if let Some(found) = cache.and_then(|c| cached(c, &current, now)) {
        return Ok(found);
    }
    let mut found = Vec::new();
    for top in WIDE {
        walk_top(Path::new(top), &mut found)?;
    }
    if let (Some(cache), Some(walked_at_ns)) = (cache, epoch_ns(now)) {
        let file = CacheFile {
            format: FORMAT,
            walked_at_ns,
            stamps: current,
            found: found.clone(),
        };
        // Best effort: a cache that cannot be written costs the next start a walk.
        let _ = store(cache, &file);
    }
    Ok(found)
}

/// The cached entries, if the cache at `path` is valid for `current` at `now`.
fn cached(path: &Path, current: &[Stamp], now: SystemTime) -> Option<Vec<Unreadable>> {
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // Root's own regular file, writable by nobody else (the runtime root is root's 0700).
    if !meta.is_file() || meta.uid() != rustix::process::geteuid().as_raw() {
        return None;
    }
    if meta.mode() & 0o022 != 0 || meta.len() > CACHE_MAX {
        return None;
    }
    let mut bytes = Vec::new();
    file.by_ref()
        .take(CACHE_MAX + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let cache: CacheFile = serde_json::from_slice(&bytes).ok()?;
    let age = epoch_ns(now)?.checked_sub(cache.walked_at_ns)?;
    let fresh = age < VALIDITY.as_nanos();
    (cache.format == FORMAT && fresh && cache.stamps == current).then_some(cache.found)
}

/// Writes `cache` next to `path` and renames it into place (readers see the old or the new).
fn store(path: &Path, cache: &CacheFile) -> std::io::Result<()> {
    use std::io::Write;
    let bytes = serde_json::to_vec(cache).map_err(std::io::Error::other)?;
    let tmp = path.with_file_name(format!(".{CACHE_FILE}.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = f.write_all(&bytes).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> Unreadable {
        Unreadable {
            path: PathBuf::from(path),
            dir: false,
        }
    }

    fn write(path: &Path, walked_at: SystemTime, stamps: Vec<Stamp>, found: Vec<Unreadable>) {
        let file = CacheFile {
            format: FORMAT,
            walked_at_ns: epoch_ns(walked_at).unwrap(),
            stamps,
            found,
        };
        store(path, &file).unwrap();
    }

    /// The cache answers only while it is fresh and every key is unchanged; anything else is a
    /// miss, so a stale list can never hide that an entry became unreadable for longer than
    /// [`VALIDITY`].
    #[test]
    fn the_cached_walk_is_used_only_while_fresh_and_every_key_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join(CACHE_FILE);
        let now = SystemTime::now();
        let current = stamps();
        let marker = vec![entry("/usr/cached-marker")];
        write(&cache, now, current.clone(), marker.clone());
        assert_eq!(cached(&cache, &current, now), Some(marker.clone()));
        let later = now + VALIDITY - Duration::from_secs(1);
        assert_eq!(cached(&cache, &current, later), Some(marker.clone()));
        // Expired, or written in the future (clock set back).
        assert_eq!(cached(&cache, &current, now + VALIDITY), None);
        assert_eq!(cached(&cache, &current, now - Duration::from_secs(1)), None);
        // A package database or a top directory changed.
        for i in 0..current.len() {
            let mut changed = current.clone();
            changed[i].present = match changed[i].present {
                Some(mut s) => {
                    s[5] += 1;
                    Some(s)
                }
                None => Some([0; 7]),
            };
            assert_eq!(cached(&cache, &changed, now), None, "{:?}", changed[i].path);
        }
        // Writable by others: not trusted.
        fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
        assert_eq!(cached(&cache, &current, now), None);
        // Not JSON, or a symbolic link.
        fs::write(&cache, b"{").unwrap();
        assert_eq!(cached(&cache, &current, now), None);
        let link = dir.path().join("link.json");
        write(&cache, now, current.clone(), marker);
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        assert_eq!(cached(&link, &current, now), None);
    }

    /// A miss walks and stores the walk; the next start within the validity reads it back
    /// instead of walking.
    #[test]
    fn a_miss_walks_and_the_next_start_reuses_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join(CACHE_FILE);
        let now = SystemTime::now();
        let walked = wide_unreadable(Some(&cache), now).unwrap();
        let stored = cached(&cache, &stamps(), now).expect("the walk was stored");
        assert_eq!(stored, walked);
        // The stored list is what is answered (a marker proves no second walk happened).
        let mut marked = walked.clone();
        marked.push(entry("/usr/cached-marker"));
        write(&cache, now, stamps(), marked.clone());
        assert_eq!(wide_unreadable(Some(&cache), now).unwrap(), marked);
    }
}
