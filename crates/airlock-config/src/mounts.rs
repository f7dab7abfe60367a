//! Mount validation (C3) and the sensitive-path rules shared with workspace validation.
//!
//! Order of checks for each `[[mount]]` (the first failing check is reported; checks of other
//! mounts continue): name charset → duplicate name → absolute, normalized path → not `/` →
//! exists, every component a real directory (no symbolic link anywhere, checked with
//! `lstat` per prefix) → not inside `/dev`, `/proc` or `/sys` → not the home directory → does
//! not contain the home directory → not, inside, or containing a credential root or an
//! airlock root → no overlap with the workspace → no overlap with an earlier mount. At most
//! [`MAX_MOUNTS`] entries.
//!
//! Why no symlinks at all: a symlink component lets whoever controls it redirect the mapping
//! after validation (time-of-check/time-of-use), and hides which directory is really mapped.
//! Symlink checks run against the path as written; credential roots are compared against both
//! the literal and the canonical home so a symlinked `/home` cannot hide `~/.ssh`.

use std::collections::HashSet;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::diagnostics::Diagnostic;
use crate::effective::Mount;
use crate::parse::ParsedFile;
use crate::roots::Roots;

/// Most `[[mount]]` entries a user config may declare.
pub const MAX_MOUNTS: usize = 16;

/// Home-relative paths that hold credentials or browser profiles; never mapped (C3).
pub const CREDENTIAL_ROOTS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".docker",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".local/share/keyrings",
    ".local/share/password-store",
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".config/vivaldi",
    ".var/app",
];

/// Whether a mount name matches `[a-z0-9][a-z0-9_-]{0,31}`.
pub fn valid_mount_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

/// Whether `a` and `b` are the same directory or one lies inside the other.
pub fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The directories no mapping may be, contain or lie inside: credential roots (literal and
/// canonical home) and airlock's own roots.
pub fn protected_paths(roots: &Roots) -> Vec<PathBuf> {
    let mut homes = vec![roots.home.clone()];
    if let Ok(c) = roots.home.canonicalize() {
        if c != roots.home {
            homes.push(c);
        }
    }
    let mut out: Vec<PathBuf> = homes
        .iter()
        .flat_map(|h| CREDENTIAL_ROOTS.iter().map(move |r| h.join(r)))
        .collect();
    for own in roots.own_roots() {
        out.push(own.to_owned());
        if let Ok(c) = own.canonicalize() {
            out.push(c);
        }
    }
    out
}

/// Directories every sandbox has its own of (device nodes, proc, sysfs): a host directory
/// inside one would be hidden by the sandbox's, or cannot be id-mapped (devtmpfs).
pub const SANDBOX_OWN: &[&str] = &["/dev", "/proc", "/sys"];

/// Why `path` may not be mapped into a sandbox at all (`/`, the home, a credential or airlock
/// root, anything containing one of them, or anything inside [`SANDBOX_OWN`]), or `None`.
pub fn sensitive_reason(path: &Path, roots: &Roots) -> Option<String> {
    if path == Path::new("/") {
        return Some("`/` cannot be mapped: it is the whole host".to_owned());
    }
    if let Some(own) = SANDBOX_OWN.iter().find(|d| path.starts_with(d)) {
        return Some(format!(
            "{} lies inside {own}, which is the sandbox's own (its {own} would hide it); \
             move the directory elsewhere, e.g. under /tmp or your home",
            path.display()
        ));
    }
    let mut homes = vec![roots.home.clone()];
    homes.extend(roots.home.canonicalize().ok());
    if homes.iter().any(|h| h == path) {
        return Some(
            "the home directory itself cannot be mapped: it holds credentials \
             (the sandbox has its own home at the same path)"
                .to_owned(),
        );
    }
    if homes.iter().any(|h| h.starts_with(path)) {
        return Some(format!(
            "{} contains the home directory, which cannot be mapped",
            path.display()
        ));
    }
    protected_paths(roots).into_iter().find_map(|p| {
        let relation = if path == p {
            "is"
        } else if path.starts_with(&p) {
            "lies inside"
        } else if p.starts_with(path) {
            "contains"
        } else {
            return None;
        };
        Some(format!(
            "{} {relation} {}, which holds credentials or airlock's own state and is never mapped",
            path.display(),
            p.display()
        ))
    })
}

/// Checks that `path` is absolute and normalized and that every prefix exists and is a real
/// directory (not a symbolic link). Returns a message for the first failure.
pub fn check_real_directory(path: &Path) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!("{} is not an absolute path", path.display()));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!(
            "{} contains `.` or `..`; write the normalized path",
            path.display()
        ));
    }
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        match std::fs::symlink_metadata(&prefix) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "{} has a symbolic link component ({}); use the real path",
                    path.display(),
                    prefix.display()
                ));
            }
            Ok(m) if !m.is_dir() => {
                return Err(format!("{} is not a directory", prefix.display()));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(format!("{} does not exist", prefix.display()));
            }
            Err(e) => return Err(format!("cannot inspect {}: {e}", prefix.display())),
        }
    }
    Ok(())
}

