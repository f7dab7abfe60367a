//! Running a sender and a receiver over a socket pair, and speaking the format by hand.

use std::ffi::OsStr;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;

use airlock_files::{receive_tree, send_tree, NoProgress, Source, Target, TransferError, Wire};
use airlock_protocol::{Entry, EntryKind, FileEnd, Message, Mtime, TransferSummary};
use sha2::{Digest, Sha256};

pub fn dir_fd(path: &Path) -> OwnedFd {
    fs::File::open(path).unwrap().into()
}

pub fn source(path: &Path) -> Source {
    Source {
        parent: dir_fd(path.parent().unwrap()),
        name: path.file_name().unwrap().to_str().unwrap().to_owned(),
    }
}

pub fn target(parent: &Path, name: &str, replace: bool) -> Target {
    Target {
        parent: dir_fd(parent),
        name: name.to_owned(),
        replace,
        display: parent.join(name).display().to_string(),
    }
}

/// Sends `src` into `dst` through a socket pair; returns both sides' results.
pub fn copy(
    src: &Source,
    dst: &Target,
) -> (
    Result<TransferSummary, TransferError>,
    Result<TransferSummary, TransferError>,
) {
    let (a, b) = UnixStream::pair().unwrap();
    let receiver = thread::scope(|scope| {
        let handle = scope.spawn(move || {
            let mut wire = Wire::new(b).unwrap();
            receive_tree(&mut wire, dst, &NoProgress)
        });
        let mut wire = Wire::new(a).unwrap();
        let sent = send_tree(&mut wire, src, &NoProgress);
        drop(wire);
        (sent, handle.join().unwrap())
    });
    receiver
}

/// Receives what `script` writes by hand (a hostile sender) into `dst`.
pub fn receive_scripted(
    dst: &Target,
    script: impl FnOnce(&mut Wire) + Send,
) -> Result<TransferSummary, TransferError> {
    let (a, b) = UnixStream::pair().unwrap();
    thread::scope(|scope| {
        scope.spawn(move || {
            let mut wire = Wire::new(a).unwrap();
            script(&mut wire);
            let _ = wire.flush();
        });
        let mut wire = Wire::new(b).unwrap();
        receive_tree(&mut wire, dst, &NoProgress)
    })
}

pub fn entry(name: &str, kind: EntryKind, mode: u32, target: Option<&str>) -> Message {
    Message::Entry(Entry {
        name: name.to_owned(),
        kind,
        mode,
        mtime: Mtime {
            secs: 1_600_000_000,
            nanos: 0,
        },
        target: target.map(str::to_owned),
    })
}

/// A whole file: entry, bytes, end with the right size and hash.
pub fn file(wire: &mut Wire, name: &str, mode: u32, data: &[u8]) {
    wire.send(&entry(name, EntryKind::File, mode, None))
        .unwrap();
    wire.send_data(data).unwrap();
    wire.send(&Message::FileEnd(FileEnd {
        size: data.len() as u64,
        sha256: hex::encode(Sha256::digest(data)),
    }))
    .unwrap();
}

pub fn end(wire: &mut Wire, summary: TransferSummary) {
    wire.send(&Message::TransferEnd(summary)).unwrap();
    wire.flush().unwrap();
}

/// Every path below `root` (relative), sorted, links not followed.
pub fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

pub fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

pub fn mtime(path: &Path) -> i64 {
    fs::symlink_metadata(path).unwrap().mtime()
}

/// Names in `dir` that start with the staging prefix (left-overs of a failed transfer).
pub fn staged(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.starts_with(airlock_files::STAGE_PREFIX))
        })
        .collect()
}
