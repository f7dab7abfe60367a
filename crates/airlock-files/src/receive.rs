//! Receiving a tree: write it beneath a fresh staging entry, then publish it with one rename
//! (F3, F4).
//!
//! Order of operations:
//! 1. The root is created as `.airlock-partial-<random>` in the target's parent directory,
//!    exclusively (`O_EXCL`, `mkdirat`, `symlinkat` all fail on an existing name), so the
//!    staged tree starts empty and nothing pre-planted is ever written through.
//! 2. Every entry is created in its parent's *descriptor*: names are single validated
//!    components, files are created `O_CREAT|O_EXCL|O_NOFOLLOW`, directories are opened with
//!    `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`. A sender can
//!    name nothing outside the staged root, and a link it sends is created as a link and never
//!    followed. Only regular files, directories and links exist in the format: hard links,
//!    device nodes and FIFOs are never created; modes are applied masked with
//!    [`MODE_MASK`] (no setuid/setgid bit ever survives).
//! 3. File bytes are hashed as they are written and compared with the sender's `file_end`
//!    (size and SHA-256; F6). Directory modes and times are applied when the directory ends
//!    (creating children would change them).
//! 4. After `transfer_end`, the counts are compared with the sender's; then the staged root
//!    is renamed onto the target with `RENAME_NOREPLACE`, or swapped with `RENAME_EXCHANGE`
//!    when replacing (the old tree is then removed from the staging name). No per-file fsync.
//! 5. Any failure removes the staged tree (without following links) and publishes nothing.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use airlock_protocol::transfer::{MAX_DEPTH, MODE_MASK};
use airlock_protocol::{Entry, EntryKind, FileEnd, Message, Mtime, TransferSummary};
use rustix::fs::{
    fchmod, fstat, futimens, mkdirat, openat, openat2, renameat_with, statat, symlinkat, utimensat,
    AtFlags, Mode, OFlags, RenameFlags, ResolveFlags, Timespec, Timestamps, UTIME_OMIT,
};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::error::TransferError;
use crate::progress::Progress;
use crate::remove::remove_tree;
use crate::wire::{Incoming, Wire};

/// Where a received tree lands: `name` inside the directory `parent`.
#[derive(Debug)]
pub struct Target {
    /// The directory the tree is published in (opened by the caller's resolution).
    pub parent: OwnedFd,
    /// The final name.
    pub name: String,
    /// Swap an existing entry at `name` instead of refusing.
    pub replace: bool,
    /// The destination as the user named it, for messages.
    pub display: String,
}

/// Prefix of staging names.
pub const STAGE_PREFIX: &str = ".airlock-partial-";

/// The resolve flags every directory of a received tree is opened with.
pub const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Receives one tree from `wire` and publishes it at `target`.
pub fn receive_tree(
    wire: &mut Wire,
    target: &Target,
    progress: &dyn Progress,
) -> Result<TransferSummary, TransferError> {
    let stage = stage_name()?;
    let mut receiver = Receiver {
        wire,
        progress,
        summary: TransferSummary::default(),
        trail: Vec::new(),
    };
    let result = receiver
        .tree(target.parent.as_fd(), &stage)
        .and_then(|root| receiver.finish().map(|summary| (root, summary)));
    match result {
        Ok((root, summary)) => {
            publish(target, &stage, &root)?;
            Ok(summary)
        }
        Err(err) => {
            let _ignored = remove_tree(target.parent.as_fd(), &stage);
            Err(err)
        }
    }
}

fn stage_name() -> Result<String, TransferError> {
    let mut bytes = [0u8; 8];
    getrandom::getrandom(&mut bytes).map_err(|e| TransferError::Io {
        op: "draw a staging name",
        path: String::new(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(format!("{STAGE_PREFIX}{}", hex::encode(bytes)))
}

/// Identity of the staged root, checked after the rename.
struct Root {
    dev: u64,
    ino: u64,
}

/// A directory being filled.
struct Level {
    fd: OwnedFd,
    mode: u32,
    mtime: Mtime,
}

struct Receiver<'a> {
    wire: &'a mut Wire,
    progress: &'a dyn Progress,
    summary: TransferSummary,
    trail: Vec<String>,
}

fn timestamps(mtime: Mtime) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: mtime.secs,
            tv_nsec: i64::from(mtime.nanos),
        },
    }
}

