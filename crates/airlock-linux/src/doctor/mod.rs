//! `airlock doctor`: what this host offers the `linux` backend, probed as the invoking user.
//!
//! Every probe that needs the kernel's answer (user namespaces, overlayfs inside one, seccomp
//! filters) runs in a forked child (`sys::probe`), so the caller's process is never changed.
//! The only trace on disk is an empty scratch directory under the temp dir that serves as a
//! mount point inside the child's private mount namespace; it is removed before returning.
//! Each check that is not `Ok` carries the exact command that fixes it.
//!
//! Order: user namespaces first (everything else needs them), then overlay and the I2 write
//! probe, seccomp, cgroups (v2, v1, may-create, fast joins), subordinate ids. Only user
//! namespaces, overlay and seccomp are `required`: without them nothing can run; the rest
//! degrade (no limits, no `--root`, read-only system files, slower starts) and say how to fix
//! it.
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cgroup::detect::{Controller, Layout};
use crate::cgroup::PARENT_DIR;
use crate::sys::probe::{self, ProbeOutcome, StepFailure};

/// Result of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Missing,
    Warning,
    /// Present or absent, it does not matter here: something else provides what it would
    /// (e.g. cgroup v1 controllers standing in for v2 ones). Never labelled `ok`, because its
    /// line may say something is missing.
    Unused,
}

/// One line of `airlock doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable identifier, e.g. `user_namespaces`.
    pub id: &'static str,
    pub title: &'static str,
    pub status: Status,
    /// Whether the backend cannot run without it (`doctor` exits 69 when a required check fails).
    pub required: bool,
    pub detail: String,
    /// The exact command or change that fixes a non-`Ok` check.
    pub fix: Option<String>,
}

impl Check {
    fn ok(
        id: &'static str,
        title: &'static str,
        required: bool,
        detail: impl Into<String>,
    ) -> Self {
        Check {
            id,
            title,
            status: Status::Ok,
            required,
            detail: detail.into(),
            fix: None,
        }
    }

    fn not_ok(
        id: &'static str,
        title: &'static str,
        status: Status,
        required: bool,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Check {
            id,
            title,
            status,
            required,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Facts about the invoking user that fixes and probes need.
#[derive(Debug, Clone)]
struct Invoker {
    uid: u32,
    name: String,
}

impl Invoker {
    fn current() -> Self {
        let uid = rustix::process::geteuid().as_raw();
        let name = std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|t| user_name_for(&t, uid))
            .or_else(|| std::env::var(airlock_env::USER).ok())
            .unwrap_or_else(|| uid.to_string());
        Invoker { uid, name }
    }

    fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// The login name for `uid` in an `/etc/passwd` text.
pub fn user_name_for(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let _pw = f.next()?;
        (f.next()?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
    })
}

/// Probes the host. Never fails: a probe that cannot run becomes a `Missing`/`Warning` check.
pub fn probe_host() -> Vec<Check> {
    let invoker = Invoker::current();
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut checks = vec![check_user_namespaces(&read)];
    let userns_ok = checks[0].status == Status::Ok;
    checks.extend(check_overlay(userns_ok, &invoker, &read));
    checks.push(check_seccomp(&read));
    checks.extend(check_cgroups(&invoker));
    checks.push(check_subordinate_ids(&invoker, &read));
    checks.push(idmapped::check(&invoker));
    checks
}

fn check_user_namespaces(read: &dyn Fn(&str) -> Option<String>) -> Check {
    const ID: &str = "user_namespaces";
    const TITLE: &str = "user namespaces (I1)";
    match probe::user_namespace() {
        Ok(Ok(())) => Check::ok(
            ID,
            TITLE,
            true,
            "this user can create a user namespace and map its ids",
        ),
        Ok(Err(failure)) => Check::not_ok(
            ID,
            TITLE,
            Status::Missing,
            true,
            failure.to_string(),
            userns_fix(read),
        ),
        Err(err) => Check::not_ok(
            ID,
            TITLE,
            Status::Missing,
            true,
            format!("probe could not run: {err}"),
            userns_fix(read),
        ),
    }
}

/// The sysctl that blocks user namespaces on this host, as the command that lifts it.
fn userns_fix(read: &dyn Fn(&str) -> Option<String>) -> String {
    let value = |p: &str| read(p).map(|s| s.trim().to_owned());
    if value("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return "sysctl -w user.max_user_namespaces=15000".into();
    }
    if value("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "sysctl -w kernel.unprivileged_userns_clone=1".into();
    }
    if value("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or install an AppArmor profile granting `userns` to airlock)".into();
    }
    "use a kernel built with CONFIG_USER_NS=y; check `sysctl user.max_user_namespaces` and any LSM policy restricting user namespaces".into()
}

fn check_overlay(
    userns_ok: bool,
    invoker: &Invoker,
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<Check> {
    const ID: &str = "overlay_in_userns";
    const TITLE: &str = "mount namespace, tmpfs and overlayfs inside a user namespace (I2)";
    const SYS_ID: &str = "system_files_writable";
    const SYS_TITLE: &str = "system files writable inside the sandbox (I2)";
    if !userns_ok {
        return vec![Check::not_ok(
            ID,
            TITLE,
            Status::Missing,
            true,
            "needs user namespaces",
            "fix user_namespaces first",
        )];
    }
    let has_overlay = read("/proc/filesystems").is_some_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().last() == Some("overlay"))
    });
    // Unique per call: a directory left by a killed doctor must not make the probe fail.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let scratch =
        std::env::temp_dir().join(format!("airlock-doctor-{}-{nanos}", std::process::id()));
    let result = std::fs::create_dir(&scratch)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let r = probe::overlay_in_user_namespace(&scratch).map_err(|e| e.to_string());
            let _ = std::fs::remove_dir(&scratch);
            r
        });
    let probe = match result {
        Ok(p) => p,
        Err(err) => {
            return vec![Check::not_ok(
                ID,
                TITLE,
                Status::Missing,
                true,
                format!("probe could not run: {err}"),
                overlay_fix(has_overlay, None),
            )]
        }
    };
    let mut checks = vec![match probe.overlay {
        Ok(()) => Check::ok(
            ID,
            TITLE,
            true,
            "overlayfs mounts and accepts writes inside a user namespace",
        ),
        Err(failure) => Check::not_ok(
            ID,
            TITLE,
            Status::Missing,
            true,
            failure.to_string(),
            overlay_fix(has_overlay, Some(failure)),
        ),
    }];
    if let Some(outcome) = probe.system_files_writable {
        checks.push(system_files_check(outcome, invoker, SYS_ID, SYS_TITLE));
    }
    checks
}

