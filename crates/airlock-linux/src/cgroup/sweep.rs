//! Removing sandbox cgroups left behind by an airlock that is gone.
//!
//! A directory under `<base>/airlock/` is removed only when all of these hold:
//! it carries the `user.airlock.owner` mark; the process the mark names is provably gone
//! (`/proc/<pid>` is absent, or its start time differs, so the pid was reused); and its
//! `cgroup.procs` is empty. Anything else is left alone: a cgroup with processes may belong to a
//! persistent sandbox whose airlock command has exited.
use std::path::{Path, PathBuf};

use super::files::read_procs;
use super::{
    hierarchies, writable_by_me, Cgroup, CgroupError, Hierarchy, Layout, OWNER_XATTR, PARENT_DIR,
};

/// The process that owns a sandbox cgroup: pid plus start time (clock ticks since boot, field
/// 22 of `/proc/<pid>/stat`), so a recycled pid never looks like the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerMark {
    pub pid: u32,
    pub start_time: u64,
}

/// Start time from a `/proc/<pid>/stat` text; the command name may contain spaces and `)`.
pub fn start_time_from_stat(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at field 3 (state); start time is field 22.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The state letter (field 3) from a `/proc/<pid>/stat` text.
fn state_from_stat(stat: &str) -> Option<&str> {
    stat[stat.rfind(')')? + 1..].split_whitespace().next()
}

impl OwnerMark {
    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id();
        let start_time = crate::host::own_start_time().unwrap_or(0);
        OwnerMark { pid, start_time }
    }

    pub fn encode(&self) -> String {
        format!("{} {}", self.pid, self.start_time)
    }

    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.trim().split(' ');
        let pid = parts.next()?.parse().ok()?;
        let start_time = parts.next()?.parse().ok()?;
        parts
            .next()
            .is_none()
            .then_some(OwnerMark { pid, start_time })
    }

    /// Whether the owner still runs, judged from a `/proc` tree at `proc_root`. A zombie (a
    /// killed owner its parent has not reaped yet) does not run.
    pub fn is_alive(&self, proc_root: &Path) -> bool {
        match std::fs::read_to_string(proc_root.join(self.pid.to_string()).join("stat")) {
            Ok(stat) => {
                start_time_from_stat(&stat) == Some(self.start_time)
                    && !matches!(state_from_stat(&stat), Some("Z" | "X"))
            }
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    }
}

/// Sweeps the hierarchies this process sees; returns the removed directories.
pub fn sweep_stale() -> Result<Vec<PathBuf>, CgroupError> {
    let layout = Layout::detect().map_err(CgroupError::Detect)?;
    match hierarchies(&layout) {
        Some(hs) => {
            // Every place a sandbox cgroup may live: the hierarchy root and the fallback below
            // or beside our own cgroup.
            let mut all = Vec::new();
            for h in hs {
                if let Some(fallback) = h.fallback.clone() {
                    all.push(Hierarchy {
                        base: fallback,
                        fallback: None,
                        ..h.clone()
                    });
                }
                all.push(Hierarchy {
                    fallback: None,
                    ..h
                });
            }
            sweep_stale_in(&all, Path::new("/proc"))
        }
        None => Ok(Vec::new()),
    }
}

/// Sweeps `<base>/airlock/*` of each hierarchy, judging owners against `proc_root`.
pub fn sweep_stale_in(
    hierarchies: &[Hierarchy],
    proc_root: &Path,
) -> Result<Vec<PathBuf>, CgroupError> {
    let mut removed = Vec::new();
    for h in hierarchies {
        let parent = h.base.join(PARENT_DIR);
        let entries = match std::fs::read_dir(&parent) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(CgroupError::Read {
                    path: parent,
                    source,
                })
            }
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) || !is_stale(&dir, proc_root)? {
                continue;
            }
            match rustix::fs::rmdir(&dir) {
                Ok(()) => removed.push(dir),
                // Busy or gone: a process arrived or someone else swept it; not ours to force.
                Err(
                    rustix::io::Errno::BUSY
                    | rustix::io::Errno::NOENT
                    | rustix::io::Errno::NOTEMPTY,
                ) => {}
                Err(e) => {
                    return Err(CgroupError::Remove {
                        path: dir,
                        source: e.into(),
                    })
                }
            }
        }
    }
    Ok(removed)
}

fn is_stale(dir: &Path, proc_root: &Path) -> Result<bool, CgroupError> {
    if !owner_gone(dir, proc_root) {
        return Ok(false);
    }
    Ok(read_procs(dir)?.is_empty())
}

/// Whether `dir` carries an owner mark naming a process that is provably gone.
fn owner_gone(dir: &Path, proc_root: &Path) -> bool {
    let mut buf = [0u8; 64];
    let Ok(n) = rustix::fs::getxattr(dir, OWNER_XATTR, &mut buf) else {
        return false;
    };
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(OwnerMark::decode)
        .is_some_and(|owner| !owner.is_alive(proc_root))
}

impl Cgroup {
    /// The sandbox cgroup `name` of this user (in the hierarchies [`Cgroup::create`] uses)
    /// when it exists and every directory of it carries an owner mark naming a process that
    /// is provably gone: its owner died without removing it (a persistent sandbox's keeper,
    /// which runs no janitor, killed by SIGKILL). [`Cgroup::destroy`] then kills what is left
    /// in it and removes it. `None` when there is no such cgroup, or when any directory is
    /// unmarked or its owner still runs (not ours to force).
    pub fn orphaned(name: &str) -> Result<Option<Cgroup>, CgroupError> {
        super::validate_name(name)?;
        let layout = Layout::detect().map_err(CgroupError::Detect)?;
        let Some(hs) = hierarchies(&layout) else {
            return Ok(None);
        };
        let mut found = Cgroup {
            name: name.to_owned(),
            hierarchies: Vec::new(),
            dirs: Vec::new(),
        };
        for h in hs.into_iter().map(|h| h.resolve_for_user(writable_by_me)) {
            let dir = h.base.join(PARENT_DIR).join(name);
            if !dir.exists() {
                continue;
            }
            if !owner_gone(&dir, Path::new("/proc")) {
                return Ok(None);
            }
            found.hierarchies.push(h);
            found.dirs.push(dir);
        }
        Ok((!found.dirs.is_empty()).then_some(found))
    }
}
