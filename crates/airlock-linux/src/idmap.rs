//! User and group id maps of the sandbox's user namespace (PRODUCT I1, I5).
//!
//! Which host ids appear as which ids inside (docs/security.md, "Identities"):
//! - The sandbox user has a non-zero uid inside: the invoker's own uid, or 1000 when the invoker
//!   is root. Files it writes in workspaces and read-write mounts belong to the invoker on the
//!   host.
//! - Root inside (`--root`) maps to a subordinate id, never to the invoker's id:
//!   * unprivileged invoker with an `/etc/subuid` + `/etc/subgid` range and `newuidmap`/
//!     `newgidmap`: inside `0..N` maps onto the range, except the sandbox user's id;
//!   * root invoker: every sandbox gets a range of its own ([`claim_root_range`]: 65536 ids at or
//!     above [`ROOT_INVOKER_BASE`], overlapping no `/etc/subuid`/`/etc/subgid` range and no other
//!     live sandbox's), and inside `0..65536` maps onto it — host root is not mapped at all, so
//!     no sandbox process is ever host uid 0 and the sandbox user is an id of that range too.
//!     Host files keep their owners through id-mapped mounts ([`IdPlan::mount_maps`]): the
//!     image's system directories through the sandbox's own namespace (host root's files
//!     appear owned by in-sandbox root, which can change them in the overlay, I2), workspaces
//!     and mounts through a namespace that shows the invoker as the sandbox user (its writes
//!     land as the invoker on the host);
//!   * unprivileged invoker without subordinate ids: a single-id map, `setgroups` denied, and no
//!     root identity at all — `--root` is refused with [`IdPlan::root_unavailable`].
//! - Every host id that is not mapped appears as the overflow id (`nobody`) inside.
//!
//! The maps are written by the host process (the parent), after the child has unshared its user
//! namespace and before it does anything else (see `host.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Lowest host id of the per-sandbox ranges of a root invoker's sandboxes.
pub const ROOT_INVOKER_BASE: u32 = 0x7000_0000;
/// Where a root invoker's sandboxes claim their id ranges (one lock file per range, held with
/// `flock` for the sandbox's lifetime; the kernel releases it when the holder dies). Global to
/// the host: ranges must differ across every root-invoked sandbox, whatever its runtime root.
pub const ROOT_RANGE_DIR: &str = "/run/airlock-id-ranges";
/// Size of every multi-id map.
pub const MAP_SIZE: u32 = 65536;
/// Sandbox user id when the invoker is root.
pub const ROOT_INVOKER_SANDBOX_ID: u32 = 1000;

#[derive(Debug, Error)]
pub enum IdMapError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run {helper}: {source}")]
    HelperSpawn {
        helper: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("no free id range of {MAP_SIZE} ids above {ROOT_INVOKER_BASE:#x} for a root-invoked sandbox (all are held by live sandboxes or listed in /etc/subuid or /etc/subgid)")]
    NoFreeRange,
    #[error("cannot claim an id range in {path}: {source}")]
    Claim {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{helper} failed ({status}): {stderr}")]
    HelperFailed {
        helper: &'static str,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// One line of `/proc/PID/uid_map`: `inside outside count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapLine {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// A subordinate id range from `/etc/subuid` or `/etc/subgid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubRange {
    pub start: u32,
    pub count: u32,
}

/// How the maps get written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapWriter {
    /// The parent writes `/proc/PID/{setgroups,uid_map,gid_map}` itself (root invoker, or a
    /// single-id map of the invoker's own ids with `setgroups` denied).
    Direct { deny_setgroups: bool },
    /// `newuidmap`/`newgidmap` (setuid helpers) write ranges from `/etc/subuid`/`/etc/subgid`.
    Helpers,
}

/// The decided id layout of one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPlan {
    pub uid_map: Vec<MapLine>,
    pub gid_map: Vec<MapLine>,
    /// The sandbox user's ids inside.
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    /// `None` when root (0) is mapped inside; otherwise why it is not.
    pub root_unavailable: Option<String>,
    pub writer: MapWriter,
    /// Root invoker only: the maps host files are shown through (id-mapped mounts); boxed, as
    /// it is four maps long.
    pub mount_maps: Option<Box<MountMaps>>,
}

