//! The guest kernel: where `scripts/fetch-vm-kernel` unpacked it, and which of its modules
//! the guest loads, in dependency order from `modules.dep`.
//!
//! Layout of one fetched kernel (`<cache>/vm-kernel/<package>-<version>/`):
//! `boot/vmlinuz-<release>`, `lib/modules/<release>/{kernel/…,modules.dep}`, and `.complete`
//! (written last, so a half-unpacked directory is never used).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// The kernel could not be found or its module index read.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// No complete kernel under the cache directory.
    #[error("no guest kernel under {}: run scripts/fetch-vm-kernel (it downloads Debian's kernel package and unpacks it there)", dir.display())]
    Missing { dir: PathBuf },
    /// The kernel directory is not laid out as the fetch script leaves it.
    #[error("the guest kernel directory {} has no {what}", dir.display())]
    Layout { dir: PathBuf, what: &'static str },
    /// `modules.dep` names no such module.
    #[error("module {name} is not in {} (and not built in)", dep.display())]
    UnknownModule { name: String, dep: PathBuf },
    /// `modules.dep` has a line that is not `path: deps…`, or a path that leaves the tree.
    #[error("{}:{line}: not a modules.dep line", dep.display())]
    BadLine { dep: PathBuf, line: usize },
    /// A dependency cycle (the index is damaged).
    #[error("modules.dep has a dependency cycle through {name}")]
    Cycle { name: String },
    /// Reading a file failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The modules the guest needs on Debian's kernels, where each is built as a module: the
/// virtio-mmio transport (microvm's devices), the console ports (the control channel), 9p over
/// virtio (the shared root and workspaces) and overlayfs (the writable layer).
pub const GUEST_MODULES: &[&str] = &[
    "virtio_mmio",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    "overlay",
];

/// One fetched kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The directory `scripts/fetch-vm-kernel` made.
    pub root: PathBuf,
    /// `uname -r` of the guest.
    pub release: String,
    /// `boot/vmlinuz-<release>`.
    pub image: PathBuf,
}

impl Kernel {
    /// The newest complete kernel under `dir` (`<cache>/vm-kernel`), by directory name.
    pub fn find(dir: &Path) -> Result<Kernel, KernelError> {
        let missing = || KernelError::Missing {
            dir: dir.to_path_buf(),
        };
        let entries = std::fs::read_dir(dir).map_err(|_| missing())?;
        let newest = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .filter(|p| p.join(".complete").is_file())
            .max()
            .ok_or_else(missing)?;
        Kernel::open(&newest)
    }

    /// The kernel unpacked at `root`.
    pub fn open(root: &Path) -> Result<Kernel, KernelError> {
        let layout = |what| KernelError::Layout {
            dir: root.to_path_buf(),
            what,
        };
        let modules = root.join("lib/modules");
        let mut releases: Vec<String> = std::fs::read_dir(&modules)
            .map_err(|_| layout("lib/modules"))?
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        releases.sort();
        let release = releases
            .pop()
            .ok_or_else(|| layout("lib/modules/<release>"))?;
        let image = root.join("boot").join(format!("vmlinuz-{release}"));
        if !image.is_file() {
            return Err(layout("boot/vmlinuz-<release>"));
        }
        Ok(Kernel {
            root: root.to_path_buf(),
            release,
            image,
        })
    }

    /// `lib/modules/<release>`.
    pub fn modules_dir(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.release)
    }

    /// The files to load for `wanted`, each after everything it depends on, paths relative to
    /// [`modules_dir`](Self::modules_dir). A wanted module built into the kernel
    /// (`modules.builtin`) needs nothing.
    pub fn load_order(&self, wanted: &[&str]) -> Result<Vec<PathBuf>, KernelError> {
        let dir = self.modules_dir();
        let dep_path = dir.join("modules.dep");
        let text = read(&dep_path)?;
        let builtin = std::fs::read_to_string(dir.join("modules.builtin")).unwrap_or_default();
        let index = ModulesDep::parse(&text, &dep_path)?;
        let builtin: HashSet<String> = builtin.lines().map(module_name).collect();
        let mut order = Vec::new();
        for name in wanted {
            if builtin.contains(*name) {
                continue;
            }
            index.visit(name, &dep_path, &mut Vec::new(), &mut order)?;
        }
        Ok(order)
    }
}

fn read(path: &Path) -> Result<String, KernelError> {
    std::fs::read_to_string(path).map_err(|source| KernelError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// `kernel/fs/9p/9p.ko` (or `.ko.xz`…) → `9p`; dashes and underscores are one.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// `modules.dep`: module path → the paths it needs.
#[derive(Debug, Default)]
struct ModulesDep {
    by_name: BTreeMap<String, (PathBuf, Vec<PathBuf>)>,
}

impl ModulesDep {
    fn parse(text: &str, dep: &Path) -> Result<Self, KernelError> {
        let mut index = ModulesDep::default();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = || KernelError::BadLine {
                dep: dep.to_path_buf(),
                line: n + 1,
            };
            let (module, deps) = line.split_once(':').ok_or_else(bad)?;
            let paths: Vec<PathBuf> = std::iter::once(module)
                .chain(deps.split_whitespace())
                .map(|p| inside_tree(p).ok_or_else(bad))
                .collect::<Result<_, _>>()?;
            let (module, deps) = paths.split_first().ok_or_else(bad)?;
            index.by_name.insert(
                module_name(&module.to_string_lossy()),
                (module.clone(), deps.to_vec()),
            );
        }
        Ok(index)
    }

    /// Depth-first: every dependency before the module, each module once.
    fn visit(
        &self,
        name: &str,
        dep: &Path,
        path: &mut Vec<String>,
        order: &mut Vec<PathBuf>,
    ) -> Result<(), KernelError> {
        let (file, deps) = self
            .by_name
            .get(name)
            .ok_or_else(|| KernelError::UnknownModule {
                name: name.to_owned(),
                dep: dep.to_path_buf(),
            })?;
        if order.contains(file) {
            return Ok(());
        }
        if path.iter().any(|p| p == name) {
            return Err(KernelError::Cycle {
                name: name.to_owned(),
            });
        }
        path.push(name.to_owned());
        for d in deps {
            self.visit(&module_name(&d.to_string_lossy()), dep, path, order)?;
        }
        path.pop();
        order.push(file.clone());
        Ok(())
    }
}

/// A relative path with no `..` or root part (the index is read from a downloaded package).
fn inside_tree(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    path.components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
        .then(|| path.to_path_buf())
}

#[cfg(test)]
#[path = "kernel_tests.rs"]
mod tests;
