//! Protected paths inside writable workspaces (issue 9.9): files the host later executes or
//! trusts (`.airlock/`, `.git/hooks/`, `.git/config`, …) are read-only inside the sandbox, and
//! every directory between the workspace root and a protected path is pinned, so the protected
//! path cannot be renamed or removed either.
//!
//! A read-only bind alone is not enough: `mv .git .git-old; mkdir .git; echo evil >
//! .git/config` renames the directory holding the bind away and builds a new one. So every
//! ancestor below the workspace root (`.git`, `.git/modules`, `.git/modules/<name>`) is bound
//! onto itself, writable as before: a mount point cannot be renamed or removed (`EBUSY`), while
//! git keeps writing objects, refs and the index next to the protected files.
//!
//! The workspace is hostile input: nothing here follows a symbolic link. Every component is
//! opened with `O_PATH | O_NOFOLLOW` relative to its parent's descriptor, a symbolic link on a
//! protected path refuses the start (naming the path), and mounts are made through those
//! descriptors (`open_tree(OPEN_TREE_CLONE)` + `move_mount`), so a path swapped between the
//! check and the mount cannot redirect a mount. This runs before any sandbox process exists.
//!
//! A root invoker's workspace is an id-mapped mount (`idmounts.rs`): a clone made by
//! `open_tree` keeps the id mapping of the mount it clones, so pins and protected binds show
//! the same owners, and a path created here as the sandbox user belongs to the invoker on disk.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{MoveMountFlags, OpenTreeFlags};

use super::{remount_bind, RootfsError};
use crate::spec::{IfMissing, Protected};

/// What happens at one path, decided before any mount is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    /// Bound onto itself, flags unchanged: cannot be renamed or removed.
    Pin,
    /// Bound onto itself read-only.
    Protect,
}

/// Applies `rules` to the workspace mounted at `workspace` (a path under the new root).
/// `owner` is who a created mount point belongs to (the sandbox user).
///
/// First every rule is resolved (patterns expanded, missing paths created as the rule says),
/// then the mounts are made outermost first, each target opened afresh from the workspace root:
/// a mount attaches to the mount its path crosses, so a protected file must be bound *after*
/// the directory pinned above it, through that pin.
pub(super) fn apply(
    workspace: &Path,
    rules: &[Protected],
    owner: (u32, u32),
) -> Result<(), RootfsError> {
    let mut ops: BTreeMap<Vec<String>, Op> = BTreeMap::new();
    // One descriptor of the workspace root for every rule: nothing is mounted until all of them
    // are resolved, so it names what a fresh open would.
    let root = open_dir_path(workspace)?;
    for rule in rules {
        let components: Vec<&str> = rule.path.split('/').collect();
        let mut found = Vec::new();
        resolve(
            workspace,
            &root,
            &components,
            Vec::new(),
            rule,
            owner,
            &mut found,
        )?;
        for (rel, is_dir) in found {
            if rule.files_only && is_dir {
                continue;
            }
            for depth in 1..rel.len() {
                ops.entry(rel[..depth].to_vec()).or_insert(Op::Pin);
            }
            ops.insert(rel, Op::Protect);
        }
    }
    let mut ordered: Vec<(Vec<String>, Op)> = ops.into_iter().collect();
    ordered.sort_by_key(|(rel, _)| rel.len());
    for (rel, op) in ordered {
        let (path, fd) = open_fresh(workspace, &rel)?;
        let flags = match op {
            Op::Pin => MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Op::Protect => MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        };
        bind_self(&path, &fd, flags)?;
    }
    Ok(())
}

/// Opens `rel` below `workspace` component by component, refusing symbolic links.
fn open_fresh(workspace: &Path, rel: &[String]) -> Result<(PathBuf, OwnedFd), RootfsError> {
    let mut fd = open_dir_path(workspace)?;
    let mut path = workspace.to_path_buf();
    for name in rel {
        path.push(name);
        let next = open_nofollow(&fd, name).map_err(|e| protect_err(&path, e))?;
        if file_type(&next).map_err(|e| protect_err(&path, e))? == FileType::Symlink {
            return Err(RootfsError::ProtectedLink { path });
        }
        fd = next;
    }
    Ok((path, fd))
}