/// The id mappings of a root invoker's mounts. The image's system directories use the sandbox's
/// own user namespace; workspaces and mounts use `owner_uid`/`owner_gid`, which show the
/// invoker's files as the sandbox user's and every other id of the sandbox's range as itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountMaps {
    pub owner_uid: Vec<MapLine>,
    pub owner_gid: Vec<MapLine>,
    /// The root view's maps (`--root` processes, issue 9.5): the invoker's files show as
    /// in-sandbox root's, so what `--root` writes in a workspace belongs to the invoker.
    pub root_uid: Vec<MapLine>,
    pub root_gid: Vec<MapLine>,
}

impl IdPlan {
    /// The sandbox's uid map as written to its `/proc/PID/uid_map` (and its gid map below): a
    /// root invoker's image mounts are id-mapped through a namespace with exactly these maps.
    pub fn uid_map_text(&self) -> String {
        render(&self.uid_map)
    }
    pub fn gid_map_text(&self) -> String {
        render(&self.gid_map)
    }

    /// Whether the sandbox's PID 1 may start `--root` processes, for a sandbox started with
    /// `root_view` (`StartOptions::root_view`): root must be mapped, and a root invoker's
    /// sandbox must have been started for them, since only then is what others may not read
    /// in the image masked (`rootfs/unreadable.rs`); without, its in-sandbox root could read it.
    pub fn root_processes(&self, root_view: bool) -> bool {
        self.root_unavailable.is_none() && (self.mount_maps.is_none() || root_view)
    }

    /// The maps a root invoker's host image is id-mapped through when no process of the
    /// sandbox may hold in-sandbox root (a plain `run`: the image is not masked,
    /// `rootfs/unreadable.rs`): the sandbox's own without the sandbox user's ids, so a host
    /// file of host user (or group) 1000 is `nobody`'s inside instead of the sandbox user's,
    /// and the sandbox user gets exactly the "others" permission on every file of the image.
    /// `(uid map, gid map)`, as the texts above.
    pub fn image_map_texts_without_sandbox_user(&self) -> (String, String) {
        (
            render(&without_inside(&self.uid_map, self.sandbox_uid)),
            render(&without_inside(&self.gid_map, self.sandbox_gid)),
        )
    }
}

/// `map` without the inside id `id` (the line holding it split around it).
fn without_inside(map: &[MapLine], id: u32) -> Vec<MapLine> {
    map.iter()
        .flat_map(|l| {
            let Some(before) = id.checked_sub(l.inside).filter(|&b| b < l.count) else {
                return vec![*l];
            };
            [
                line(l.inside, l.outside, before),
                line(id + 1, l.outside + before + 1, l.count - before - 1),
            ]
            .into_iter()
            .filter(|l| l.count > 0)
            .collect()
        })
        .collect()
}

impl MountMaps {
    pub fn owner_uid_text(&self) -> String {
        render(&self.owner_uid)
    }
    pub fn owner_gid_text(&self) -> String {
        render(&self.owner_gid)
    }
    pub fn root_uid_text(&self) -> String {
        render(&self.root_uid)
    }
    pub fn root_gid_text(&self) -> String {
        render(&self.root_gid)
    }
}

/// What the host offers for building maps; gathered by [`HostIds::probe`], injectable in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIds {
    pub uid: u32,
    pub gid: u32,
    pub user_name: String,
    pub subuid: Option<SubRange>,
    pub subgid: Option<SubRange>,
    /// Whether both `newuidmap` and `newgidmap` exist.
    pub helpers: bool,
    /// Every range `/etc/subuid` or `/etc/subgid` hands to anyone (ranges airlock picks for
    /// itself or proposes must avoid them).
    pub taken: Vec<SubRange>,
}

