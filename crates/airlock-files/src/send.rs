//! Sending a tree: walk the source without following any link, the root included (F2).
//!
//! Every file is opened relative to its parent directory's descriptor with `O_NOFOLLOW`, so a
//! symbolic link is never dereferenced, and a directory swapped for a link while the walk runs
//! is sent as that link (or fails), never followed. Files are opened `O_NONBLOCK` (a FIFO swapped
//! in cannot block the walk) and checked with `fstat` after opening: only what is really a
//! regular file is read. Device nodes, FIFOs and sockets are skipped and counted. Bytes are
//! streamed in [`DATA_CHUNK`] pieces whatever the file's size, hashed as they are read (F6); the
//! size is never announced before the bytes. The walk keeps one descriptor per directory level,
//! iteratively (no recursion), at most [`MAX_DEPTH`] levels.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use airlock_protocol::transfer::{DATA_CHUNK, MAX_DEPTH};
use airlock_protocol::{Entry, EntryKind, FileEnd, Message, Mtime, TransferSummary};
use rustix::fs::{openat, readlinkat, statat, AtFlags, Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::error::TransferError;
use crate::progress::Progress;
use crate::wire::Wire;

/// What to send: `name` inside the directory `parent` (opened by the caller's resolution).
#[derive(Debug)]
pub struct Source {
    /// The directory holding the source.
    pub parent: OwnedFd,
    /// The source's name in `parent`; it is never followed.
    pub name: String,
}

/// Which file the walk is at, for error messages.
#[derive(Default)]
struct Trail(Vec<String>);

impl Trail {
    fn with(&self, name: &str) -> String {
        if self.0.is_empty() {
            return name.to_owned();
        }
        let mut path = self.0.join("/");
        path.push('/');
        path.push_str(name);
        path
    }
}

/// A directory being walked.
struct Level {
    dir: Dir,
}

const OPEN_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

fn mtime(stat: &Stat) -> Mtime {
    Mtime {
        secs: stat.st_mtime,
        nanos: u32::try_from(stat.st_mtime_nsec).unwrap_or(0),
    }
}

/// Sends the tree `source` names, ending with `transfer_end`, and returns its counts.
pub fn send_tree(
    wire: &mut Wire,
    source: &Source,
    progress: &dyn Progress,
) -> Result<TransferSummary, TransferError> {
    let mut sender = Sender {
        wire,
        progress,
        summary: TransferSummary::default(),
        trail: Trail::default(),
        buf: vec![0u8; DATA_CHUNK],
    };
    let mut stack: Vec<Level> = Vec::new();
    if let Some(dir) = sender.entry(source.parent.as_fd(), &source.name, None, true)? {
        stack.push(Level { dir });
    }
    while let Some(level) = stack.last_mut() {
        let Some(item) = level.dir.read() else {
            sender.wire.send(&Message::DirEnd)?;
            stack.pop();
            sender.trail.0.pop();
            continue;
        };
        let item = item.map_err(TransferError::io("read directory", &sender.trail.with("")))?;
        let raw = item.file_name();
        if raw == c"." || raw == c".." {
            continue;
        }
        let name = utf8(raw, &sender.trail)?;
        let dir_fd = level
            .dir
            .fd()
            .map_err(TransferError::io("read directory", "."))?;
        let hint = Some(item.file_type());
        if let Some(child) = sender.entry(dir_fd, &name, hint, false)? {
            if stack.len() >= MAX_DEPTH {
                return Err(TransferError::TooDeep {
                    path: sender.trail.with(&name),
                    max: MAX_DEPTH,
                });
            }
            stack.push(Level { dir: child });
        }
    }
    let summary = sender.summary;
    sender.wire.send(&Message::TransferEnd(summary))?;
    sender.wire.flush()?;
    Ok(summary)
}

fn utf8(raw: &CStr, trail: &Trail) -> Result<String, TransferError> {
    raw.to_str()
        .map(str::to_owned)
        .map_err(|_| TransferError::NotUtf8 {
            path: trail.with(&raw.to_string_lossy()),
        })
}

struct Sender<'a> {
    wire: &'a mut Wire,
    progress: &'a dyn Progress,
    summary: TransferSummary,
    trail: Trail,
    buf: Vec<u8>,
}

