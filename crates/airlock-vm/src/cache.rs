//! The initramfs, built once per airlock binary and guest kernel and kept in the invoker's
//! cache directory, instead of a new ~34 MB archive at every boot.
//!
//! **The key is the archive itself.** [`initramfs::write`] gives the same bytes for the same
//! inputs, so a first pass streams the archive into SHA-256 without writing it (it reads the
//! executable, its libraries and the modules: tens of milliseconds with the CPU's SHA
//! instructions) and the entry is `<sha256>.cpio`. Whatever changes what the guest would boot —
//! a rebuilt airlock, an upgraded libc, another kernel's modules — changes the name; nothing is
//! trusted from timestamps or inode numbers, which a rebuild in place can keep.
//!
//! **An entry is used only when it is safe**: opened without following a link (and without
//! blocking on a FIFO), a regular file owned by the effective user, writable by nobody else,
//! with one link (a hard link could be changed through its other name) and exactly the
//! length the first pass counted (a truncated or half-written entry is rebuilt). The directory
//! must be the effective user's and writable by nobody else, or the cache is refused with the
//! reason. Entries are written under a temporary name in that directory, synced, then renamed
//! into place, all relative to the directory's descriptor; an entry is named by the digest of
//! what was actually written, so an input that changed during the build cannot leave an entry
//! whose name lies.
//!
//! Old entries are pruned after a build: the newest [`KEEP`] stay, and every entry used within
//! [`RECENT`] (a use touches its time), so a VM about to boot another airlock's entry keeps it.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{FileType, Mode, OFlags};
use sha2::{Digest, Sha256};

use crate::initramfs::{self, Contents, InitramfsError};
use crate::kernel::Kernel;

/// Entries kept beside the one just built, newest first.
pub const KEEP: usize = 2;
/// Entries used more recently than this are never pruned.
pub const RECENT: Duration = Duration::from_secs(3600);

/// The cached initramfs could not be found or made.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Initramfs(#[from] InitramfsError),
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the initramfs cache {} is not safe to use: {why}; remove it (airlock rebuilds it) or \
         make it a directory of yours that nobody else can write",
        path.display()
    )]
    Unsafe { path: PathBuf, why: String },
}

/// The cache entry for one set of contents.
#[derive(Debug)]
pub struct Cached {
    /// `<dir>/<sha256>.cpio`.
    pub path: PathBuf,
    /// Whether it was already there (nothing was written).
    pub hit: bool,
    /// Its length in bytes.
    pub len: u64,
    /// The entry, open: it stays the checked file for as long as this is held.
    pub file: File,
}

/// The initramfs for `contents` from the cache in `dir` (created with mode 0700 if missing),
/// built and stored when it is not there or not usable.
pub fn initramfs(dir: &Path, contents: &Contents, kernel: &Kernel) -> Result<Cached, CacheError> {
    let dir_fd = open_dir(dir)?;
    let (digest, len) = initramfs::write(contents, kernel, Digesting::default())?.finish();
    let name = format!("{digest}.cpio");
    if let Some(file) = usable(&dir_fd, &name, len) {
        // A use keeps the entry from being pruned; failing to note it costs nothing else.
        let _ = file.set_modified(SystemTime::now());
        return Ok(Cached {
            path: dir.join(name),
            hit: true,
            len,
            file,
        });
    }
    let (name, len, file) = store(dir, &dir_fd, contents, kernel)?;
    prune(dir, &dir_fd, &name);
    Ok(Cached {
        path: dir.join(name),
        hit: false,
        len,
        file,
    })
}

/// Creates `dir` (0700) if missing and opens it, refusing a link, another user's directory
/// or one that others can write.
fn open_dir(dir: &Path) -> Result<OwnedFd, CacheError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CacheError::Io {
            what: "create",
            path: dir.to_path_buf(),
            source,
        })?;
    let unsafe_dir = |why: String| CacheError::Unsafe {
        path: dir.to_path_buf(),
        why,
    };
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            unsafe_dir("it is a symbolic link or not a directory".into())
        }
        e => CacheError::Io {
            what: "open",
            path: dir.to_path_buf(),
            source: e.into(),
        },
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| CacheError::Io {
        what: "inspect",
        path: dir.to_path_buf(),
        source: e.into(),
    })?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(unsafe_dir(format!(
            "it belongs to uid {}, not to you (uid {me})",
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "others can write it (mode {:o})",
            st.st_mode & 0o7777
        )));
    }
    Ok(fd)
}

/// The entry `name` if it is a regular file of ours, writable by nobody else, with one link
/// and `len` bytes; `None` for anything else (missing, a link, a FIFO, truncated …).
fn usable(dir: &OwnedFd, name: &str, len: u64) -> Option<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let ok = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        && st.st_uid == rustix::process::geteuid().as_raw()
        && st.st_mode & 0o022 == 0
        && st.st_nlink == 1
        && u64::try_from(st.st_size).ok() == Some(len);
    ok.then(|| File::from(fd))
}

