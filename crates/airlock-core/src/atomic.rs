//! Atomic, durable replacement of one file (PRODUCT R1).
//!
//! Order of operations in [`write_atomic`] ([`Durability::Durable`]), each failure naming its
//! step:
//! 1. open the target's directory (`O_DIRECTORY`);
//! 2. create a temporary file *in that directory* with `O_CREAT|O_EXCL|O_NOFOLLOW`, named
//!    `.<target>.tmp.<pid>.<n>`, so it is on the same filesystem (rename stays atomic) and a
//!    pre-planted file or symlink of that name is never reused;
//! 3. set the requested mode with `fchmod` (the umask must not decide a state file's mode);
//! 4. write every byte; 5. `fsync` the file (data reaches disk before the name points at it);
//! 6. `renameat` over the target (atomic: readers see the old or the new content, never a mix);
//! 7. `fsync` the directory (the rename itself survives a crash).
//!
//! Invariants: on any failure before step 6 the temporary file is unlinked. A process killed
//! between steps 2 and 6 leaves a temporary file behind; such names are recognised by
//! [`is_temp_name_for`] and never mistaken for records, and [`remove_stray_temps`] deletes them
//! (the state store does so while it holds the record's lock, when no writer can be mid-flight).
//!
//! [`write_atomic_with`] takes a [`Durability`]: what a write must survive decides whether it
//! pays for the flushes (steps 5 and 7; on a loaded disk each waits for a journal commit, up to
//! tens of milliseconds). Both levels are atomic for every process (step 6): a reader sees the
//! old or the new content, never a mix, also when the writer is killed at any point.
//! - [`Durability::Durable`]: steps 5 and 7; the new content survives a machine crash (R1).
//! - [`Durability::Atomic`]: no flush. After a machine crash the file holds an earlier content
//!   or the new one on filesystems that write a file's data before committing a rename that
//!   replaces another file (ext4's default `auto_da_alloc`, btrfs); elsewhere (XFS) it may be
//!   left empty, which a reader reports as corrupt, naming the file. Only for files whose
//!   newest content describes processes a machine crash ends anyway (see the lifecycle's
//!   module docs for which writes those are).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

