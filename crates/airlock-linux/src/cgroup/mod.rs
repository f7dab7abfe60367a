//! Resource limits (PRODUCT I8) through cgroups: v2 where memory, pids and cpu are delegated
//! to us, else v1 hierarchies mounted per controller (as on hosts with a hybrid layout).
//!
//! Layout on disk: `<base>/airlock/<sandbox-name>` in every hierarchy used, where `<base>` is
//! chosen by [`base_dirs`]. Every directory airlock creates carries the extended attribute
//! `user.airlock.owner = "<pid> <starttime>"` naming the process that owns it (the janitor
//! takes ownership over from airlock, see below); the `airlock` parent carries
//! `user.airlock = "parent"`. Nothing without these markers is ever removed.
//!
//! Order of operations for a sandbox:
//! 1. [`Cgroup::create`]: parent (`mkdir`, v2: enable controllers in `cgroup.subtree_control`
//!    of the base and of the parent), then the sandbox directory, then limits (memory before
//!    memory+swap on v1, because the kernel requires `memsw >= limit`). Any failure removes
//!    what was created and returns the error; a base we may not write to is
//!    [`CgroupError::NotDelegated`], so the runtime can skip *default* limits with a warning
//!    naming `airlock doctor` and refuse *explicit* ones.
//! 2. [`Cgroup::spawn_janitor`]: a `setsid` child holding the read end of a pipe; when airlock
//!    exits for any reason (including SIGKILL) the pipe reaches EOF and the janitor kills what
//!    is left in the cgroup, waits until it is empty (bounded) and removes it.
//! 3. The sandbox's first process joins before it runs sandbox code: the parent opens the
//!    join files ([`Cgroup::join_fds`]) and the forked child writes `0` to them before its exec
//!    ([`crate::sys::fd::join_before_exec`]), so no start waits on the kernel's threadgroup lock.
//! 4. [`Cgroup::destroy`]: kill (`cgroup.kill` on v2, pidfd-checked `SIGKILL` loop on v1),
//!    wait for `cgroup.procs` to empty, `rmdir`, all within a deadline.
//!
//! [`sweep_stale`] removes empty sandbox cgroups whose owner process is provably gone.
pub mod detect;
mod files;
mod sweep;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use detect::{Controller, Layout};
pub use files::{limit_writes, LimitWrite};
pub use sweep::{sweep_stale, sweep_stale_in, OwnerMark};

use crate::sys::janitor::{self, Janitor};

/// Name of the parent directory airlock owns in every hierarchy.
pub const PARENT_DIR: &str = "airlock";
/// Extended attribute naming the owner process of a sandbox cgroup.
pub const OWNER_XATTR: &str = "user.airlock.owner";
/// Extended attribute marking the `airlock` parent directory.
pub const PARENT_XATTR: &str = "user.airlock";

/// Errors of cgroup management; each names the path that failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot read the cgroup layout of this process: {0}")]
    Detect(#[source] std::io::Error),
    #[error(
        "no cgroup hierarchy offers the memory, pids and cpu controllers (see `airlock doctor`)"
    )]
    NoControllers,
    #[error("this user may not create cgroups in {path} (not delegated to it): {source}")]
    NotDelegated {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "invalid sandbox cgroup name {name:?}: use 1-64 of [A-Za-z0-9._-], not starting with '.'"
    )]
    InvalidName { name: String },
    #[error("cgroup {path} already exists")]
    AlreadyExists { path: PathBuf },
    #[error("cannot create cgroup {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cgroup {path} still holds processes after {waited:?}")]
    StillBusy { path: PathBuf, waited: Duration },
    #[error("cannot remove cgroup {path}: {source}")]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the cgroup janitor: {source}")]
    Janitor { source: std::io::Error },
}

/// The limits to apply; `None` leaves that resource unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CgroupLimits {
    pub memory_bytes: Option<u64>,
    pub pids_max: Option<u64>,
    /// CPU bandwidth in CPUs (1.5 = one and a half CPUs' worth of time per period).
    pub cpus: Option<f64>,
}

