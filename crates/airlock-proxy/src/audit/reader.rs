//! The reader side of the audit log: every entry across rotated files, in order.
//!
//! The rotated files are `audit.jsonl.1` (newest) … `.N` (oldest); the current file comes last.
//! All files are opened before any is read, and a file seen twice (a rotation in between
//! renamed it) is read once, by identity (device and inode), so a concurrent rotation neither
//! duplicates nor reorders entries. A torn last line (a writer killed mid-write) is skipped and
//! read once complete. Lines that do not parse (written by a different version) are skipped.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{AuditEntry, AuditError};

/// How many rotated files a reader looks for at most (the writer keeps far fewer).
const MAX_ROTATED: usize = 1000;

/// The name of the `index`th rotated file of the log at `path` (`audit.jsonl.1`, …).
pub fn rotated_path(path: &Path, index: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{index}"));
    PathBuf::from(name)
}

/// A file's identity.
type Id = (u64, u64);

fn id_of(file: &File) -> io::Result<Id> {
    let m = file.metadata()?;
    Ok((m.dev(), m.ino()))
}

fn open_if_present(path: &Path) -> io::Result<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The rotated files, newest (`.1`) first, each with its identity.
fn open_rotated(path: &Path) -> io::Result<Vec<(File, Id)>> {
    let mut out = Vec::new();
    for i in 1..=MAX_ROTATED {
        let Some(f) = open_if_present(&rotated_path(path, i))? else {
            break;
        };
        let id = id_of(&f)?;
        out.push((f, id));
    }
    Ok(out)
}

/// The complete entries of `file` from `offset`, and the offset after the last complete line.
fn read_from(file: &mut File, offset: u64) -> io::Result<(Vec<AuditEntry>, u64)> {
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let entries = buf[..complete]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    Ok((entries, offset + complete as u64))
}

/// Every complete entry in the log at `path` and its rotated files, oldest first (an absent
/// log has none).
pub fn read_entries(path: &Path) -> Result<Vec<AuditEntry>, AuditError> {
    let mut follower = AuditFollower::from_start(path);
    follower.poll()
}

/// Reads entries as they are appended (`policy log --follow`): call [`AuditFollower::poll`]
/// periodically. A rotation between two polls is followed: the rest of the file it was
/// reading is read from its rotated name, then any newer rotated file, then the new file.
#[derive(Debug)]
pub struct AuditFollower {
    path: PathBuf,
    /// The file being followed and how far it was read; `None` before the first poll of a
    /// follower from the start (which reads the rotated files first).
    at: Option<(Id, u64)>,
}

impl AuditFollower {
    /// Follows from the beginning of the log, rotated files included.
    pub fn from_start(path: &Path) -> AuditFollower {
        AuditFollower {
            path: path.to_path_buf(),
            at: None,
        }
    }

    /// Follows from the current end of the log (only new entries).
    pub fn from_end(path: &Path) -> Result<AuditFollower, AuditError> {
        let read_err = |source| AuditError::Read {
            path: path.to_path_buf(),
            source,
        };
        let at = match open_if_present(path).map_err(read_err)? {
            Some(f) => Some((
                id_of(&f).map_err(read_err)?,
                f.metadata().map_err(read_err)?.len(),
            )),
            None => Some(((0, 0), 0)),
        };
        Ok(AuditFollower {
            path: path.to_path_buf(),
            at,
        })
    }

    /// The complete entries appended since the last call, in order.
    pub fn poll(&mut self) -> Result<Vec<AuditEntry>, AuditError> {
        self.poll_io().map_err(|source| AuditError::Read {
            path: self.path.clone(),
            source,
        })
    }

    fn poll_io(&mut self) -> io::Result<Vec<AuditEntry>> {
        // The current file first, then the rotated ones: a rotation in between shows up as the
        // current file's identity among the rotated ones, which is then skipped there.
        let current = match open_if_present(&self.path)? {
            Some(f) => {
                let id = id_of(&f)?;
                Some((f, id))
            }
            None => None,
        };
        let mut rotated = open_rotated(&self.path)?;
        let current_id = current.as_ref().map(|(_, id)| *id);
        rotated.retain(|(_, id)| Some(*id) != current_id);
        let mut out = Vec::new();
        // Rotated files still to read (newest first), and where to start in the oldest of them.
        let (pending, mut start): (&mut [(File, Id)], u64) = match self.at {
            None => (&mut rotated[..], 0),
            Some((id, offset)) if Some(id) == current_id => (&mut [][..], offset),
            Some((id, offset)) => match rotated.iter().position(|(_, r)| *r == id) {
                Some(i) => (&mut rotated[..=i], offset),
                None => (&mut rotated[..0], 0), // rotated out of reach, or the log was replaced
            },
        };
        for (file, _) in pending.iter_mut().rev() {
            let (entries, _) = read_from(file, start)?;
            out.extend(entries);
            start = 0;
        }
        match current {
            Some((mut file, id)) => {
                let (entries, end) = read_from(&mut file, start)?;
                out.extend(entries);
                self.at = Some((id, end));
            }
            None => self.at = Some(((0, 0), 0)),
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
