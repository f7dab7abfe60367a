//! The guest's initramfs, built from airlock's own binary: `/init` is the `airlock`
//! executable (its hidden VM entry runs when it is PID 1 as `/init`), beside the shared
//! libraries it was linked with (the ELF interpreter and every `DT_NEEDED`, recursively; none
//! for a static build), the kernel modules in load order, and `airlock/modules` listing them.
//! Host symbolic links on the way to a file (Debian's merged `/usr`: `/lib64 -> usr/lib64`) are
//! copied as links, so the interpreter and library paths resolve in the guest as on the host.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
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
    /// The contents for `exe`, with its interpreter and the libraries it needs and the
    /// `wanted` modules of `kernel` (usually [`crate::kernel::GUEST_MODULES`]) with what they
    /// depend on.
    pub fn for_exe(
        exe: &Path,
        kernel: &Kernel,
        wanted: &[&str],
    ) -> Result<Contents, InitramfsError> {
        Ok(Contents {
            exe: exe.to_path_buf(),
            libraries: needed_libraries(exe)?,
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
    write(contents, kernel, BufWriter::with_capacity(1 << 20, file))?;
    Ok(())
}

/// Writes the initramfs for `contents` to `out` and returns it (flushed). The same inputs
/// give the same bytes (fixed times, owners and inode numbers), which the cache relies on.
pub fn write<W: Write>(contents: &Contents, kernel: &Kernel, out: W) -> Result<W, InitramfsError> {
    let mut archive = Archive {
        cpio: CpioWriter::new(out),
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
    Ok(archive.cpio.finish()?)
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

/// Directories the dynamic loader searches when there is no `ld.so.cache` (Debian's
/// multiarch layout first).
const LIBRARY_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// The interpreter of `exe` and every shared library it needs, directly or through another
/// library (`DT_NEEDED`, resolved in [`LIBRARY_DIRS`]), as host paths. None for a statically
/// linked executable (static-pie included): it carries everything it runs.
pub fn needed_libraries(exe: &Path) -> Result<Vec<PathBuf>, InitramfsError> {
    let image = Elf::read(exe)?;
    let mut queue: Vec<String> = image.needed()?;
    let Some(interpreter) = image.interpreter_if_any()? else {
        if queue.is_empty() {
            return Ok(Vec::new());
        }
        return Err(image.bad("needs shared libraries but names no interpreter"));
    };
    let mut found = vec![interpreter];
    let mut seen = BTreeSet::new();
    while let Some(name) = queue.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let path = LIBRARY_DIRS
            .iter()
            .map(|d| Path::new(d).join(&name))
            .find(|p| p.is_file())
            .ok_or_else(|| InitramfsError::Elf {
                path: exe.to_path_buf(),
                why: "needs a shared library that is in none of the standard directories",
            })?;
        queue.extend(Elf::read(&path)?.needed()?);
        found.push(path);
    }
    Ok(found)
}

/// A 64-bit little-endian ELF file, read whole.
struct Elf {
    path: PathBuf,
    bytes: Vec<u8>,
}

/// One program header: type, file offset, virtual address, file size.
struct Segment {
    kind: u32,
    offset: usize,
    vaddr: usize,
    filesz: usize,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;

impl Elf {
    fn read(path: &Path) -> Result<Elf, InitramfsError> {
        let bytes = std::fs::read(path).map_err(|source| InitramfsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let elf = Elf {
            path: path.to_path_buf(),
            bytes,
        };
        let b = &elf.bytes;
        if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
            return Err(elf.bad("not a 64-bit little-endian ELF file"));
        }
        Ok(elf)
    }

    fn bad(&self, why: &'static str) -> InitramfsError {
        InitramfsError::Elf {
            path: self.path.clone(),
            why,
        }
    }

    fn u64_at(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(
            self.bytes.get(at..at + 8)?.try_into().ok()?,
        ))
    }

    fn usize_at(&self, at: usize) -> Option<usize> {
        usize::try_from(self.u64_at(at)?).ok()
    }

    fn segments(&self) -> Result<Vec<Segment>, InitramfsError> {
        let truncated = || self.bad("truncated program headers");
        let phoff = self.usize_at(0x20).ok_or_else(truncated)?;
        let entsize = u16::from_le_bytes([self.bytes[0x36], self.bytes[0x37]]) as usize;
        let count = u16::from_le_bytes([self.bytes[0x38], self.bytes[0x39]]) as usize;
        (0..count)
            .map(|i| {
                let at = phoff + i * entsize;
                let kind = self.bytes.get(at..at + 4).ok_or_else(truncated)?;
                Ok(Segment {
                    kind: u32::from_le_bytes(kind.try_into().map_err(|_| truncated())?),
                    offset: self.usize_at(at + 8).ok_or_else(truncated)?,
                    vaddr: self.usize_at(at + 16).ok_or_else(truncated)?,
                    filesz: self.usize_at(at + 32).ok_or_else(truncated)?,
                })
            })
            .collect()
    }

    /// A NUL-terminated string at a file offset.
    fn string_at(&self, at: usize) -> Option<String> {
        let rest = self.bytes.get(at..)?;
        let end = rest.iter().position(|b| *b == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    }

    fn interpreter(&self) -> Result<PathBuf, InitramfsError> {
        self.interpreter_if_any()?
            .ok_or_else(|| self.bad("statically linked or no PT_INTERP"))
    }

    /// The `PT_INTERP` path; `None` for a statically linked file.
    fn interpreter_if_any(&self) -> Result<Option<PathBuf>, InitramfsError> {
        let Some(seg) = self.segments()?.into_iter().find(|s| s.kind == PT_INTERP) else {
            return Ok(None);
        };
        self.string_at(seg.offset)
            .map(|p| Some(PathBuf::from(p)))
            .ok_or_else(|| self.bad("PT_INTERP beyond the end of the file"))
    }

    /// `DT_NEEDED` names.
    fn needed(&self) -> Result<Vec<String>, InitramfsError> {
        let segments = self.segments()?;
        let Some(dynamic) = segments.iter().find(|s| s.kind == PT_DYNAMIC) else {
            return Ok(Vec::new());
        };
        let bad = || self.bad("malformed dynamic section");
        let mut entries = Vec::new();
        for i in 0..dynamic.filesz / 16 {
            let at = dynamic.offset + i * 16;
            let tag = self.u64_at(at).ok_or_else(bad)?;
            let value = self.u64_at(at + 8).ok_or_else(bad)?;
            if tag == 0 {
                break;
            }
            entries.push((tag, value));
        }
        // A static-pie has a dynamic section (for its own relocations) and needs nothing.
        if !entries.iter().any(|(tag, _)| *tag == DT_NEEDED) {
            return Ok(Vec::new());
        }
        let strtab = entries
            .iter()
            .find(|(tag, _)| *tag == DT_STRTAB)
            .and_then(|(_, v)| usize::try_from(*v).ok())
            .ok_or_else(bad)?;
        // The string table is named by virtual address: find its file offset.
        let load = segments
            .iter()
            .find(|s| s.kind == PT_LOAD && s.vaddr <= strtab && strtab < s.vaddr + s.filesz)
            .ok_or_else(bad)?;
        let strtab = strtab - load.vaddr + load.offset;
        entries
            .iter()
            .filter(|(tag, _)| *tag == DT_NEEDED)
            .map(|(_, v)| {
                usize::try_from(*v)
                    .ok()
                    .and_then(|v| self.string_at(strtab + v))
                    .filter(|name| !name.contains('/') && !name.is_empty())
                    .ok_or_else(bad)
            })
            .collect()
    }
}

/// The `PT_INTERP` path of a 64-bit little-endian ELF executable.
pub fn elf_interpreter(exe: &Path) -> Result<PathBuf, InitramfsError> {
    Elf::read(exe)?.interpreter()
}

#[cfg(test)]
#[path = "initramfs_tests.rs"]
mod tests;