/// One hierarchy a sandbox cgroup lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Where the `airlock` parent directory is created. Preferably the hierarchy's root: the
    /// same for every session of every user, so any later airlock command (`status`, `down`,
    /// `clean`) finds a sandbox's cgroup no matter which login session or service cgroup it
    /// runs in.
    pub base: PathBuf,
    /// Controllers this hierarchy provides (v1: the controllers of its mount; v2: all three).
    pub controllers: Vec<Controller>,
    pub v2: bool,
    /// Used instead of `base` when this user may not create cgroups there: on v2 the parent of
    /// our own cgroup (a delegated subtree such as systemd's `user@.service`; the "no internal
    /// processes" rule forbids controllers below a cgroup holding processes, so sandboxes are
    /// siblings of our own cgroup), on v1 our own cgroup.
    pub fallback: Option<PathBuf>,
}

impl Hierarchy {
    /// Picks where this user creates sandbox cgroups: `base` when it (or its `airlock`
    /// directory, delegated by an administrator) is writable, else `fallback` when that is,
    /// else `base` (whose `mkdir` then fails as not delegated, naming the stable place the fix
    /// of `airlock doctor` delegates).
    pub fn resolve_for_user(mut self, writable: impl Fn(&Path) -> bool) -> Hierarchy {
        let usable = |dir: &Path| writable(dir) || writable(&dir.join(PARENT_DIR));
        if !usable(&self.base) {
            if let Some(fallback) = self.fallback.take() {
                if usable(&fallback) {
                    self.base = fallback;
                }
            }
        }
        self.fallback = None;
        self
    }
}

/// Whether this process may create entries in `dir` (`access(W_OK|X_OK)`).
pub fn writable_by_me(dir: &Path) -> bool {
    rustix::fs::access(
        dir,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .is_ok()
}

/// Directories in which this process's sandbox cgroups live (the `airlock` parent is below
/// each), one per hierarchy used, resolved for this user exactly as [`Cgroup::create`] does;
/// `None` when no hierarchy offers memory, pids and cpu.
pub fn base_dirs(layout: &Layout) -> Option<Vec<PathBuf>> {
    hierarchies(layout).map(|hs| {
        hs.into_iter()
            .map(|h| h.resolve_for_user(writable_by_me).base)
            .collect()
    })
}

/// The hierarchies a sandbox cgroup is created in, v2 preferred, before resolving for the
/// user (see [`Hierarchy::resolve_for_user`]).
pub fn hierarchies(layout: &Layout) -> Option<Vec<Hierarchy>> {
    if let (Some(v2), true) = (&layout.v2, layout.v2_missing().is_empty()) {
        let sibling = v2.own_dir.parent().map(PathBuf::from);
        return Some(vec![Hierarchy {
            base: v2.mount_point.clone(),
            controllers: Controller::ALL.to_vec(),
            v2: true,
            fallback: sibling.filter(|_| v2.own_dir != v2.mount_point),
        }]);
    }
    if !layout.v1_missing().is_empty() {
        return None;
    }
    let mut out: Vec<Hierarchy> = Vec::new();
    for m in &layout.v1 {
        match out.iter_mut().find(|h| h.base == m.mount_point) {
            Some(h) => h.controllers.push(m.controller),
            None => out.push(Hierarchy {
                base: m.mount_point.clone(),
                controllers: vec![m.controller],
                v2: false,
                fallback: (m.own_dir != m.mount_point).then(|| m.own_dir.clone()),
            }),
        }
    }
    Some(out)
}

/// Open descriptors of the files through which a freshly forked, single-threaded child moves
/// itself into a sandbox's cgroup before its `execve` (see [`crate::sys::fd::join_before_exec`]),
/// or a single-threaded init stage right after it (`init.rs`, when `run` made the cgroup while
/// it exec'd):
/// v1 `tasks`, v2 `cgroup.procs`, one per hierarchy, opened here by the parent (the kernel checks
/// the opener's credentials).
///
/// Why the child and `tasks`: a parent writing the child's pid to `cgroup.procs` takes the
/// kernel's global threadgroup lock, whose write side waits for an RCU grace period (0.03 ms to
/// 12 ms, measured) unless the hierarchy is mounted with `favordynmods`; a thread writing `0`
/// to a v1 `tasks` file moves only itself and skips that lock. On v2, `cgroup.procs` is the
/// only file a domain cgroup accepts, so there the wait remains without `favordynmods` (see
/// `airlock doctor`).
#[derive(Debug)]
pub struct JoinFds {
    fds: Vec<OwnedFd>,
    paths: Vec<PathBuf>,
}

impl JoinFds {
    /// The raw descriptors, for the pre-exec hook (valid while `self` lives).
    pub fn raw(&self) -> Vec<RawFd> {
        self.fds.iter().map(|f| f.as_raw_fd()).collect()
    }

    /// The descriptors, to pass to a process that joins by itself (the init stage of `run`).
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::BorrowedFd<'_>> {
        self.fds.iter().map(std::os::fd::AsFd::as_fd)
    }

    /// Duplicates of the descriptors (`F_DUPFD_CLOEXEC`: the same open files), for a second
    /// child that joins the same cgroup.
    pub fn try_clone(&self) -> std::io::Result<JoinFds> {
        Ok(JoinFds {
            fds: self
                .fds
                .iter()
                .map(OwnedFd::try_clone)
                .collect::<std::io::Result<_>>()?,
            paths: self.paths.clone(),
        })
    }

    /// The files, for error messages (same order as [`JoinFds::raw`]).
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

/// The file a thread writes `0` to, to join the cgroup `dir` of `h` (see [`JoinFds`]).
pub fn join_file(h: &Hierarchy, dir: &Path) -> PathBuf {
    dir.join(if h.v2 { "cgroup.procs" } else { "tasks" })
}

/// Checks a sandbox cgroup name: 1-64 of `[A-Za-z0-9._-]`, not starting with `.`.
pub fn validate_name(name: &str) -> Result<(), CgroupError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidName {
            name: name.to_owned(),
        })
    }
}