fn overlay_fix(has_overlay: bool, failure: Option<StepFailure>) -> String {
    if !has_overlay {
        return "modprobe overlay (and add `overlay` to /etc/modules-load.d/airlock.conf)".into();
    }
    match failure {
        Some(f) if f.step == "mount(overlay)" => {
            "upgrade to Linux 5.11 or newer (overlayfs inside user namespaces)".into()
        }
        _ => "check that no LSM policy (AppArmor, SELinux) denies mounts inside user namespaces"
            .into(),
    }
}

fn system_files_check(
    outcome: ProbeOutcome,
    invoker: &Invoker,
    id: &'static str,
    title: &'static str,
) -> Check {
    match outcome {
        Ok(()) => Check::ok(id, title, false, "changes to /usr, /etc, ... land in the sandbox's own upper layer"),
        Err(failure) => Check::not_ok(
            id,
            title,
            Status::Warning,
            false,
            format!(
                "system files will appear owned by `nobody` and stay read-only inside for {} ({failure}); workspace and $HOME are writable",
                invoker.name
            ),
            "run airlock as root, or import an image (`airlock image import rootfs.tar --name NAME`, then `image = \"NAME\"` in a config) for a fully writable root filesystem",
        ),
    }
}

fn check_seccomp(read: &dyn Fn(&str) -> Option<String>) -> Check {
    const ID: &str = "seccomp";
    const TITLE: &str = "seccomp filters (I6)";
    const FIX: &str = "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y";
    let supported =
        read("/proc/self/status").is_some_and(|t| t.lines().any(|l| l.starts_with("Seccomp:")));
    if !supported {
        return Check::not_ok(
            ID,
            TITLE,
            Status::Missing,
            true,
            "the kernel reports no seccomp support in /proc/self/status",
            FIX,
        );
    }
    let program = match crate::seccomp::sandbox_filter() {
        Ok(p) => p,
        Err(err) => return Check::not_ok(ID, TITLE, Status::Missing, true, err.to_string(), FIX),
    };
    match probe::seccomp_filter(&program) {
        Ok(Ok(())) => Check::ok(
            ID,
            TITLE,
            true,
            format!(
                "the sandbox filter ({} instructions) installs",
                program.len()
            ),
        ),
        Ok(Err(failure)) => {
            Check::not_ok(ID, TITLE, Status::Missing, true, failure.to_string(), FIX)
        }
        Err(err) => Check::not_ok(
            ID,
            TITLE,
            Status::Missing,
            true,
            format!("probe failed: {err}"),
            FIX,
        ),
    }
}