impl HostIds {
    /// Reads `/etc/subuid`, `/etc/subgid` and looks for the map helpers on the standard paths.
    pub fn probe(uid: u32, gid: u32, user_name: &str) -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let (subuid, subgid) = (read("/etc/subuid"), read("/etc/subgid"));
        let mut taken = all_subranges(&subuid);
        taken.extend(all_subranges(&subgid));
        Self {
            uid,
            gid,
            user_name: user_name.to_owned(),
            subuid: find_subrange(&subuid, user_name, uid),
            subgid: find_subrange(&subgid, user_name, uid),
            helpers: helper_path("newuidmap").is_some() && helper_path("newgidmap").is_some(),
            taken,
        }
    }
}

/// Finds the first range for `name` (or the numeric `uid`) in a subuid/subgid file's text.
pub fn find_subrange(text: &str, name: &str, uid: u32) -> Option<SubRange> {
    let uid_s = uid.to_string();
    text.lines().find_map(|line| {
        let mut parts = line.trim().split(':');
        let (owner, start, count) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || (owner != name && owner != uid_s) {
            return None;
        }
        let range = SubRange {
            start: start.parse().ok()?,
            count: count.parse().ok()?,
        };
        (range.count > 0).then_some(range)
    })
}

/// Every range listed in a subuid/subgid file's text, whoever holds it (comments, malformed
/// lines and empty ranges are skipped).
pub fn all_subranges(text: &str) -> Vec<SubRange> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let mut parts = line.split(':');
            let (_owner, start, count) = (parts.next()?, parts.next()?, parts.next()?);
            let range = SubRange {
                start: start.trim().parse().ok()?,
                count: count.trim().parse().ok()?,
            };
            (parts.next().is_none() && range.count > 0).then_some(range)
        })
        .collect()
}

/// Where ranges proposed to users start (the conventional first subordinate id).
pub const PROPOSAL_FLOOR: u32 = 100_000;

/// The lowest `size`-aligned range of `size` ids at or above `floor` that overlaps none of
/// `taken`, or `None` when the 32-bit id space has no such gap.
pub fn free_range(taken: &[SubRange], floor: u32, size: u32) -> Option<SubRange> {
    let size = u64::from(size.max(1));
    let overlaps = |start: u64| {
        taken.iter().any(|r| {
            let (s, e) = (u64::from(r.start), u64::from(r.start) + u64::from(r.count));
            start < e && s < start + size
        })
    };
    // The highest id (u32::MAX) is the kernel's invalid id: never hand it out.
    let mut start = u64::from(floor).div_ceil(size) * size;
    while start + size <= u64::from(u32::MAX) {
        if !overlaps(start) {
            return Some(SubRange {
                start: start as u32,
                count: size as u32,
            });
        }
        start += size;
    }
    None
}

/// The `usermod` command that gives `user` a range no other user holds in `subuid`/`subgid`.
pub fn propose_subids(user: &str, subuid: &str, subgid: &str) -> String {
    let mut taken = all_subranges(subuid);
    taken.extend(all_subranges(subgid));
    match free_range(&taken, PROPOSAL_FLOOR, MAP_SIZE) {
        Some(r) => {
            let end = r.start + (r.count - 1);
            format!(
                "usermod --add-subuids {s}-{end} --add-subgids {s}-{end} {user}",
                s = r.start
            )
        }
        None => format!(
            "/etc/subuid and /etc/subgid leave no free range of {MAP_SIZE} ids: free one, then \
             `usermod --add-subuids START-END --add-subgids START-END {user}`"
        ),
    }
}