/// Builds the archive under a temporary name in `dir`, syncs it and renames it to
/// `<sha256 of what was written>.cpio`. Returns that name, the length and the open entry.
fn store(
    dir: &Path,
    dir_fd: &OwnedFd,
    contents: &Contents,
    kernel: &Kernel,
) -> Result<(String, u64, File), CacheError> {
    let (tmp, file) = create_temporary(dir, dir_fd)?;
    let io_err = |what, source: io::Error| CacheError::Io {
        what,
        path: dir.join(&tmp),
        source,
    };
    let written = (|| {
        let out = Digesting {
            inner: Some(BufWriter::with_capacity(1 << 20, &file)),
            ..Digesting::default()
        };
        let (digest, len) = initramfs::write(contents, kernel, out)?.finish();
        file.sync_all().map_err(|e| io_err("sync", e))?;
        let name = format!("{digest}.cpio");
        rustix::fs::renameat(dir_fd, &tmp, dir_fd, &name)
            .map_err(|e| io_err("rename into place", e.into()))?;
        Ok((name, len))
    })();
    match written {
        Ok((name, len)) => Ok((name, len, file)),
        Err(err) => {
            let _ = rustix::fs::unlinkat(dir_fd, &tmp, rustix::fs::AtFlags::empty());
            Err(err)
        }
    }
}

/// A new file `.tmp-<pid>-<n>.cpio` (0600, exclusive) in `dir`, open for reading and writing.
fn create_temporary(dir: &Path, dir_fd: &OwnedFd) -> Result<(String, File), CacheError> {
    let pid = std::process::id();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for attempt in 0..16u32 {
        let tmp = format!(".tmp-{pid}-{nanos:x}-{attempt}.cpio");
        match rustix::fs::openat(
            dir_fd,
            &tmp,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => return Ok((tmp, File::from(fd))),
            Err(rustix::io::Errno::EXIST) => last = Some(tmp),
            Err(e) => {
                return Err(CacheError::Io {
                    what: "create",
                    path: dir.join(tmp),
                    source: e.into(),
                })
            }
        }
    }
    Err(CacheError::Io {
        what: "create",
        path: dir.join(last.unwrap_or_default()),
        source: io::ErrorKind::AlreadyExists.into(),
    })
}

/// Removes entries (and leftover temporary files) other than `current` that are neither among
/// the newest [`KEEP`] nor used within [`RECENT`]. Best effort: a failure leaves a file.
fn prune(dir: &Path, dir_fd: &OwnedFd, current: &str) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut entries: Vec<(SystemTime, String)> = Vec::new();
    let mut stale_temporaries = Vec::new();
    for entry in read.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().map(str::to_owned) else {
            continue;
        };
        if name == current || !(is_entry_name(&name) || name.starts_with(".tmp-")) {
            continue;
        }
        let Ok(st) = rustix::fs::statat(dir_fd, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        let mtime = SystemTime::UNIX_EPOCH
            + Duration::new(
                u64::try_from(st.st_mtime).unwrap_or(0),
                u32::try_from(st.st_mtime_nsec).unwrap_or(0),
            );
        let recent = now.duration_since(mtime).map_or(true, |age| age < RECENT);
        if recent {
            continue;
        }
        if name.starts_with(".tmp-") {
            stale_temporaries.push(name);
        } else {
            entries.push((mtime, name));
        }
    }
    entries.sort_by_key(|e| std::cmp::Reverse(e.0));
    let old = entries.into_iter().skip(KEEP).map(|(_, name)| name);
    for name in old.chain(stale_temporaries) {
        let _ = rustix::fs::unlinkat(dir_fd, name.as_str(), rustix::fs::AtFlags::empty());
    }
}

/// `<64 lowercase hex digits>.cpio`.
fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(".cpio").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Passes bytes on (when it has somewhere to) and digests them.
struct Digesting<W: Write> {
    inner: Option<W>,
    sha: Sha256,
    len: u64,
}

impl Default for Digesting<BufWriter<&File>> {
    fn default() -> Self {
        Digesting {
            inner: None,
            sha: Sha256::new(),
            len: 0,
        }
    }
}

impl<W: Write> Digesting<W> {
    /// The digest in lowercase hex and the length.
    fn finish(self) -> (String, u64) {
        (format!("{:x}", self.sha.finalize()), self.len)
    }
}

impl<W: Write> Write for Digesting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.inner {
            Some(inner) => inner.write(buf)?,
            None => buf.len(),
        };
        self.sha.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Some(inner) => inner.flush(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