fn names(list: &[Controller]) -> String {
    list.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
}

fn check_cgroups(invoker: &Invoker) -> Vec<Check> {
    let layout = match Layout::detect() {
        Ok(l) => l,
        Err(err) => {
            return vec![Check::not_ok(
                "cgroups",
                "cgroup controllers (I8)",
                Status::Warning,
                false,
                format!("cannot read /proc/self: {err}"),
                "mount /proc",
            )]
        }
    };
    cgroup_checks(&layout, invoker, |p| {
        rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok()
    })
}

/// The cgroup checks for a layout; `writable` tells whether this user may create a directory.
fn cgroup_checks(
    layout: &Layout,
    invoker: &Invoker,
    writable: impl Fn(&Path) -> bool,
) -> Vec<Check> {
    let v2_missing = layout.v2_missing();
    let v1_missing = layout.v1_missing();
    // Missing v2 controllers only matter when v1 cannot stand in for them.
    let v2_status = if v1_missing.is_empty() {
        Status::Unused
    } else {
        Status::Warning
    };
    let v2 = match &layout.v2 {
        Some(v2) if v2_missing.is_empty() => Check::ok(
            "cgroup_v2",
            "cgroup v2 controllers (I8)",
            false,
            format!("memory, pids and cpu available at {}", v2.own_dir.display()),
        ),
        Some(v2) => Check::not_ok(
            "cgroup_v2",
            "cgroup v2 controllers (I8)",
            v2_status,
            false,
            format!(
                "{} not available to {}{}",
                names(&v2_missing),
                v2.own_dir.display(),
                if v1_missing.is_empty() {
                    "; the v1 controllers are used instead"
                } else {
                    ""
                }
            ),
            v2_delegation_fix(invoker),
        ),
        None => Check::not_ok(
            "cgroup_v2",
            "cgroup v2 controllers (I8)",
            v2_status,
            false,
            "no cgroup2 hierarchy mounted",
            "mount -t cgroup2 none /sys/fs/cgroup",
        ),
    };
    let v1 = if v1_missing.is_empty() {
        Check::ok(
            "cgroup_v1",
            "cgroup v1 controllers (I8)",
            false,
            "memory, pids and cpu mounted",
        )
    } else {
        let fix = v1_missing.iter().map(|c| format!("mkdir -p /sys/fs/cgroup/{0} && mount -t cgroup -o {0} cgroup /sys/fs/cgroup/{0}", c.name())).collect::<Vec<_>>().join(" && ");
        // Missing v1 controllers only matter when v2 does not have them all.
        let (status, detail) = if v2_missing.is_empty() {
            (
                Status::Unused,
                format!(
                    "{} not mounted as v1; the v2 controllers are used instead",
                    names(&v1_missing)
                ),
            )
        } else {
            (
                Status::Warning,
                format!("{} not mounted as v1", names(&v1_missing)),
            )
        };
        Check::not_ok(
            "cgroup_v1",
            "cgroup v1 controllers (I8)",
            status,
            false,
            detail,
            fix,
        )
    };
    let mut checks = vec![v2, v1];
    checks.push(create_check(layout, invoker, &writable));
    if crate::cgroup::hierarchies(layout).is_some() {
        checks.push(fast_join_check(layout));
    }
    checks
}

/// Where the runtime root (sockets, per-run directories and markers) lives: on a tmpfs each
/// run's dozen file creations and removals cost nothing measurable; on a disk filesystem they
/// cost inode churn (B3: ~2.6 ms per `airlock run` on this project's ext4 test machine). Without
/// `XDG_RUNTIME_DIR` airlock uses `/dev/shm/airlock-<uid>` when that directory is the user's
/// own (0700), so this warns only when that was refused or there is no tmpfs.
pub fn runtime_root_check(runtime: &Path) -> Check {
    const ID: &str = "runtime_root_tmpfs";
    const TITLE: &str = "runtime root on a tmpfs (B3)";
    // The root may not exist yet: its nearest existing ancestor is where it will be created.
    let existing = runtime
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let on_tmpfs = rustix::fs::statfs(existing).is_ok_and(|s| s.f_type == libc::TMPFS_MAGIC);
    if on_tmpfs {
        return Check::ok(
            ID,
            TITLE,
            false,
            format!("{} is on a tmpfs", runtime.display()),
        );
    }
    let uid = rustix::process::geteuid().as_raw();
    Check::not_ok(
        ID,
        TITLE,
        Status::Warning,
        false,
        format!(
            "{} is on disk: every `airlock run` creates and removes its sockets and markers \
             there, about 2-3 ms more per run than on a tmpfs",
            runtime.display()
        ),
        format!(
            "export XDG_RUNTIME_DIR=/run/user/{uid} (a tmpfs owned by you, mode 0700), or remove \
             /dev/shm/airlock-{uid} if it is not yours so airlock can create it"
        ),
    )
}