/// A sandbox's cgroup in every hierarchy used. Not removed on drop: call [`Cgroup::destroy`]
/// (and keep a [`Janitor`] for the case where airlock dies first, or let whoever finds it
/// orphaned remove it: [`Cgroup::orphaned`]).
#[derive(Debug)]
pub struct Cgroup {
    name: String,
    hierarchies: Vec<Hierarchy>,
    dirs: Vec<PathBuf>,
}

fn is_permission(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EACCES | libc::EPERM | libc::EROFS)
    )
}

impl Cgroup {
    /// Creates `name` with `limits` in the hierarchies this process can see.
    pub fn create(name: &str, limits: &CgroupLimits) -> Result<Cgroup, CgroupError> {
        let layout = Layout::detect().map_err(CgroupError::Detect)?;
        let hierarchies = hierarchies(&layout).ok_or(CgroupError::NoControllers)?;
        let resolved = hierarchies
            .into_iter()
            .map(|h| h.resolve_for_user(writable_by_me))
            .collect();
        Self::create_in(resolved, name, limits)
    }

    /// Creates `name` in the given hierarchies (injectable for tests).
    pub fn create_in(
        hierarchies: Vec<Hierarchy>,
        name: &str,
        limits: &CgroupLimits,
    ) -> Result<Cgroup, CgroupError> {
        validate_name(name)?;
        let mut cgroup = Cgroup {
            name: name.to_owned(),
            hierarchies,
            dirs: Vec::new(),
        };
        if let Err(err) = cgroup.build(limits) {
            cgroup.remove_dirs_now();
            return Err(err);
        }
        Ok(cgroup)
    }