/// Where a map helper lives, if anywhere on the fixed system paths (never `$PATH`: a setuid
/// helper is looked up where the distribution installs it).
pub fn helper_path(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Decides the id layout for `host` (see the module docs for the rules). `root_range` is the
/// range claimed for this sandbox when the invoker is root ([`claim_root_range`]).
pub fn plan(host: &HostIds, root_range: Option<SubRange>) -> IdPlan {
    if host.uid == 0 {
        let base = root_range.map_or(ROOT_INVOKER_BASE, |r| r.start);
        let id = ROOT_INVOKER_SANDBOX_ID;
        let whole = vec![line(0, base, MAP_SIZE)];
        return IdPlan {
            uid_map: whole.clone(),
            gid_map: whole,
            sandbox_uid: id,
            sandbox_gid: id,
            root_unavailable: None,
            writer: MapWriter::Direct {
                deny_setgroups: false,
            },
            mount_maps: Some(Box::new(MountMaps {
                owner_uid: owner_map(host.uid, base, id),
                owner_gid: owner_map(host.gid, base, id),
                root_uid: owner_map(host.uid, base, 0),
                root_gid: owner_map(host.gid, base, 0),
            })),
        };
    }
    let single = |reason: String| IdPlan {
        uid_map: vec![line(host.uid, host.uid, 1)],
        gid_map: vec![line(host.gid, host.gid, 1)],
        sandbox_uid: host.uid,
        sandbox_gid: host.gid,
        root_unavailable: Some(reason),
        writer: MapWriter::Direct {
            deny_setgroups: true,
        },
        mount_maps: None,
    };
    let (Some(su), Some(sg)) = (host.subuid, host.subgid) else {
        let free = free_range(&host.taken, PROPOSAL_FLOOR, MAP_SIZE);
        let fix = match free {
            Some(r) => format!(
                "add one that overlaps no other user's: `usermod --add-subuids {s}-{e} \
                 --add-subgids {s}-{e} {u}`",
                s = r.start,
                e = r.start + (r.count - 1),
                u = host.user_name
            ),
            None => "free a range of 65536 ids in both files and assign it".to_owned(),
        };
        return single(format!(
            "user {} has no subordinate id range in /etc/subuid and /etc/subgid ({fix})",
            host.user_name
        ));
    };
    if !host.helpers {
        return single(
            "newuidmap/newgidmap are not installed (install the `uidmap` package)".to_owned(),
        );
    }
    IdPlan {
        uid_map: subrange_map(host.uid, su),
        gid_map: subrange_map(host.gid, sg),
        sandbox_uid: host.uid,
        sandbox_gid: host.gid,
        root_unavailable: None,
        writer: MapWriter::Helpers,
        mount_maps: None,
    }
}

fn line(inside: u32, outside: u32, count: u32) -> MapLine {
    MapLine {
        inside,
        outside,
        count,
    }
}

/// Map of a root invoker's workspace mounts (read as: on-disk id → host id seen through the
/// mount): the invoker's id `host` shows as in-sandbox id `id` (host `base + id`: the sandbox
/// user in the sandbox's view, root in the root view); every other id of the sandbox's range
/// `base..base+MAP_SIZE` shows as itself, except `base + id`, which is taken.
fn owner_map(host: u32, base: u32, id: u32) -> Vec<MapLine> {
    [
        line(host, base + id, 1),
        line(base, base, id),
        line(base + id + 1, base + id + 1, MAP_SIZE - id - 1),
    ]
    .into_iter()
    .filter(|l| l.count > 0)
    .collect()
}

/// A root invoker's sandbox's claim on its id range; the range is free again once this is
/// dropped (or its holder dies).
#[derive(Debug)]
pub struct RangeClaim {
    pub range: SubRange,
    _lock: std::fs::File,
}

/// Claims the lowest range of [`MAP_SIZE`] ids at or above [`ROOT_INVOKER_BASE`] that overlaps
/// no range in `taken` and that no live sandbox holds, in [`ROOT_RANGE_DIR`].
pub fn claim_root_range(dir: &Path, taken: &[SubRange]) -> Result<RangeClaim, IdMapError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    let claim_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| IdMapError::Claim { path, source }
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(claim_err(dir)(e)),
    }
    // A directory someone else could write is not trusted (only root claims ranges).
    let meta = std::fs::symlink_metadata(dir).map_err(claim_err(dir))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(claim_err(dir)(std::io::Error::other(
            "not a directory owned and writable only by this user",
        )));
    }
    let mut floor = ROOT_INVOKER_BASE;
    while let Some(range) = free_range(taken, floor, MAP_SIZE) {
        let path = dir.join(format!("{:08x}", range.start));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(claim_err(&path))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(RangeClaim { range, _lock: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(e) => return Err(claim_err(&path)(e.into())),
        }
        let Some(next) = range.start.checked_add(range.count) else {
            break;
        };
        floor = next;
    }
    Err(IdMapError::NoFreeRange)
}