/// Joining a sandbox's cgroup (a task migration) takes the kernel's global threadgroup lock
/// for writing, which waits for an RCU grace period unless a hierarchy is mounted with
/// `favordynmods` (Documentation/admin-guide/cgroup-v2.rst). On this project's test machine
/// the first join of a run took 5–23 ms without it and 0.06 ms with it: a large share of
/// `airlock run` (B3). The option makes forks and exits slightly slower host-wide, so it is
/// the administrator's choice, and a warning rather than a requirement.
fn fast_join_check(layout: &Layout) -> Check {
    const ID: &str = "cgroup_fast_join";
    const TITLE: &str = "fast cgroup joins at sandbox start (B3)";
    if layout.favordynmods {
        return Check::ok(
            ID,
            TITLE,
            false,
            "a cgroup hierarchy is mounted with favordynmods",
        );
    }
    let v1_only = crate::cgroup::hierarchies(layout).is_some_and(|hs| hs.iter().all(|h| !h.v2));
    if v1_only {
        // The init stage writes `0` to the v1 `tasks` files itself before its exec: moving one
        // thread takes no threadgroup lock (cgroup::JoinFds).
        return Check::ok(
            ID,
            TITLE,
            false,
            "sandboxes join v1 hierarchies through their tasks files, which waits for no RCU grace period",
        );
    }
    let fix = match &layout.v2_mount {
        Some(mp) => format!("mount -o remount,favordynmods {}", mp.display()),
        None => "mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 -o favordynmods cgroup2 /sys/fs/cgroup/unified".into(),
    };
    Check::not_ok(
        ID,
        TITLE,
        Status::Warning,
        false,
        "every sandbox start waits for an RCU grace period (often several milliseconds) to join its cgroup; favordynmods removes the wait at a small cost to forks host-wide",
        fix,
    )
}

/// How a non-root user gets a delegated cgroup v2 subtree from systemd (issue 9.10).
const SYSTEMD_DELEGATION_FIX: &str = "delegate cgroups to your systemd user instance: mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=yes\\n' > /etc/systemd/system/user@.service.d/delegate.conf && systemctl daemon-reload, then log in again (or, for one command, run airlock inside a delegated scope of your user slice: systemd-run --user --scope -p Delegate=yes airlock …)";

fn v2_delegation_fix(invoker: &Invoker) -> String {
    if invoker.is_root() {
        "echo '+memory +pids +cpu' > /sys/fs/cgroup/cgroup.subtree_control".into()
    } else {
        SYSTEMD_DELEGATION_FIX.into()
    }
}