/// Validates the user config's mounts against each other, the workspace and the protected
/// paths, pushing one diagnostic per rejected mount.
pub(crate) fn validate(
    file: &ParsedFile,
    roots: &Roots,
    workspace: Option<&Path>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Mount> {
    let raw = &file.raw.mount;
    if file.mount_entries > MAX_MOUNTS {
        diags.push(file.diag(
            &format!("mount[{MAX_MOUNTS}]"),
            format!(
                "at most {MAX_MOUNTS} mounts are allowed, found {}",
                file.mount_entries
            ),
        ));
    }
    let mut names = HashSet::new();
    let mut accepted: Vec<Mount> = Vec::new();
    // `i` is the entry's place in the file, so an earlier entry that failed to parse (and is
    // not in `raw`) does not shift the index and line of the ones after it.
    for (&i, m) in file.mount_index.iter().zip(raw) {
        if !valid_mount_name(&m.name) {
            diags.push(file.diag(
                &format!("mount[{i}].name"),
                format!(
                    "invalid mount name {:?}: use [a-z0-9][a-z0-9_-]{{0,31}}",
                    m.name
                ),
            ));
        } else if !names.insert(m.name.as_str()) {
            diags.push(file.diag(
                &format!("mount[{i}].name"),
                format!("duplicate mount name {:?}", m.name),
            ));
        }
        // Rebuilt from its components: `/srv/data/` and `/srv//data` become `/srv/data`.
        let path: PathBuf = Path::new(&m.path).components().collect();
        match check_path(&path, roots, workspace, &accepted) {
            Ok(()) => accepted.push(Mount {
                name: m.name.clone(),
                sandbox_path: path.clone(),
                host_path: path,
                read_only: m.read_only,
            }),
            Err(message) => diags.push(file.diag(&format!("mount[{i}].path"), message)),
        }
    }
    accepted
}

fn check_path(
    path: &Path,
    roots: &Roots,
    workspace: Option<&Path>,
    earlier: &[Mount],
) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!("{} is not an absolute path", path.display()));
    }
    if path == Path::new("/") {
        return Err("`/` cannot be mapped: it is the whole host".to_owned());
    }
    check_real_directory(path)?;
    if let Some(reason) = sensitive_reason(path, roots) {
        return Err(reason);
    }
    if let Some(ws) = workspace {
        if overlaps(path, ws) {
            return Err(format!(
                "{} overlaps the workspace {}",
                path.display(),
                ws.display()
            ));
        }
    }
    if let Some(other) = earlier.iter().find(|m| overlaps(path, &m.host_path)) {
        return Err(format!(
            "{} overlaps mount {:?} ({})",
            path.display(),
            other.name,
            other.host_path.display()
        ));
    }
    Ok(())
}