impl Receiver<'_> {
    fn path(&self, name: &str) -> String {
        let mut parts = self.trail.clone();
        parts.push(name.to_owned());
        parts.join("/")
    }

    fn next_entry(&mut self, when: &'static str) -> Result<Option<Entry>, TransferError> {
        match self.wire.recv_message(when)? {
            Message::Entry(entry) => {
                entry.validate().map_err(|source| TransferError::Entry {
                    path: self.path(""),
                    source,
                })?;
                Ok(Some(entry))
            }
            Message::DirEnd => Ok(None),
            other => Err(TransferError::Unexpected {
                got: other.name(),
                when,
            }),
        }
    }

    /// Receives the whole tree; the root is created as `stage` in `parent`.
    fn tree(&mut self, parent: BorrowedFd<'_>, stage: &str) -> Result<Root, TransferError> {
        let Some(root) = self.next_entry("as the first entry")? else {
            return Err(TransferError::Unexpected {
                got: "dir_end",
                when: "as the first entry",
            });
        };
        let display = root.name.clone();
        let (root_stat, first_level) = self.create(parent, stage, &root, &display, true)?;
        let Some(level) = first_level else {
            return Ok(root_stat);
        };
        self.trail.push(display);
        let mut stack = vec![level];
        while let Some(top) = stack.last() {
            let parent = top.fd.as_fd();
            match self.next_entry("inside a directory")? {
                Some(entry) => {
                    let path = self.path(&entry.name);
                    if let (_, Some(level)) =
                        self.create(parent, &entry.name, &entry, &path, false)?
                    {
                        if stack.len() >= MAX_DEPTH {
                            return Err(TransferError::TooDeep {
                                path,
                                max: MAX_DEPTH,
                            });
                        }
                        self.trail.push(entry.name);
                        stack.push(level);
                    }
                }
                None => {
                    let level = stack.pop().expect("loop holds a level");
                    let path = self.trail.join("/");
                    fchmod(&level.fd, Mode::from_raw_mode(level.mode & MODE_MASK))
                        .map_err(TransferError::io("set the mode of", &path))?;
                    futimens(&level.fd, &timestamps(level.mtime))
                        .map_err(TransferError::io("set the time of", &path))?;
                    self.trail.pop();
                }
            }
        }
        Ok(root_stat)
    }

    /// Creates one entry named `name` in `dir`; a directory is returned open, to be filled.
    /// The identity (device, inode) is taken for the `root` only (one `fstat` per file saved).
    fn create(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &str,
        entry: &Entry,
        path: &str,
        root: bool,
    ) -> Result<(Root, Option<Level>), TransferError> {
        let identity = |fd: BorrowedFd<'_>| -> Result<Root, TransferError> {
            if !root {
                return Ok(Root { dev: 0, ino: 0 });
            }
            let stat = fstat(fd).map_err(TransferError::io("stat", path))?;
            Ok(Root {
                dev: stat.st_dev,
                ino: stat.st_ino,
            })
        };
        match entry.kind {
            EntryKind::File => {
                let fd = openat(
                    dir,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(TransferError::io("create", path))?;
                let root = identity(fd.as_fd())?;
                self.file(fd, entry, path)?;
                Ok((root, None))
            }
            EntryKind::Dir => {
                mkdirat(dir, name, Mode::from_raw_mode(0o700))
                    .map_err(TransferError::io("create directory", path))?;
                let fd = openat2(
                    dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    BENEATH,
                )
                .map_err(TransferError::io("open directory", path))?;
                self.summary.dirs += 1;
                let root = identity(fd.as_fd())?;
                let level = Level {
                    fd,
                    mode: entry.mode,
                    mtime: entry.mtime,
                };
                Ok((root, Some(level)))
            }
            EntryKind::Symlink => {
                let target = entry.target.as_deref().unwrap_or_default();
                symlinkat(target, dir, name).map_err(TransferError::io("create link", path))?;
                utimensat(
                    dir,
                    name,
                    &timestamps(entry.mtime),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(TransferError::io("set the time of", path))?;
                self.summary.symlinks += 1;
                if !root {
                    return Ok((Root { dev: 0, ino: 0 }, None));
                }
                let stat = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(TransferError::io("stat", path))?;
                Ok((
                    Root {
                        dev: stat.st_dev,
                        ino: stat.st_ino,
                    },
                    None,
                ))
            }
        }
    }

    /// Writes one file's bytes and checks them against the sender's `file_end`.
    fn file(&mut self, fd: OwnedFd, entry: &Entry, path: &str) -> Result<(), TransferError> {
        let mut file = File::from(fd);
        let mut hash = Sha256::new();
        let mut size = 0u64;
        let end: FileEnd = loop {
            match self.wire.recv("inside a file")? {
                Incoming::Data(data) => {
                    hash.update(data);
                    file.write_all(data).map_err(|source| TransferError::Io {
                        op: "write",
                        path: path.to_owned(),
                        source,
                    })?;
                    size += data.len() as u64;
                    self.progress.bytes(data.len() as u64);
                }
                Incoming::Message(Message::FileEnd(end)) => break end,
                Incoming::Message(Message::Error(remote)) => {
                    return Err(TransferError::Remote(remote))
                }
                Incoming::Message(other) => {
                    return Err(TransferError::Unexpected {
                        got: other.name(),
                        when: "inside a file",
                    })
                }
            }
        };
        if end.size != size {
            return Err(TransferError::Corrupt {
                path: path.to_owned(),
                what: "size",
            });
        }
        if end.sha256 != hex::encode(hash.finalize()) {
            return Err(TransferError::Corrupt {
                path: path.to_owned(),
                what: "sha256",
            });
        }
        fchmod(&file, Mode::from_raw_mode(entry.mode & MODE_MASK))
            .map_err(TransferError::io("set the mode of", path))?;
        futimens(&file, &timestamps(entry.mtime))
            .map_err(TransferError::io("set the time of", path))?;
        self.summary.files += 1;
        self.summary.bytes += size;
        self.progress.file();
        Ok(())
    }

    /// Reads `transfer_end` and compares the sender's counts with what arrived.
    fn finish(&mut self) -> Result<TransferSummary, TransferError> {
        let sent = match self.wire.recv_message("after the tree")? {
            Message::TransferEnd(sent) => sent,
            other => {
                return Err(TransferError::Unexpected {
                    got: other.name(),
                    when: "after the tree",
                })
            }
        };
        let got = self.summary;
        if (sent.files, sent.dirs, sent.symlinks, sent.bytes)
            != (got.files, got.dirs, got.symlinks, got.bytes)
        {
            return Err(TransferError::Corrupt {
                path: ".".into(),
                what: "entry count",
            });
        }
        Ok(TransferSummary {
            skipped: sent.skipped,
            ..got
        })
    }
}

