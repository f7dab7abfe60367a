//! The guest's initramfs, built from airlock's own binary: `/init` is the `airlock`
//! executable (its hidden VM entry runs when it is PID 1 as `/init`), beside the shared
//! libraries it was linked with (the ELF interpreter and what the running process mapped),
//! the kernel modules in load order, and `airlock/modules` listing them. Host symbolic links
//! on the way to a file (Debian's merged `/usr`: `/lib64 -> usr/lib64`) are copied as links,
//! so the interpreter and library paths resolve in the guest as on the host.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Component, Path, PathBuf};

use crate::cpio::{CpioError, CpioWriter};
use crate::kernel::{Kernel, KernelError};

/// Where the ordered module list lives in the initramfs.
pub const MODULES_LIST: &str = "airlock/modules";
/// Directories the guest mounts on before it switches root.
const MOUNT_POINTS: &[&str] = &[
    "dev",
    "proc",
    "sys",
    "mnt",
    "mnt/lower",
    "mnt/rw",
    "mnt/root",
];

/// The initramfs could not be built.
#[derive(Debug, thiserror::Error)]
pub enum InitramfsError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Cpio(#[from] CpioError),
    /// A host file the guest needs could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The executable is not a 64-bit ELF file with an interpreter we can follow.
    #[error("{} is not an ELF executable this builder understands: {why}", path.display())]
    Elf { path: PathBuf, why: &'static str },
    /// Symbolic links on the way to a host file loop or go too deep.
    #[error("too many symbolic links resolving {}", path.display())]
    Links { path: PathBuf },
    /// Writing the archive failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What goes into the initramfs.
#[derive(Debug, Clone)]
pub struct Contents {
    /// The executable that becomes `/init`.
    pub exe: PathBuf,
    /// Shared libraries it needs, at their host paths.
    pub libraries: Vec<PathBuf>,
    /// Modules (relative to the kernel's module directory) in load order.
    pub modules: Vec<PathBuf>,
}

impl Contents {
    /// The contents for `exe` (this process's own image, or one linked like it), with the
    /// libraries this process has mapped and the `wanted` modules of `kernel` (usually
    /// [`crate::kernel::GUEST_MODULES`]) with what they depend on.
    pub fn for_exe(
        exe: &Path,
        kernel: &Kernel,
        wanted: &[&str],
    ) -> Result<Contents, InitramfsError> {
        let mut libraries = vec![elf_interpreter(exe)?];
        libraries.extend(mapped_libraries()?);
        Ok(Contents {
            exe: exe.to_path_buf(),
            libraries,
            modules: kernel.load_order(wanted)?,
        })
    }
}

/// Writes the initramfs for `contents` to `out` (created or truncated).
pub fn build(contents: &Contents, kernel: &Kernel, out: &Path) -> Result<(), InitramfsError> {
    let file = File::create(out).map_err(|source| InitramfsError::Write {
        path: out.to_path_buf(),
        source,
    })?;
    let mut archive = Archive {
        cpio: CpioWriter::new(BufWriter::with_capacity(1 << 20, file)),
        dirs: BTreeSet::new(),
    };
    for dir in MOUNT_POINTS {
        archive.dir(dir)?;
    }
    // The kernel opens /dev/console for /init's stdio before any devtmpfs exists.
    archive.cpio.char_device("dev/console", 0o600, 5, 1)?;
    archive.file("init", &contents.exe, 0o755)?;
    for lib in &contents.libraries {
        archive.host_path(lib, 0)?;
    }
    let modules_dir = kernel.modules_dir();
    let mut list = String::new();
    for module in &contents.modules {
        let inside = Path::new("lib/modules").join(&kernel.release).join(module);
        archive.file(&inside.to_string_lossy(), &modules_dir.join(module), 0o644)?;
        list.push('/');
        list.push_str(&inside.to_string_lossy());
        list.push('\n');
    }
    archive.dir("airlock")?;
    archive
        .cpio
        .file(MODULES_LIST, 0o644, list.len() as u64, &mut list.as_bytes())?;
    archive.cpio.finish()?;
    Ok(())
}

struct Archive<W: std::io::Write> {
    cpio: CpioWriter<W>,
    dirs: BTreeSet<String>,
}

impl<W: std::io::Write> Archive<W> {
    /// `name` and each parent, once.
    fn dir(&mut self, name: &str) -> Result<(), InitramfsError> {
        let mut so_far = String::new();
        for part in name.split('/') {
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(part);
            if self.dirs.insert(so_far.clone()) {
                self.cpio.dir(&so_far, 0o755)?;
            }
        }
        Ok(())
    }

    fn parent(&mut self, name: &str) -> Result<(), InitramfsError> {
        match name.rsplit_once('/') {
            Some((parent, _)) => self.dir(parent),
            None => Ok(()),
        }
    }

    /// A host file's content at `name`.
    fn file(&mut self, name: &str, host: &Path, perm: u32) -> Result<(), InitramfsError> {
        self.parent(name)?;
        let read = |source| InitramfsError::Read {
            path: host.to_path_buf(),
            source,
        };
        let mut f = File::open(host).map_err(read)?;
        let size = f.metadata().map_err(read)?.len();
        self.cpio.file(name, perm, size, &mut f as &mut dyn Read)?;
        self.dirs.insert(name.to_owned());
        Ok(())
    }

    /// The absolute host path `path`, with every symbolic link on the way copied as a link
    /// and the file at its end copied as a file.
    fn host_path(&mut self, path: &Path, depth: u32) -> Result<(), InitramfsError> {
        if depth > 40 {
            return Err(InitramfsError::Links {
                path: path.to_path_buf(),
            });
        }
        let mut so_far = PathBuf::from("/");
        let parts: Vec<Component<'_>> = path.components().collect();
        for (i, part) in parts.iter().enumerate() {
            let Component::Normal(part) = part else {
                continue;
            };
            so_far.push(part);
            let name = so_far
                .strip_prefix("/")
                .unwrap_or(&so_far)
                .to_string_lossy()
                .into_owned();
            let meta =
                std::fs::symlink_metadata(&so_far).map_err(|source| InitramfsError::Read {
                    path: so_far.clone(),
                    source,
                })?;
            if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&so_far).map_err(|source| InitramfsError::Read {
                        path: so_far.clone(),
                        source,
                    })?;
                if !self.dirs.contains(&name) {
                    self.parent(&name)?;
                    self.cpio.symlink(&name, &target.to_string_lossy())?;
                    self.dirs.insert(name);
                }
                let base = so_far.parent().unwrap_or(Path::new("/"));
                let mut rest = base.join(target);
                for later in &parts[i + 1..] {
                    rest.push(later);
                }
                return self.host_path(&normalize(&rest), depth + 1);
            }
            if meta.is_dir() {
                self.dir(&name)?;
            } else if !self.dirs.contains(&name) {
                return self.file(&name, &so_far, meta_perm(&meta));
            } else {
                return Ok(());
            }
        }
        Ok(())
    }
}

