//! The image's system CA bundle, read by the host to build the sandbox's trust bundle (N6).
//!
//! An imported image is hostile input: its `/etc/ssl/certs/ca-certificates.crt` (or a
//! directory on the way) may be a link to a host file such as a token, which a plain
//! `fs::read` would follow on the host and copy into the bundle the sandbox can read. So the
//! path is resolved with `openat2(RESOLVE_IN_ROOT)` relative to the image root — links resolve
//! inside the image, exactly as the sandbox would see them — and only a regular file of at
//! most [`MAX_BUNDLE`] bytes is used.

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use airlock_linux::spec::SYSTEM_CA_BUNDLE;

/// Larger than any real bundle (Debian's is ~220 KiB); a bigger "bundle" is not one.
const MAX_BUNDLE: u64 = 16 << 20;

/// An opened system bundle and its identity.
pub struct SystemBundle {
    pub file: File,
    pub meta: Metadata,
}

impl SystemBundle {
    /// The bundle of the image rooted at `image_root`, if it has a usable one.
    pub fn open(image_root: &Path) -> Option<SystemBundle> {
        let root = rustix::fs::open(
            image_root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let fd = rustix::fs::openat2(
            &root,
            SYSTEM_CA_BUNDLE.trim_start_matches('/'),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        let file = File::from(fd);
        let meta = file.metadata().ok()?;
        (meta.is_file() && meta.len() <= MAX_BUNDLE).then_some(SystemBundle { file, meta })
    }

    /// Its content (capped, whatever the size said).
    pub fn read(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = (&self.file).take(MAX_BUNDLE).read_to_end(&mut out);
        out
    }
}