/// How many fresh temporary names are tried before giving up on `EEXIST`.
const TEMP_NAME_ATTEMPTS: u32 = 16;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A failed atomic write; each variant is one step of the sequence in the module docs.
#[derive(Debug, thiserror::Error)]
pub enum AtomicWriteError {
    #[error("cannot write {path} atomically: the path has no file name")]
    NoFileName { path: PathBuf },
    #[error("cannot open directory {dir} to write {path}: {source}")]
    OpenDir {
        path: PathBuf,
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create temporary file {temp} for {path}: {source}")]
    CreateTemp {
        path: PathBuf,
        temp: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot set mode {mode:o} on temporary file {temp} for {path}: {source}")]
    Chmod {
        path: PathBuf,
        temp: PathBuf,
        mode: u32,
        #[source]
        source: io::Error,
    },
    #[error("cannot write temporary file {temp} for {path}: {source}")]
    Write {
        path: PathBuf,
        temp: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot fsync temporary file {temp} for {path}: {source}")]
    SyncFile {
        path: PathBuf,
        temp: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot rename {temp} over {path}: {source}")]
    Rename {
        path: PathBuf,
        temp: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot fsync directory {dir} after replacing {path}: {source}")]
    SyncDir {
        path: PathBuf,
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Whether an I/O error says the filesystem (or the user's quota) has no space left.
pub fn is_out_of_space(e: &io::Error) -> bool {
    let raw = e.raw_os_error();
    raw == Some(rustix::io::Errno::NOSPC.raw_os_error())
        || raw == Some(rustix::io::Errno::DQUOT.raw_os_error())
}

impl AtomicWriteError {
    /// Whether the write failed because the disk (or quota) is full.
    pub fn is_out_of_space(&self) -> bool {
        match self {
            AtomicWriteError::NoFileName { .. } => false,
            AtomicWriteError::OpenDir { source, .. }
            | AtomicWriteError::CreateTemp { source, .. }
            | AtomicWriteError::Chmod { source, .. }
            | AtomicWriteError::Write { source, .. }
            | AtomicWriteError::SyncFile { source, .. }
            | AtomicWriteError::Rename { source, .. }
            | AtomicWriteError::SyncDir { source, .. } => is_out_of_space(source),
        }
    }
}

/// What a write must survive (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Survives a machine crash: file and directory flushed (R1).
    Durable,
    /// Atomic for every process, nothing flushed (see the module docs for a machine crash).
    Atomic,
}

/// Replaces `path` with `bytes`, file mode `mode` (e.g. `0o600`), atomically and durably.
///
/// A symlink at `path` is replaced, never followed. See the module docs for the sequence.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AtomicWriteError> {
    write_atomic_with(path, bytes, mode, Durability::Durable)
}

/// [`write_atomic`] flushing only what `durability` asks for (see the module docs).
pub fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<(), AtomicWriteError> {
    let written = replace(path, bytes, mode, durability);
    #[cfg(test)]
    if written.is_ok() {
        journal::WRITES.with(|w| w.borrow_mut().push((path.to_path_buf(), durability)));
    }
    written
}

/// Flushes what [`write_atomic_with`] left unflushed: the file now at `path` (its data) and its
/// directory (the name pointing at it), steps 5 and 7 of the module docs after the fact. A
/// file written with [`Durability::Atomic`] and flushed this way is what a
/// [`Durability::Durable`] write leaves once it returns, except that a machine crash *before*
/// the flush ends may show the earlier content (or, on XFS, an empty file) as for any atomic
/// write. So a caller can overlap this flush with other work, provided it waits for it before
/// whatever must only happen once the content is durable.
pub fn flush(path: &Path) -> Result<(), AtomicWriteError> {
    let sync_file = |e: io::Error| AtomicWriteError::SyncFile {
        path: path.to_path_buf(),
        temp: path.to_path_buf(),
        source: e,
    };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| sync_file(e.into()))?;
    rustix::fs::fsync(&file).map_err(|e| sync_file(e.into()))?;
    let dir = parent_dir(path);
    let sync_dir = |e: io::Error| AtomicWriteError::SyncDir {
        path: path.to_path_buf(),
        dir: dir.clone(),
        source: e,
    };
    let dir_fd = rustix::fs::open(
        &dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| sync_dir(e.into()))?;
    rustix::fs::fsync(&dir_fd).map_err(|e| sync_dir(e.into()))?;
    #[cfg(test)]
    journal::WRITES.with(|w| {
        w.borrow_mut()
            .push((path.to_path_buf(), Durability::Durable))
    });
    Ok(())
}

/// Every successful write of this thread, with its durability (the unit tests' view of which
/// writes pay for a flush).
#[cfg(test)]
pub(crate) mod journal {
    use std::cell::RefCell;
    use std::path::PathBuf;

    thread_local! {
        pub(crate) static WRITES: RefCell<Vec<(PathBuf, super::Durability)>> =
            const { RefCell::new(Vec::new()) };
    }

    /// Takes (and clears) this thread's journal.
    pub(crate) fn take() -> Vec<(PathBuf, super::Durability)> {
        WRITES.with(|w| std::mem::take(&mut *w.borrow_mut()))
    }

    /// This thread's journal so far, left in place.
    pub(crate) fn peek() -> Vec<(PathBuf, super::Durability)> {
        WRITES.with(|w| w.borrow().clone())
    }

    /// Appends what another thread took from its journal (a flush it ran for this one).
    pub(crate) fn extend(writes: Vec<(PathBuf, super::Durability)>) {
        WRITES.with(|w| w.borrow_mut().extend(writes));
    }
}

fn replace(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<(), AtomicWriteError> {
    let file_name = path
        .file_name()
        .ok_or_else(|| AtomicWriteError::NoFileName {
            path: path.to_path_buf(),
        })?;
    let dir = parent_dir(path);
    let dir_fd = rustix::fs::open(
        &dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| AtomicWriteError::OpenDir {
        path: path.to_path_buf(),
        dir: dir.clone(),
        source: e.into(),
    })?;

    let (temp_name, file) = create_temp(&dir_fd, &dir, path, file_name)?;
    let temp = dir.join(&temp_name);
    let filled = fill_temp(file, path, &temp, bytes, mode, durability);
    if let Err(err) = filled {
        // Best effort: the write already failed; a leftover temp is still recognisable.
        let _ = rustix::fs::unlinkat(&dir_fd, &temp_name, AtFlags::empty());
        return Err(err);
    }
    if let Err(e) = rustix::fs::renameat(&dir_fd, &temp_name, &dir_fd, file_name) {
        let _ = rustix::fs::unlinkat(&dir_fd, &temp_name, AtFlags::empty());
        return Err(AtomicWriteError::Rename {
            path: path.to_path_buf(),
            temp,
            source: e.into(),
        });
    }
    match durability {
        Durability::Durable => rustix::fs::fsync(&dir_fd).map_err(|e| AtomicWriteError::SyncDir {
            path: path.to_path_buf(),
            dir,
            source: e.into(),
        }),
        Durability::Atomic => Ok(()),
    }
}

/// True when `candidate` is a temporary name [`write_atomic`] uses for the file `target`
/// (`.<target>.tmp.<digits>.<digits>`), and nothing else: a record literally named
/// `x.tmp` never matches the temporaries of a record named `x`.
pub fn is_temp_name_for(candidate: &OsStr, target: &OsStr) -> bool {
    let prefix = temp_prefix(target);
    let Some(rest) = candidate.as_bytes().strip_prefix(prefix.as_bytes()) else {
        return false;
    };
    let mut parts = rest.split(|b| *b == b'.');
    let numeric =
        |p: Option<&[u8]>| p.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit));
    numeric(parts.next()) && numeric(parts.next()) && parts.next().is_none()
}

/// Deletes temporaries of `target` left in `dir` by killed writers; returns how many.
///
/// Only call this while no writer of `target` can be running (the state store holds the
/// record's lock), or an in-flight write would lose its temporary file.
pub fn remove_stray_temps(dir: &Path, target: &OsStr) -> io::Result<usize> {
    remove_stray_temps_of(dir, &[target])
}

/// [`remove_stray_temps`] for several targets of one directory, in a single listing of it (a
/// state record and its tombstone: every record write cleans up after both).
pub fn remove_stray_temps_of(dir: &Path, targets: &[&OsStr]) -> io::Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if targets.iter().any(|t| is_temp_name_for(&name, t)) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn temp_prefix(target: &OsStr) -> OsString {
    let mut prefix = OsString::from(".");
    prefix.push(target);
    prefix.push(".tmp.");
    prefix
}

fn create_temp(
    dir_fd: &rustix::fd::OwnedFd,
    dir: &Path,
    path: &Path,
    file_name: &OsStr,
) -> Result<(OsString, File), AtomicWriteError> {
    let mut last = Errno::EXIST;
    for _ in 0..TEMP_NAME_ATTEMPTS {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut name = temp_prefix(file_name).into_vec();
        name.extend_from_slice(format!("{}.{}{:09}", std::process::id(), n, nanos).as_bytes());
        let name = OsString::from_vec(name);
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(dir_fd, &name, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((name, File::from(fd))),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(e) => {
                last = e;
                break;
            }
        }
    }
    Err(AtomicWriteError::CreateTemp {
        path: path.to_path_buf(),
        temp: dir.join(temp_prefix(file_name)),
        source: last.into(),
    })
}

fn fill_temp(
    mut file: File,
    path: &Path,
    temp: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<(), AtomicWriteError> {
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|source| AtomicWriteError::Chmod {
            path: path.to_path_buf(),
            temp: temp.to_path_buf(),
            mode,
            source,
        })?;
    file.write_all(bytes)
        .map_err(|source| AtomicWriteError::Write {
            path: path.to_path_buf(),
            temp: temp.to_path_buf(),
            source,
        })?;
    let synced = match durability {
        Durability::Durable => file.sync_all(),
        Durability::Atomic => Ok(()),
    };
    synced.map_err(|source| AtomicWriteError::SyncFile {
        path: path.to_path_buf(),
        temp: temp.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn replaces_content_and_sets_exact_mode_despite_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"old", 0o644).unwrap();
        write_atomic(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(
            leftovers.len(),
            1,
            "no temporary file may remain after success"
        );
    }

    #[test]
    fn every_durability_replaces_the_file_whole_with_its_exact_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        for (n, durability) in [Durability::Durable, Durability::Atomic]
            .into_iter()
            .enumerate()
        {
            let text = format!("version {n}");
            write_atomic_with(&path, text.as_bytes(), 0o640, durability).unwrap();
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                text,
                "{durability:?}"
            );
            assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o640);
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                1,
                "{durability:?}"
            );
        }
    }

    #[test]
    fn replaces_a_symlink_instead_of_writing_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        let path = dir.path().join("state.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomic(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn failure_names_the_path_and_the_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("state.json");
        let err = write_atomic(&path, b"x", 0o600).unwrap_err();
        assert!(matches!(&err, AtomicWriteError::OpenDir { path: p, .. } if p == &path));
        assert!(err.to_string().contains("state.json"));
    }

    #[test]
    fn temp_names_are_recognised_only_for_their_own_target() {
        let t = OsStr::new;
        assert!(is_temp_name_for(t(".a.json.tmp.12.345"), t("a.json")));
        assert!(!is_temp_name_for(t(".a.json.tmp.12.345"), t("a")));
        assert!(!is_temp_name_for(t(".a.tmp.tmp.12.345"), t("a")));
        assert!(!is_temp_name_for(t(".a.tmp.12"), t("a")));
        assert!(!is_temp_name_for(t(".a.tmp.12.3x"), t("a")));
        assert!(!is_temp_name_for(t("a"), t("a")));
    }

    #[test]
    fn stray_temps_are_removed_and_other_files_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".a.tmp.1.2"), b"torn").unwrap();
        std::fs::write(dir.path().join(".a.tmp.tmp.1.2"), b"other").unwrap();
        std::fs::write(dir.path().join("a"), b"record").unwrap();
        assert_eq!(remove_stray_temps(dir.path(), OsStr::new("a")).unwrap(), 1);
        assert!(dir.path().join(".a.tmp.tmp.1.2").exists());
        assert!(dir.path().join("a").exists());
    }

    #[test]
    fn stray_temps_of_several_targets_go_in_one_listing() {
        let dir = tempfile::tempdir().unwrap();
        for name in [".a.tmp.1.2", "..a.removed.tmp.3.4", ".b.tmp.5.6", "a"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let targets = [OsStr::new("a"), OsStr::new(".a.removed")];
        assert_eq!(remove_stray_temps_of(dir.path(), &targets).unwrap(), 2);
        assert!(!dir.path().join(".a.tmp.1.2").exists());
        assert!(!dir.path().join("..a.removed.tmp.3.4").exists());
        assert!(dir.path().join(".b.tmp.5.6").exists());
        assert!(dir.path().join("a").exists());
    }
}