    fn build(&mut self, limits: &CgroupLimits) -> Result<(), CgroupError> {
        let owner = OwnerMark::current().encode();
        for h in self.hierarchies.clone() {
            let dir = create_sandbox_dir(&h, &self.name)?;
            self.dirs.push(dir.clone());
            // Marking is best effort only for filesystems without user xattrs; the owner
            // mark is what makes `sweep_stale` willing to remove the directory.
            let _ = rustix::fs::setxattr(
                &dir,
                OWNER_XATTR,
                owner.as_bytes(),
                rustix::fs::XattrFlags::empty(),
            );
        }
        for (hierarchy, dir) in self.hierarchies.iter().zip(&self.dirs) {
            for write in limit_writes(hierarchy, limits, |f| dir.join(f).exists()) {
                files::write_control(&dir.join(write.file), &write.value)?;
            }
        }
        Ok(())
    }

    /// The sandbox's directories, one per hierarchy.
    pub fn paths(&self) -> &[PathBuf] {
        &self.dirs
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Opens the files through which a child joins this cgroup before its exec (see
    /// [`JoinFds`]); the child's hook is [`crate::sys::fd::join_before_exec`].
    pub fn join_fds(&self) -> Result<JoinFds, CgroupError> {
        let mut out = JoinFds {
            fds: Vec::new(),
            paths: Vec::new(),
        };
        for (h, dir) in self.hierarchies.iter().zip(&self.dirs) {
            let path = join_file(h, dir);
            let fd = rustix::fs::open(
                &path,
                rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| CgroupError::Write {
                path: path.clone(),
                value: "0".to_owned(),
                source: e.into(),
            })?;
            out.fds.push(fd);
            out.paths.push(path);
        }
        Ok(out)
    }

    /// Moves `pid` (and, on v2 and v1 alike, its future children) into the cgroup. Slow
    /// without `favordynmods` (an RCU grace period): a child about to exec joins through
    /// [`Cgroup::join_fds`] instead.
    pub fn add_pid(&self, pid: u32) -> Result<(), CgroupError> {
        for dir in &self.dirs {
            files::write_control(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Pids currently in the cgroup (union over hierarchies).
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        let mut all = Vec::new();
        for dir in &self.dirs {
            for pid in files::read_procs(dir)? {
                if !all.contains(&pid) {
                    all.push(pid);
                }
            }
        }
        Ok(all)
    }

    /// Number of OOM kills inside the cgroup so far (v2 `memory.events`, v1 `memory.oom_control`).
    pub fn oom_kills(&self) -> Result<u64, CgroupError> {
        for (h, dir) in self.hierarchies.iter().zip(&self.dirs) {
            if h.controllers.contains(&Controller::Memory) {
                let file = if h.v2 {
                    "memory.events"
                } else {
                    "memory.oom_control"
                };
                let path = dir.join(file);
                let text = std::fs::read_to_string(&path)
                    .map_err(|source| CgroupError::Read { path, source })?;
                return Ok(files::parse_key_value(&text, "oom_kill").unwrap_or(0));
            }
        }
        Ok(0)
    }

    /// Starts the janitor that removes this cgroup when the returned handle's pipe closes
    /// (dropped, or airlock killed).
    pub fn spawn_janitor(&self, grace: Duration) -> Result<Janitor, CgroupError> {
        janitor::spawn(&self.dirs, grace).map_err(|source| CgroupError::Janitor { source })
    }

    /// Kills every process in the cgroup and removes it, within `timeout`.
    ///
    /// An `rmdir` comes first: the kernel refuses it (`EBUSY`) while a process is in the
    /// cgroup, so it is its own emptiness check. At the end of a `run` everything in it has
    /// already been reaped, and the usual case costs no read of `cgroup.procs` per hierarchy;
    /// only a cgroup that is still busy has its members killed, then removed.
    pub fn destroy(self, timeout: Duration) -> Result<(), CgroupError> {
        let deadline = Instant::now() + timeout;
        let mut busy = Vec::new();
        for dir in &self.dirs {
            match rustix::fs::rmdir(dir) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(_) => busy.push(dir.clone()),
            }
        }
        if !busy.is_empty() {
            kill_all(&self.hierarchies, &self.dirs, deadline)?;
            for dir in &busy {
                remove_dir(dir, deadline)?;
            }
        }
        for h in &self.hierarchies {
            // Best effort: succeeds only when no other sandbox uses the parent; a concurrent
            // `create` retries its mkdir when the parent vanishes under it.
            let _ = rustix::fs::rmdir(h.base.join(PARENT_DIR));
        }
        Ok(())
    }

    fn remove_dirs_now(&self) {
        for dir in &self.dirs {
            let _ = rustix::fs::rmdir(dir);
        }
    }
}

/// `mkdir` of the parent (marking it) and of the sandbox directory; retried when a concurrent
/// `destroy` removed an empty parent between the two steps.
fn create_sandbox_dir(h: &Hierarchy, name: &str) -> Result<PathBuf, CgroupError> {
    let parent = h.base.join(PARENT_DIR);
    let dir = parent.join(name);
    for _ in 0..5 {
        ensure_parent(h, &parent)?;
        match rustix::fs::mkdir(&dir, rustix::fs::Mode::from_raw_mode(0o755)) {
            Ok(()) => return Ok(dir),
            Err(rustix::io::Errno::NOENT) => continue,
            Err(rustix::io::Errno::EXIST) => return Err(CgroupError::AlreadyExists { path: dir }),
            Err(e) => {
                let source = std::io::Error::from(e);
                return Err(if is_permission(&source) {
                    CgroupError::NotDelegated {
                        path: parent,
                        source,
                    }
                } else {
                    CgroupError::Create { path: dir, source }
                });
            }
        }
    }
    Err(CgroupError::Create {
        path: dir,
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    })
}

fn ensure_parent(h: &Hierarchy, parent: &Path) -> Result<(), CgroupError> {
    match rustix::fs::mkdir(parent, rustix::fs::Mode::from_raw_mode(0o755)) {
        Ok(()) => {
            let _ = rustix::fs::setxattr(
                parent,
                PARENT_XATTR,
                b"parent",
                rustix::fs::XattrFlags::empty(),
            );
        }
        Err(rustix::io::Errno::EXIST) => {}
        Err(e) => {
            let source = std::io::Error::from(e);
            return Err(if is_permission(&source) {
                CgroupError::NotDelegated {
                    path: h.base.clone(),
                    source,
                }
            } else {
                CgroupError::Create {
                    path: parent.to_path_buf(),
                    source,
                }
            });
        }
    }
    if h.v2 && !h.controllers.is_empty() {
        let enable = files::v2_enable_line(&h.controllers);
        for dir in [h.base.as_path(), parent] {
            let path = dir.join("cgroup.subtree_control");
            if let Err(err) = files::write_control(&path, &enable) {
                return Err(match err {
                    CgroupError::Write { path, source, .. } if is_permission(&source) => {
                        CgroupError::NotDelegated { path, source }
                    }
                    other => other,
                });
            }
        }
    }
    Ok(())
}

/// SIGKILLs everything in the cgroup until it is empty or `deadline` passes.
fn kill_all(
    hierarchies: &[Hierarchy],
    dirs: &[PathBuf],
    deadline: Instant,
) -> Result<(), CgroupError> {
    let start = Instant::now();
    if let Some((_, dir)) = hierarchies
        .iter()
        .zip(dirs)
        .find(|(h, d)| h.v2 && d.join("cgroup.kill").exists())
    {
        files::write_control(&dir.join("cgroup.kill"), "1")?;
    }
    loop {
        let mut any = false;
        for dir in dirs {
            any |= janitor::kill_members(dir) > 0;
        }
        if !any {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CgroupError::StillBusy {
                path: dirs[0].clone(),
                waited: start.elapsed(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `rmdir` a cgroup, retrying while the kernel still reports it busy (exiting tasks).
fn remove_dir(dir: &Path, deadline: Instant) -> Result<(), CgroupError> {
    let start = Instant::now();
    loop {
        match rustix::fs::rmdir(dir) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(rustix::io::Errno::BUSY) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(rustix::io::Errno::BUSY) => {
                return Err(CgroupError::StillBusy {
                    path: dir.to_path_buf(),
                    waited: start.elapsed(),
                })
            }
            Err(e) => {
                return Err(CgroupError::Remove {
                    path: dir.to_path_buf(),
                    source: e.into(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