fn meta_perm(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o755
}

/// Resolves `.` and `..` lexically (the links on the way were already followed).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The `PT_INTERP` path of a 64-bit little-endian ELF executable.
pub fn elf_interpreter(exe: &Path) -> Result<PathBuf, InitramfsError> {
    let elf = |why| InitramfsError::Elf {
        path: exe.to_path_buf(),
        why,
    };
    let mut head = Vec::new();
    File::open(exe)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut head))
        .map_err(|source| InitramfsError::Read {
            path: exe.to_path_buf(),
            source,
        })?;
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(elf("not a 64-bit little-endian ELF file"));
    }
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]) as usize;
    let u64_at = |at: usize| -> Option<usize> {
        let bytes: [u8; 8] = head.get(at..at + 8)?.try_into().ok()?;
        usize::try_from(u64::from_le_bytes(bytes)).ok()
    };
    let phoff = u64_at(0x20).ok_or_else(|| elf("no program headers"))?;
    let (entsize, count) = (u16_at(0x36), u16_at(0x38));
    for i in 0..count {
        let at = phoff + i * entsize;
        let Some(kind) = head.get(at..at + 4) else {
            return Err(elf("program headers beyond the first 64 KiB"));
        };
        if kind == 3u32.to_le_bytes() {
            let offset = u64_at(at + 8).ok_or_else(|| elf("truncated PT_INTERP"))?;
            let size = u64_at(at + 32).ok_or_else(|| elf("truncated PT_INTERP"))?;
            let raw = head
                .get(offset..offset + size)
                .ok_or_else(|| elf("PT_INTERP beyond the first 64 KiB"))?;
            let text = raw.split(|b| *b == 0).next().unwrap_or_default();
            return Ok(PathBuf::from(String::from_utf8_lossy(text).into_owned()));
        }
    }
    Err(elf("statically linked or no PT_INTERP"))
}

/// The shared libraries this process has mapped (from `/proc/self/maps`), host paths.
pub fn mapped_libraries() -> Result<Vec<PathBuf>, InitramfsError> {
    let maps =
        std::fs::read_to_string("/proc/self/maps").map_err(|source| InitramfsError::Read {
            path: PathBuf::from("/proc/self/maps"),
            source,
        })?;
    let libs: BTreeSet<PathBuf> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.starts_with('/') && path.contains(".so"))
        .map(PathBuf::from)
        .collect();
    Ok(libs.into_iter().collect())
}

#[cfg(test)]
#[path = "initramfs_tests.rs"]
mod tests;
