//! A writer for the `newc` cpio format, the one format the kernel unpacks as an initramfs
//! (`Documentation/driver-api/early-userspace/buffer-format.rst`): a 110-byte ASCII header
//! (`070701` and thirteen 8-digit hex fields), the NUL-terminated name, padding to 4 bytes,
//! the data, padding to 4 bytes; `TRAILER!!!` ends the archive. Uncompressed on purpose: under
//! TCG, decompressing tens of megabytes costs the guest more than reading them.

use std::io::{self, Read, Write};

/// A cpio write failed.
#[derive(Debug, thiserror::Error)]
pub enum CpioError {
    /// A name the kernel would not unpack as meant.
    #[error("cpio entry name {name:?} is not a relative path without `..`, NUL or empty parts")]
    Name { name: String },
    /// A file is larger than the format's 32-bit size field.
    #[error("cpio entry {name} is {size} bytes; newc holds at most 4 GiB - 1 per file")]
    TooLarge { name: String, size: u64 },
    /// The data source gave fewer bytes than announced.
    #[error("cpio entry {name}: expected {expected} bytes, read {read}")]
    ShortRead {
        name: String,
        expected: u64,
        read: u64,
    },
    /// Writing the archive (or reading a file's data) failed.
    #[error("writing the cpio archive: {0}")]
    Io(#[from] io::Error),
}

const MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";
const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

/// Writes entries in order; the caller lists a directory before what it holds.
pub struct CpioWriter<W: Write> {
    out: W,
    offset: u64,
    next_ino: u32,
}

/// One entry's header fields.
struct Header<'a> {
    name: &'a str,
    mode: u32,
    size: u32,
    rdev: (u32, u32),
}

impl<W: Write> CpioWriter<W> {
    /// Starts an archive on `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            offset: 0,
            next_ino: 1,
        }
    }

    /// A directory owned by root with `perm` (e.g. `0o755`).
    pub fn dir(&mut self, name: &str, perm: u32) -> Result<(), CpioError> {
        check_name(name)?;
        self.header(&Header {
            name,
            mode: S_IFDIR | (perm & 0o7777),
            size: 0,
            rdev: (0, 0),
        })
    }

    /// A regular file owned by root with `perm`, its `size` bytes read from `data`.
    pub fn file(
        &mut self,
        name: &str,
        perm: u32,
        size: u64,
        data: &mut dyn Read,
    ) -> Result<(), CpioError> {
        check_name(name)?;
        let size32 = u32::try_from(size).map_err(|_| CpioError::TooLarge {
            name: name.to_owned(),
            size,
        })?;
        self.header(&Header {
            name,
            mode: S_IFREG | (perm & 0o7777),
            size: size32,
            rdev: (0, 0),
        })?;
        let read = io::copy(&mut data.take(size), &mut self.out)?;
        if read != size {
            return Err(CpioError::ShortRead {
                name: name.to_owned(),
                expected: size,
                read,
            });
        }
        self.offset += size;
        self.pad()
    }

    /// A symbolic link `name` → `target`.
    pub fn symlink(&mut self, name: &str, target: &str) -> Result<(), CpioError> {
        check_name(name)?;
        let size = u32::try_from(target.len()).map_err(|_| CpioError::TooLarge {
            name: name.to_owned(),
            size: target.len() as u64,
        })?;
        self.header(&Header {
            name,
            mode: S_IFLNK | 0o777,
            size,
            rdev: (0, 0),
        })?;
        self.raw(target.as_bytes())?;
        self.pad()
    }

    /// A character device node (e.g. `dev/console`, 5:1), which the kernel needs before
    /// `/init` runs to give it stdio.
    pub fn char_device(
        &mut self,
        name: &str,
        perm: u32,
        major: u32,
        minor: u32,
    ) -> Result<(), CpioError> {
        check_name(name)?;
        self.header(&Header {
            name,
            mode: S_IFCHR | (perm & 0o7777),
            size: 0,
            rdev: (major, minor),
        })
    }

    /// Writes the trailer and returns the output.
    pub fn finish(mut self) -> Result<W, CpioError> {
        self.header(&Header {
            name: TRAILER,
            mode: 0,
            size: 0,
            rdev: (0, 0),
        })?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn header(&mut self, h: &Header<'_>) -> Result<(), CpioError> {
        let ino = if h.name == TRAILER { 0 } else { self.next_ino };
        self.next_ino += 1;
        let nlink = if h.mode & S_IFMT == S_IFDIR { 2 } else { 1 };
        let name_size = h.name.len() + 1;
        let fields = [
            ino,
            h.mode,
            0, // uid
            0, // gid
            if h.name == TRAILER { 1 } else { nlink },
            0, // mtime: fixed, so the same inputs give the same archive
            h.size,
            0, // devmajor
            0, // devminor
            h.rdev.0,
            h.rdev.1,
            u32::try_from(name_size).map_err(|_| CpioError::Name {
                name: h.name.to_owned(),
            })?,
            0, // check
        ];
        let mut header = String::with_capacity(110);
        header.push_str(MAGIC);
        for field in fields {
            header.push_str(&format!("{field:08X}"));
        }
        self.raw(header.as_bytes())?;
        self.raw(h.name.as_bytes())?;
        self.raw(&[0])?;
        self.pad()
    }

    fn raw(&mut self, bytes: &[u8]) -> Result<(), CpioError> {
        self.out.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> Result<(), CpioError> {
        let rem = (4 - (self.offset % 4)) % 4;
        self.raw(&[0u8; 3][..rem as usize])
    }
}

/// A name is relative, has no empty, `.` or `..` part and no NUL.
fn check_name(name: &str) -> Result<(), CpioError> {
    let bad = name.is_empty()
        || name.starts_with('/')
        || name.contains('\0')
        || name == TRAILER
        || name
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(CpioError::Name {
            name: name.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "cpio_tests.rs"]
pub(crate) mod tests;