/// Renames the staged root onto the target (or swaps it in), then checks that what now sits
/// at the target is the root this transfer created.
fn publish(target: &Target, stage: &str, root: &Root) -> Result<(), TransferError> {
    let parent = target.parent.as_fd();
    let fail = |err: TransferError| {
        let _ignored = remove_tree(parent, stage);
        err
    };
    let rename = |flags| renameat_with(parent, stage, parent, target.name.as_str(), flags);
    let swapped = if target.replace {
        match rename(RenameFlags::EXCHANGE) {
            Ok(()) => true,
            Err(Errno::NOENT) => false,
            Err(errno) => return Err(fail(TransferError::io("replace", &target.display)(errno))),
        }
    } else {
        false
    };
    if !swapped {
        match rename(RenameFlags::NOREPLACE) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                return Err(fail(TransferError::Exists {
                    path: target.display.clone(),
                }))
            }
            Err(Errno::NOENT) => {
                return Err(fail(TransferError::Tampered {
                    path: target.display.clone(),
                }))
            }
            Err(errno) => return Err(fail(TransferError::io("publish", &target.display)(errno))),
        }
    }
    let published = statat(parent, target.name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(TransferError::io("stat", &target.display))?;
    if (published.st_dev, published.st_ino) != (root.dev, root.ino) {
        return Err(TransferError::Tampered {
            path: target.display.clone(),
        });
    }
    if swapped {
        // The old tree now sits at the staging name.
        remove_tree(parent, stage).map_err(|source| TransferError::Io {
            op: "remove the replaced copy at",
            path: format!("{}/../{stage}", target.display),
            source,
        })?;
    }
    Ok(())
}