/// Resolves `rest` below `dir` (whose own path is `at`, relative components `rel`),
/// collecting every existing match as (relative components, is a directory).
#[allow(clippy::too_many_arguments)]
fn resolve(
    at: &Path,
    dir: &OwnedFd,
    rest: &[&str],
    rel: Vec<String>,
    rule: &Protected,
    owner: (u32, u32),
    out: &mut Vec<(Vec<String>, bool)>,
) -> Result<(), RootfsError> {
    let Some((first, tail)) = rest.split_first() else {
        return Ok(());
    };
    let names: Vec<String> = if *first == "*" {
        list_dirs(at, dir)?
    } else {
        vec![(*first).to_owned()]
    };
    for name in names {
        let path = at.join(&name);
        let fd = match open_nofollow(dir, &name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if tail.is_empty() => match create_missing(dir, &name, rule, owner) {
                Some(result) => result.map_err(|e| protect_err(&path, e))?,
                None => continue,
            },
            Err(Errno::NOENT | Errno::NOTDIR) => continue,
            Err(e) => return Err(protect_err(&path, e)),
        };
        let kind = file_type(&fd).map_err(|e| protect_err(&path, e))?;
        if kind == FileType::Symlink {
            return Err(RootfsError::ProtectedLink { path });
        }
        let is_dir = kind == FileType::Directory;
        let mut here = rel.clone();
        here.push(name);
        if tail.is_empty() {
            out.push((here, is_dir));
        } else if is_dir {
            resolve(&path, &fd, tail, here, rule, owner, out)?;
        }
    }
    Ok(())
}

/// Creates a missing protected path as the rule says; `None`: leave it missing.
fn create_missing(
    dir: &OwnedFd,
    name: &str,
    rule: &Protected,
    (uid, gid): (u32, u32),
) -> Option<Result<OwnedFd, Errno>> {
    let made = match rule.if_missing {
        IfMissing::Skip => return None,
        IfMissing::Dir => rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)),
        IfMissing::File => {
            let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW;
            rustix::fs::openat(
                dir,
                name,
                flags | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map(drop)
        }
    };
    Some(made.and_then(|()| {
        rustix::fs::chownat(
            dir,
            name,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )?;
        open_nofollow(dir, name)
    }))
}

/// Directory entries of `dir` that are directories (not links), sorted.
fn list_dirs(at: &Path, dir: &OwnedFd) -> Result<Vec<String>, RootfsError> {
    let readable = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| protect_err(at, e))?;
    let mut names = Vec::new();
    let entries = rustix::fs::Dir::read_from(&readable).map_err(|e| protect_err(at, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| protect_err(at, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if entry.file_type() == FileType::Directory {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn open_dir_path(path: &Path) -> Result<OwnedFd, RootfsError> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| protect_err(path, e))
}

fn open_nofollow(dir: &OwnedFd, name: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn file_type(fd: &OwnedFd) -> Result<FileType, Errno> {
    Ok(FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode))
}

/// Binds the inode behind `fd` onto itself with `flags` (plus what the mount already has),
/// through descriptors only.
fn bind_self(path: &Path, fd: &OwnedFd, flags: MsFlags) -> Result<(), RootfsError> {
    let tree = rustix::mount::open_tree(
        fd.as_fd(),
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )
    .map_err(|e| protect_err(path, e))?;
    rustix::mount::move_mount(
        tree.as_fd(),
        "",
        fd.as_fd(),
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| protect_err(path, e))?;
    // The tree's descriptor now names the attached mount's root: remount exactly that mount.
    remount_bind(
        Path::new(&format!("/proc/self/fd/{}", tree.as_raw_fd())),
        flags,
    )
}

fn protect_err(path: &Path, e: Errno) -> RootfsError {
    RootfsError::Protect {
        path: path.to_path_buf(),
        source: e.into(),
    }
}
