//! The outer archive of a `docker save` or OCI layout tar: an index of its members, read in
//! place (no copy), and readers that hash what they pass on.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use sha2::{Digest, Sha256};

use crate::source::SourceError;

/// Largest JSON document (index, manifest, config) read into memory.
pub const MAX_JSON: u64 = 4 << 20;

#[derive(Debug, Clone)]
enum Member {
    File { offset: u64, size: u64 },
    Symlink(String),
}

/// Members of an uncompressed tar file, by normalised name.
pub struct Outer {
    file: File,
    len: u64,
    members: HashMap<String, Member>,
}

impl Outer {
    /// Walks the headers (seeking over contents); only regular files and symlinks are kept.
    pub fn index(file: File) -> Result<Self, SourceError> {
        let len = file
            .metadata()
            .map_err(|source| SourceError::Read {
                what: "the archive".into(),
                source,
            })?
            .len();
        let mut members = HashMap::new();
        {
            let mut archive = tar::Archive::new(&file);
            let bad = |source| SourceError::Read {
                what: "the archive".into(),
                source,
            };
            for entry in archive.entries_with_seek().map_err(bad)? {
                let entry = entry.map_err(bad)?;
                let name = normalise(&String::from_utf8_lossy(&entry.path_bytes()));
                let member = match entry.header().entry_type() {
                    tar::EntryType::Regular | tar::EntryType::Continuous => Member::File {
                        offset: entry.raw_file_position(),
                        size: entry.size(),
                    },
                    tar::EntryType::Symlink => {
                        let target = entry.link_name_bytes().unwrap_or_default();
                        Member::Symlink(String::from_utf8_lossy(&target).into_owned())
                    }
                    _ => continue,
                };
                members.insert(name, member);
            }
        }
        Ok(Self { file, len, members })
    }

    pub fn has(&self, name: &str) -> bool {
        self.members.contains_key(name)
    }

    /// A reader of member `name` (symlinks between members followed up to 8 times, never out
    /// of the archive).
    pub fn open(&self, name: &str) -> Result<RangeReader<'_>, SourceError> {
        let mut name = name.to_owned();
        for _ in 0..8 {
            match self.members.get(&name) {
                None => return Err(SourceError::Missing { member: name }),
                Some(Member::File { offset, size }) => {
                    let end = offset.checked_add(*size).filter(|e| *e <= self.len);
                    let end = end.ok_or_else(|| SourceError::Malformed {
                        what: name.clone(),
                        why: "its size runs past the end of the archive".into(),
                    })?;
                    return Ok(RangeReader {
                        file: &self.file,
                        pos: *offset,
                        end,
                    });
                }
                Some(Member::Symlink(target)) => {
                    let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
                    name = resolve(dir, target).ok_or_else(|| SourceError::Malformed {
                        what: name.clone(),
                        why: "it links out of the archive".into(),
                    })?;
                }
            }
        }
        Err(SourceError::Malformed {
            what: name,
            why: "too many links between members".into(),
        })
    }

    /// The whole of a small member (a JSON document), refused above [`MAX_JSON`].
    pub fn read_small(&self, name: &str) -> Result<Vec<u8>, SourceError> {
        let mut out = Vec::new();
        self.open(name)?
            .take(MAX_JSON + 1)
            .read_to_end(&mut out)
            .map_err(|source| SourceError::Read {
                what: name.to_owned(),
                source,
            })?;
        if out.len() as u64 > MAX_JSON {
            return Err(SourceError::Malformed {
                what: name.to_owned(),
                why: format!("it is larger than {MAX_JSON} bytes"),
            });
        }
        Ok(out)
    }
}

fn normalise(name: &str) -> String {
    name.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// `target` relative to member directory `dir`, within the archive's namespace.
fn resolve(dir: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// Reads `pos..end` of a file with `pread` (the size was checked against the file's length).
pub struct RangeReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A SHA-256 and a byte count shared between a reader and whoever checks them afterwards.
#[derive(Clone, Default)]
pub struct Tally(Rc<RefCell<(Sha256, u64)>>);

impl Tally {
    /// `(hex digest, bytes)` of everything read so far.
    pub fn finish(&self) -> (String, u64) {
        let inner = self.0.borrow();
        (hex::encode(inner.0.clone().finalize()), inner.1)
    }
}

/// Passes reads through, feeding a [`Tally`].
pub struct Hashing<R> {
    inner: R,
    tally: Tally,
}

impl<R: Read> Hashing<R> {
    pub fn new(inner: R, tally: &Tally) -> Self {
        Self {
            inner,
            tally: tally.clone(),
        }
    }

    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut t = self.tally.0.borrow_mut();
        t.0.update(&buf[..n]);
        t.1 += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_links_cannot_leave_the_archive() {
        assert_eq!(
            resolve("abc", "../def/layer.tar").as_deref(),
            Some("def/layer.tar")
        );
        assert_eq!(resolve("", "../x"), None);
        assert_eq!(resolve("a", "/etc/passwd"), None);
        assert_eq!(normalise("./blobs//sha256/ab"), "blobs/sha256/ab");
    }
}