impl Sender<'_> {
    /// Sends one entry; returns the directory to descend into when it is one. `root` entries
    /// that are special files are an error rather than a skip.
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &str,
        hint: Option<FileType>,
        root: bool,
    ) -> Result<Option<Dir>, TransferError> {
        let path = self.trail.with(name);
        // Device nodes, FIFOs and sockets are never opened: opening a device can act.
        let special = |t| {
            matches!(
                t,
                FileType::CharacterDevice
                    | FileType::BlockDevice
                    | FileType::Fifo
                    | FileType::Socket
            )
        };
        if hint.is_some_and(special) {
            return self.skip(&path, root);
        }
        let fd = match openat(dir, name, OPEN_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return self.symlink(dir, name, &path).map(|()| None),
            // A socket (or a device without a driver) cannot be opened.
            Err(Errno::NXIO) => return self.skip(&path, root),
            Err(errno) => return Err(TransferError::io("open", &path)(errno)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(TransferError::io("stat", &path))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => self.file(&fd, name, &path, &stat).map(|()| None),
            FileType::Directory => {
                self.wire.send(&Message::Entry(Entry {
                    name: name.to_owned(),
                    kind: EntryKind::Dir,
                    mode: stat.st_mode & 0o7777,
                    mtime: mtime(&stat),
                    target: None,
                }))?;
                self.summary.dirs += 1;
                let dir = Dir::new(fd).map_err(TransferError::io("read directory", &path))?;
                self.trail.0.push(name.to_owned());
                Ok(Some(dir))
            }
            FileType::Symlink
            | FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice
            | FileType::Unknown => self.skip(&path, root),
        }
    }

    fn skip(&mut self, path: &str, root: bool) -> Result<Option<Dir>, TransferError> {
        if root {
            return Err(TransferError::Special {
                path: path.to_owned(),
            });
        }
        self.summary.skipped += 1;
        Ok(None)
    }

    fn symlink(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &str,
        path: &str,
    ) -> Result<(), TransferError> {
        let stat = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(TransferError::io("stat", path))?;
        let target =
            readlinkat(dir, name, Vec::new()).map_err(TransferError::io("read link", path))?;
        let target = target.into_string().map_err(|_| TransferError::NotUtf8 {
            path: path.to_owned(),
        })?;
        self.wire.send(&Message::Entry(Entry {
            name: name.to_owned(),
            kind: EntryKind::Symlink,
            mode: 0o777,
            mtime: mtime(&stat),
            target: Some(target),
        }))?;
        self.summary.symlinks += 1;
        Ok(())
    }

    fn file(
        &mut self,
        fd: &OwnedFd,
        name: &str,
        path: &str,
        stat: &Stat,
    ) -> Result<(), TransferError> {
        self.wire.send(&Message::Entry(Entry {
            name: name.to_owned(),
            kind: EntryKind::File,
            mode: stat.st_mode & 0o7777,
            mtime: mtime(stat),
            target: None,
        }))?;
        let mut hash = Sha256::new();
        let mut size = 0u64;
        loop {
            let n = match rustix::io::read(fd, &mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(errno) => return Err(TransferError::io("read", path)(errno)),
            };
            let chunk = &self.buf[..n];
            hash.update(chunk);
            self.wire.send_data(chunk)?;
            size += n as u64;
            self.progress.bytes(n as u64);
        }
        self.wire.send(&Message::FileEnd(FileEnd {
            size,
            sha256: hex::encode(hash.finalize()),
        }))?;
        self.summary.files += 1;
        self.summary.bytes += size;
        self.progress.file();
        Ok(())
    }
}