/// Unprivileged invoker with a subordinate range: inside `0..count` maps onto the range, except
/// the invoker's own id which maps to itself.
fn subrange_map(own: u32, r: SubRange) -> Vec<MapLine> {
    let mut v = vec![line(0, r.start, r.count.min(own))];
    if r.count > own + 1 {
        v.push(line(own + 1, r.start + own + 1, r.count - own - 1));
    }
    v.push(line(own, own, 1));
    v
}

fn render(lines: &[MapLine]) -> String {
    lines
        .iter()
        .map(|l| format!("{} {} {}\n", l.inside, l.outside, l.count))
        .collect()
}

/// Writes the maps of process `pid` (which has just unshared its user namespace).
pub fn write_maps(pid: u32, plan: &IdPlan) -> Result<(), IdMapError> {
    match plan.writer {
        MapWriter::Direct { deny_setgroups } => {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let write = |name: &str, text: &str| {
                let path = proc_dir.join(name);
                std::fs::write(&path, text).map_err(|source| IdMapError::Write { path, source })
            };
            if deny_setgroups {
                write("setgroups", "deny")?;
            }
            write("uid_map", &plan.uid_map_text())?;
            write("gid_map", &plan.gid_map_text())
        }
        MapWriter::Helpers => {
            run_helper("newuidmap", pid, &plan.uid_map)?;
            run_helper("newgidmap", pid, &plan.gid_map)
        }
    }
}

