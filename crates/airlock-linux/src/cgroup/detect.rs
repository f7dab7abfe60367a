//! Finding the cgroup hierarchy: which controllers are mounted where, as v2 or v1, and where
//! this process sits in each. Pure parsers over `/proc/self/mountinfo` and `/proc/self/cgroup`
//! plus a reader for `cgroup.controllers`, so tests can feed fixtures and a fake tree.
use std::path::{Path, PathBuf};

/// A controller airlock sets limits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The kernel's name for the controller.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted, e.g. `/sys/fs/cgroup/memory`.
    pub mount_point: PathBuf,
    /// The cgroup path shown as the mount's root (field 4 of mountinfo; `/` on the host).
    pub root: String,
    /// v1: controllers named in the super options (`memory`, `cpu`, ...); v2: empty.
    pub v1_controllers: Vec<String>,
    pub v2: bool,
    /// The `favordynmods` super option: task migrations skip an RCU grace period. The kernel
    /// applies it to every hierarchy (it switches the global threadgroup lock).
    pub favordynmods: bool,
}

/// Cgroup mounts found in a mountinfo text, in file order.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    let (pre, post) = line.split_once(" - ")?;
    let pre: Vec<&str> = pre.split(' ').collect();
    let mut post = post.split(' ');
    let fstype = post.next()?;
    let _source = post.next()?;
    let super_opts = post.next().unwrap_or("");
    let root = unescape(pre.get(3)?);
    let mount_point = PathBuf::from(unescape(pre.get(4)?));
    let favordynmods = super_opts.split(',').any(|o| o == "favordynmods");
    match fstype {
        "cgroup2" => Some(Mount {
            mount_point,
            root,
            v1_controllers: Vec::new(),
            v2: true,
            favordynmods,
        }),
        "cgroup" => {
            let v1_controllers = super_opts
                .split(',')
                .filter(|o| {
                    !matches!(
                        *o,
                        "rw" | "ro"
                            | "favordynmods"
                            | "xattr"
                            | "noprefix"
                            | "clone_children"
                            | "cpuset_v2_mode"
                    ) && !o.contains('=')
                })
                .map(str::to_owned)
                .collect();
            Some(Mount {
                mount_point,
                root,
                v1_controllers,
                v2: false,
                favordynmods,
            })
        }
        _ => None,
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of `/proc/self/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Empty for the v2 line (`0::/path`).
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?.to_owned();
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            Some(Membership { controllers, path })
        })
        .collect()
}

/// The directory of this process's cgroup inside `mount`, given its membership path.
fn own_dir(mount: &Mount, path: &str) -> PathBuf {
    let rel = if mount.root != "/" {
        path.strip_prefix(mount.root.as_str()).unwrap_or(path)
    } else {
        path
    };
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount.mount_point.clone()
    } else {
        mount.mount_point.join(rel)
    }
}

/// A space-separated controller list (`cgroup.controllers`, `cgroup.subtree_control`).
pub fn parse_controller_list(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// Where each hierarchy is and what it offers this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The v2 hierarchy: this process's cgroup directory and the controllers it offers.
    pub v2: Option<V2>,
    /// v1 hierarchies holding one of [`Controller::ALL`], with this process's directory.
    pub v1: Vec<V1>,
    /// Some cgroup hierarchy is mounted with `favordynmods` (see [`Mount::favordynmods`]).
    pub favordynmods: bool,
    /// Where a cgroup2 hierarchy is mounted, if any (even without controllers).
    pub v2_mount: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V2 {
    pub mount_point: PathBuf,
    pub own_dir: PathBuf,
    /// Contents of `cgroup.controllers` at `own_dir` (what children could get).
    pub controllers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1 {
    pub controller: Controller,
    pub mount_point: PathBuf,
    pub own_dir: PathBuf,
}

impl Layout {
    /// Builds the layout from mountinfo and `/proc/self/cgroup` texts; `read_file` reads
    /// `cgroup.controllers` (injected for tests).
    pub fn from_texts(
        mountinfo: &str,
        proc_cgroup: &str,
        read_file: impl Fn(&Path) -> Option<String>,
    ) -> Self {
        let mounts = parse_mountinfo(mountinfo);
        let members = parse_proc_cgroup(proc_cgroup);
        let v2 = mounts.iter().find(|m| m.v2).and_then(|m| {
            let member = members.iter().find(|x| x.controllers.is_empty())?;
            let own_dir = own_dir(m, &member.path);
            let controllers = read_file(&own_dir.join("cgroup.controllers"))
                .map(|t| parse_controller_list(&t))
                .unwrap_or_default();
            Some(V2 {
                mount_point: m.mount_point.clone(),
                own_dir,
                controllers,
            })
        });
        let mut v1 = Vec::new();
        for controller in Controller::ALL {
            let Some(m) = mounts
                .iter()
                .find(|m| !m.v2 && m.v1_controllers.iter().any(|c| c == controller.name()))
            else {
                continue;
            };
            let path = members
                .iter()
                .find(|x| x.controllers.iter().any(|c| c == controller.name()))
                .map_or("/", |x| x.path.as_str());
            v1.push(V1 {
                controller,
                mount_point: m.mount_point.clone(),
                own_dir: own_dir(m, path),
            });
        }
        Layout {
            v2,
            v1,
            favordynmods: mounts.iter().any(|m| m.favordynmods),
            v2_mount: mounts.iter().find(|m| m.v2).map(|m| m.mount_point.clone()),
        }
    }

    /// Reads the running system's layout.
    pub fn detect() -> Result<Self, std::io::Error> {
        use crate::sys::fd::read_pseudo_file;
        let mountinfo = read_pseudo_file(Path::new("/proc/self/mountinfo"))?;
        let proc_cgroup = read_pseudo_file(Path::new("/proc/self/cgroup"))?;
        Ok(Self::from_texts(&mountinfo, &proc_cgroup, |p| {
            read_pseudo_file(p).ok()
        }))
    }

    /// v2 controllers of [`Controller::ALL`] missing at this process's cgroup.
    pub fn v2_missing(&self) -> Vec<Controller> {
        match &self.v2 {
            Some(v2) => Controller::ALL
                .into_iter()
                .filter(|c| !v2.controllers.iter().any(|x| x == c.name()))
                .collect(),
            None => Controller::ALL.to_vec(),
        }
    }

    /// v1 controllers of [`Controller::ALL`] that are not mounted.
    pub fn v1_missing(&self) -> Vec<Controller> {
        Controller::ALL
            .into_iter()
            .filter(|c| !self.v1.iter().any(|m| m.controller == *c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
33 30 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
34 30 0:30 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
36 30 0:32 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
";
    const HYBRID_CGROUP: &str =
        "9:name=systemd:/\n8:pids:/\n4:memory:/jobs/abc\n1:cpu,cpuacct:/\n0::/\n";

    #[test]
    fn hybrid_host_uses_v1_controllers_and_sees_empty_v2() {
        let layout = Layout::from_texts(HYBRID_MOUNTINFO, HYBRID_CGROUP, |_| Some(String::new()));
        assert_eq!(layout.v2_missing(), Controller::ALL.to_vec());
        assert!(layout.v1_missing().is_empty());
        let mem = layout
            .v1
            .iter()
            .find(|m| m.controller == Controller::Memory)
            .unwrap();
        assert_eq!(mem.own_dir, PathBuf::from("/sys/fs/cgroup/memory/jobs/abc"));
        let cpu = layout
            .v1
            .iter()
            .find(|m| m.controller == Controller::Cpu)
            .unwrap();
        assert_eq!(cpu.mount_point, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
    }

    #[test]
    fn name_only_hierarchies_do_not_count_as_controllers() {
        let layout = Layout::from_texts(HYBRID_MOUNTINFO, HYBRID_CGROUP, |_| None);
        assert!(layout
            .v1
            .iter()
            .all(|m| m.mount_point != Path::new("/sys/fs/cgroup/systemd")));
    }

    #[test]
    fn unified_host_reads_controllers_at_own_cgroup() {
        let mi = "25 20 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let cg = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n";
        let layout = Layout::from_texts(mi, cg, |p| {
            assert_eq!(p, Path::new("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope/cgroup.controllers"));
            Some("cpu memory pids\n".into())
        });
        assert!(layout.v2_missing().is_empty());
        assert_eq!(layout.v1_missing(), Controller::ALL.to_vec());
    }

    #[test]
    fn container_mount_root_is_stripped_from_own_path() {
        let mi = "40 30 0:29 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let layout = Layout::from_texts(mi, "4:memory:/docker/abc/inner\n", |_| None);
        assert_eq!(
            layout.v1[0].own_dir,
            PathBuf::from("/sys/fs/cgroup/memory/inner")
        );
    }

    #[test]
    fn escaped_mount_points_are_decoded() {
        let mi = "40 30 0:29 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_mountinfo(mi)[0].mount_point,
            PathBuf::from("/mnt/with space")
        );
    }

    #[test]
    fn favordynmods_on_any_hierarchy_is_seen() {
        assert!(!Layout::from_texts(HYBRID_MOUNTINFO, HYBRID_CGROUP, |_| None).favordynmods);
        let mi = HYBRID_MOUNTINFO.replace("cgroup2 cgroup2 rw", "cgroup2 cgroup2 rw,favordynmods");
        let layout = Layout::from_texts(&mi, HYBRID_CGROUP, |_| None);
        assert!(layout.favordynmods);
        assert_eq!(
            layout.v2_mount,
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let mi = HYBRID_MOUNTINFO.replace("rw,memory", "rw,memory,favordynmods");
        let layout = Layout::from_texts(&mi, HYBRID_CGROUP, |_| None);
        assert!(layout.favordynmods, "v1 mounts carry it too");
        assert_eq!(layout.v1_missing(), [], "the option is not a controller");
    }

    #[test]
    fn controller_lists_split_on_any_whitespace() {
        assert_eq!(
            parse_controller_list("cpuset cpu  io\tmemory pids\n"),
            ["cpuset", "cpu", "io", "memory", "pids"]
        );
        assert!(parse_controller_list("\n").is_empty());
    }
}
