//! Resource limits (PRODUCT I8) through cgroups: v2 where the controllers are delegated to us,
//! else v1 hierarchies mounted per controller.
pub mod detect;

use std::path::PathBuf;

use detect::Layout;

/// Directories in which airlock's `airlock` parent cgroup lives (one per hierarchy used), or
/// `None` when no hierarchy offers memory, pids and cpu.
///
/// v2: the parent of this process's cgroup (the "no internal processes" rule forbids enabling
/// controllers below a cgroup that holds processes, so sandboxes are siblings of our own
/// cgroup), or the root when we sit in it. v1: this process's cgroup in each controller's
/// hierarchy, so sandbox limits nest inside whatever limits airlock itself runs under.
pub fn base_dirs(layout: &Layout) -> Option<Vec<PathBuf>> {
    if let (Some(v2), true) = (&layout.v2, layout.v2_missing().is_empty()) {
        let base = if v2.own_dir == v2.mount_point {
            v2.own_dir.clone()
        } else {
            v2.own_dir
                .parent()
                .map_or_else(|| v2.own_dir.clone(), PathBuf::from)
        };
        return Some(vec![base]);
    }
    if !layout.v1_missing().is_empty() {
        return None;
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for m in &layout.v1 {
        if !dirs.contains(&m.own_dir) {
            dirs.push(m.own_dir.clone());
        }
    }
    Some(dirs)
}