fn create_check(layout: &Layout, invoker: &Invoker, writable: &dyn Fn(&Path) -> bool) -> Check {
    const ID: &str = "cgroup_create";
    const TITLE: &str = "this user may create cgroups for sandbox limits (I8)";
    let Some(hierarchies) = crate::cgroup::hierarchies(layout) else {
        return Check::not_ok(
            ID,
            TITLE,
            Status::Warning,
            false,
            "no hierarchy offers memory, pids and cpu; default limits are skipped",
            "see cgroup_v2 / cgroup_v1",
        );
    };
    let usable = |d: &Path| writable(d) || writable(&d.join(PARENT_DIR));
    let resolved: Vec<_> = hierarchies
        .into_iter()
        .map(|h| h.resolve_for_user(writable))
        .collect();
    let blocked: Vec<_> = resolved.iter().filter(|h| !usable(&h.base)).collect();
    if blocked.is_empty() {
        let dirs: Vec<String> = resolved
            .iter()
            .map(|h| h.base.join(PARENT_DIR).display().to_string())
            .collect();
        return Check::ok(
            ID,
            TITLE,
            false,
            format!("sandbox cgroups go under {}", dirs.join(", ")),
        );
    }
    let detail = format!(
        "{} cannot create cgroups in {}: default limits are skipped with a warning and an explicit memory_mb or cpus is refused; without cgroups, sandboxes still get tmpfs mounts sized within memory_mb and RLIMIT_NPROC = pids_max, but the memory their processes use is not bounded",
        invoker.name,
        blocked.iter().map(|h| h.base.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    let fix = if blocked.iter().any(|h| h.v2) {
        v2_delegation_fix(invoker)
    } else {
        let dirs = blocked
            .iter()
            .map(|h| {
                let dir = h.base.join(PARENT_DIR);
                format!("mkdir -p {0} && chown {1} {0}", dir.display(), invoker.name)
            })
            .collect::<Vec<_>>()
            .join(" && ");
        if invoker.is_root() {
            dirs
        } else {
            format!("as root: {dirs}; or use cgroup v2 and {SYSTEMD_DELEGATION_FIX}")
        }
    };
    Check::not_ok(ID, TITLE, Status::Warning, false, detail, fix)
}

/// A subordinate id range `start..start+count` from `/etc/subuid` or `/etc/subgid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubIdRange {
    pub start: u64,
    pub count: u64,
}

/// Ranges for a user in a subuid/subgid text; entries may name the user or its numeric uid.
pub fn subid_ranges(text: &str, user: &str, uid: u32) -> Vec<SubIdRange> {
    let uid = uid.to_string();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let mut f = line.split(':');
            let owner = f.next()?;
            let start = f.next()?.trim().parse().ok()?;
            let count = f.next()?.trim().parse().ok()?;
            (f.next().is_none() && (owner == user || owner == uid) && count > 0)
                .then_some(SubIdRange { start, count })
        })
        .collect()
}

/// Whether a helper such as `newuidmap` can raise privileges: setuid root or a file capability.
fn helper_usable(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let setuid_root = meta.uid() == 0 && meta.mode() & 0o4000 != 0;
    let has_caps = rustix::fs::getxattr(path, "security.capability", &mut [0u8; 64]).is_ok();
    setuid_root || has_caps
}

fn find_helper(name: &str) -> Option<PathBuf> {
    let path = std::env::var(airlock_env::PATH).unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}

fn check_subordinate_ids(invoker: &Invoker, read: &dyn Fn(&str) -> Option<String>) -> Check {
    const ID: &str = "subordinate_ids";
    const TITLE: &str = "subordinate ids for `exec --root` (I5)";
    if invoker.is_root() {
        return Check::ok(
            ID,
            TITLE,
            false,
            "root maps ids directly; no subordinate ids needed",
        );
    }
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    for helper in ["newuidmap", "newgidmap"] {
        match find_helper(helper) {
            None => {
                problems.push(format!("{helper} not installed"));
                if !fixes.iter().any(|f: &String| f.contains("uidmap")) {
                    fixes.push("apt-get install uidmap".to_owned());
                }
            }
            Some(p) if !helper_usable(&p) => {
                problems.push(format!(
                    "{} is neither setuid root nor has file capabilities",
                    p.display()
                ));
                fixes.push(format!("chmod u+s {}", p.display()));
            }
            Some(_) => {}
        }
    }
    let ranges = |file: &str| {
        read(file)
            .map(|t| subid_ranges(&t, &invoker.name, invoker.uid))
            .unwrap_or_default()
    };
    let (subuid, subgid) = (ranges("/etc/subuid"), ranges("/etc/subgid"));
    if subuid.is_empty() || subgid.is_empty() {
        problems.push(format!(
            "no range for {} in /etc/subuid or /etc/subgid",
            invoker.name
        ));
        // A range nobody else holds in either file (two users sharing ids share files).
        fixes.push(crate::idmap::propose_subids(
            &invoker.name,
            &read("/etc/subuid").unwrap_or_default(),
            &read("/etc/subgid").unwrap_or_default(),
        ));
    }
    if problems.is_empty() {
        return Check::ok(
            ID,
            TITLE,
            false,
            format!(
                "newuidmap/newgidmap usable; {} subordinate uids",
                subuid.iter().map(|r| r.count).sum::<u64>()
            ),
        );
    }
    Check::not_ok(
        ID,
        TITLE,
        Status::Warning,
        false,
        format!(
            "{}; `exec --root` and multi-user sandboxes are unavailable",
            problems.join("; ")
        ),
        fixes.join(" && "),
    )
}

mod idmapped;
#[cfg(test)]
mod tests;