fn run_helper(helper: &'static str, pid: u32, lines: &[MapLine]) -> Result<(), IdMapError> {
    let path = helper_path(helper).ok_or_else(|| IdMapError::HelperSpawn {
        helper,
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    let mut cmd = Command::new(path);
    cmd.arg(pid.to_string()).env_clear();
    for l in lines {
        cmd.args([
            l.inside.to_string(),
            l.outside.to_string(),
            l.count.to_string(),
        ]);
    }
    let out = cmd
        .output()
        .map_err(|source| IdMapError::HelperSpawn { helper, source })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(IdMapError::HelperFailed {
            helper,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(uid: u32, sub: Option<SubRange>, helpers: bool) -> HostIds {
        HostIds {
            uid,
            gid: uid,
            user_name: "dev".into(),
            subuid: sub,
            subgid: sub,
            helpers,
            taken: sub.into_iter().collect(),
        }
    }

    fn inside_of(map: &[MapLine], outside: u32) -> Option<u32> {
        map.iter()
            .find(|l| outside >= l.outside && outside - l.outside < l.count)
            .map(|l| l.inside + (outside - l.outside))
    }

    fn assert_disjoint(map: &[MapLine]) {
        for (i, a) in map.iter().enumerate() {
            for b in &map[i + 1..] {
                let overlap = |x: u32, xc: u32, y: u32, yc: u32| x < y + yc && y < x + xc;
                assert!(!overlap(a.inside, a.count, b.inside, b.count), "{map:?}");
                assert!(!overlap(a.outside, a.count, b.outside, b.count), "{map:?}");
            }
        }
    }

    #[test]
    fn subrange_lookup_matches_name_or_uid_and_skips_others() {
        let text = "alice:100000:65536\n1001:200000:65536\nbad line\n";
        assert_eq!(
            find_subrange(text, "alice", 5),
            Some(SubRange {
                start: 100000,
                count: 65536
            })
        );
        assert_eq!(find_subrange(text, "bob", 1001).unwrap().start, 200000);
        assert_eq!(find_subrange(text, "carol", 7), None);
    }

    #[test]
    fn root_invoker_sandbox_maps_no_host_root_and_mounts_show_the_invoker_as_sandbox_user() {
        let base = ROOT_INVOKER_BASE + 3 * MAP_SIZE;
        let range = SubRange {
            start: base,
            count: MAP_SIZE,
        };
        let p = plan(&host(0, None, false), Some(range));
        assert_eq!(p.root_unavailable, None);
        assert_eq!(p.sandbox_uid, 1000);
        // No sandbox identity is host root: host uid 0 is not mapped at all.
        assert_eq!(inside_of(&p.uid_map, 0), None, "host root is mapped inside");
        assert_eq!(
            inside_of(&p.gid_map, 0),
            None,
            "host root group is mapped inside"
        );
        assert_eq!(inside_of(&p.uid_map, base), Some(0));
        assert_eq!(inside_of(&p.uid_map, base + 1000), Some(1000));
        assert_disjoint(&p.uid_map);
        // Workspace mounts: the invoker's files (on disk 0) show as the sandbox user's host id,
        // the rest of the sandbox's range as itself; the map stays a bijection.
        let m = p.mount_maps.expect("root invokers use id-mapped mounts");
        for map in [&m.owner_uid, &m.owner_gid] {
            assert_eq!(inside_of_disk(map, 0), Some(base + 1000));
            assert_eq!(inside_of_disk(map, base), Some(base));
            assert_eq!(inside_of_disk(map, base + 1000), None);
            assert_disjoint(map);
        }
        // The root view: the invoker's files show as in-sandbox root's (so `--root` writes
        // land as the invoker), the sandbox user's id as itself; still a bijection.
        for map in [&m.root_uid, &m.root_gid] {
            assert_eq!(inside_of_disk(map, 0), Some(base));
            assert_eq!(inside_of_disk(map, base), None);
            assert_eq!(inside_of_disk(map, base + 1000), Some(base + 1000));
            assert_disjoint(map);
        }
    }

    /// A root invoker's sandbox started without the root view (a plain `run`) is not masked:
    /// its PID 1 may start no `--root` process. An unprivileged invoker's in-sandbox root owns
    /// no host file, so root is served wherever it is mapped.
    #[test]
    fn root_processes_run_only_where_the_image_is_masked_for_them() {
        let root = plan(&host(0, None, false), None);
        assert!(root.root_processes(true));
        assert!(!root.root_processes(false));
        let sub = Some(SubRange {
            start: 100_000,
            count: MAP_SIZE,
        });
        let unprivileged = plan(&host(1000, sub, true), None);
        assert!(unprivileged.root_processes(false) && unprivileged.root_processes(true));
        let single = plan(&host(1000, None, false), None);
        assert!(!single.root_processes(true));
    }

    /// A plain run's host image: no on-disk id shows as the sandbox user's (1000) or its
    /// group's, every other id of the sandbox's map as the sandbox's namespace shows it.
    #[test]
    fn a_plain_runs_image_map_leaves_out_only_the_sandbox_users_ids() {
        let base = ROOT_INVOKER_BASE + MAP_SIZE;
        let range = SubRange {
            start: base,
            count: MAP_SIZE,
        };
        let p = plan(&host(0, None, false), Some(range));
        let (uid, gid) = p.image_map_texts_without_sandbox_user();
        let expected = format!("0 {base} 1000\n1001 {} 64535\n", base + 1001);
        assert_eq!(uid, expected);
        assert_eq!(gid, expected);
        // At either end of a line, and outside every line: nothing to split.
        let map = [line(0, 500, 10)];
        assert_eq!(without_inside(&map, 0), [line(1, 501, 9)]);
        assert_eq!(without_inside(&map, 9), [line(0, 500, 9)]);
        assert_eq!(without_inside(&map, 10), map);
    }

    /// For a mount map (inside = on-disk id, outside = host id seen through the mount).
    fn inside_of_disk(map: &[MapLine], disk: u32) -> Option<u32> {
        map.iter()
            .find(|l| disk >= l.inside && disk - l.inside < l.count)
            .map(|l| l.outside + (disk - l.inside))
    }

    #[test]
    fn concurrent_root_sandboxes_get_distinct_ranges_outside_every_subuid_range() {
        let dir = tempfile::tempdir().unwrap();
        let ranges = dir.path().join("ranges");
        // /etc/subuid hands out the first slot above the base: it must be skipped.
        let taken = [SubRange {
            start: ROOT_INVOKER_BASE + 5,
            count: 10,
        }];
        let a = claim_root_range(&ranges, &taken).unwrap();
        let b = claim_root_range(&ranges, &taken).unwrap();
        assert_ne!(a.range, b.range, "two live sandboxes share an id range");
        for r in [a.range, b.range] {
            assert!(
                r.start >= ROOT_INVOKER_BASE + MAP_SIZE,
                "{r:?} overlaps /etc/subuid"
            );
        }
        // A released range is reused.
        let freed = a.range;
        drop(a);
        assert_eq!(claim_root_range(&ranges, &taken).unwrap().range, freed);
    }

    #[test]
    fn unprivileged_invoker_without_subids_gets_single_map_and_a_reason() {
        let p = plan(&host(1234, None, true), None);
        assert_eq!(p.uid_map, vec![line(1234, 1234, 1)]);
        assert_eq!(
            p.writer,
            MapWriter::Direct {
                deny_setgroups: true
            }
        );
        assert!(p.root_unavailable.unwrap().contains("/etc/subuid"));
        let sub = Some(SubRange {
            start: 100000,
            count: 65536,
        });
        let p = plan(&host(1234, sub, false), None);
        assert!(p.root_unavailable.unwrap().contains("uidmap"));
    }

    #[test]
    fn unprivileged_invoker_with_subids_maps_root_to_the_range_and_itself_to_itself() {
        let sub = Some(SubRange {
            start: 100000,
            count: 65536,
        });
        let p = plan(&host(1234, sub, true), None);
        assert_eq!(p.root_unavailable, None);
        assert_eq!(p.writer, MapWriter::Helpers);
        assert_eq!(inside_of(&p.uid_map, 1234), Some(1234));
        assert_eq!(inside_of(&p.uid_map, 100000), Some(0));
        assert_eq!(
            inside_of(&p.uid_map, 0),
            None,
            "host root must stay unmapped"
        );
        assert_disjoint(&p.uid_map);
    }

    #[test]
    fn proposed_subordinate_ranges_overlap_no_range_other_users_hold() {
        // T1: a fake subuid/subgid pair where the conventional 100000 and the next slots are
        // taken (by name, by uid, partially, and only in subgid).
        let subuid = "# admins\nalice:100000:65536\n1002:165536:100\nbob:300000:1\nbad\n";
        let subgid = "alice:100000:65536\ncarol:400000:65536\n";
        let cmd = propose_subids("dev", subuid, subgid);
        assert_eq!(
            cmd,
            "usermod --add-subuids 196608-262143 --add-subgids 196608-262143 dev"
        );
        let mut taken = all_subranges(subuid);
        taken.extend(all_subranges(subgid));
        let r = free_range(&taken, PROPOSAL_FLOOR, MAP_SIZE).unwrap();
        for t in &taken {
            assert!(
                r.start + r.count <= t.start || t.start + t.count <= r.start,
                "{r:?} overlaps {t:?}"
            );
        }
        // The refusal of `--root` carries the same free range.
        let mut h = host(1234, None, true);
        h.taken = taken;
        let reason = plan(&h, None).root_unavailable.unwrap();
        assert!(reason.contains("196608-262143"), "{reason}");
        // A full id space yields no proposal rather than an overlapping one.
        let all = [SubRange {
            start: 0,
            count: u32::MAX,
        }];
        assert_eq!(free_range(&all, PROPOSAL_FLOOR, MAP_SIZE), None);
    }

    #[test]
    fn map_text_is_one_line_per_range() {
        assert_eq!(
            render(&[line(0, 5, 1), line(1, 9, 2)]),
            "0 5 1\n1 9 2\n".to_owned()
        );
    }
}
