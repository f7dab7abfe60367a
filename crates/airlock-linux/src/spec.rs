//! [`SandboxSpec`]: the plain value the backend is handed.
//!
//! Invariant: this crate makes no policy decisions. Whoever builds a spec (the CLI from the
//! validated configuration) has already decided which workspaces, mounts, limits and identities a
//! sandbox gets; the runtime executes exactly that and refuses to start when it cannot.
//! The spec crosses a process boundary (host → `airlock __init`) as JSON over an inherited pipe.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The root filesystem a sandbox starts from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum Image {
    /// The host's system directories (`/usr`, `/etc`, `/opt`, `/bin`, `/sbin`, `/lib*`) as
    /// overlay lower layers with a per-sandbox upper layer (PRODUCT I2).
    Host,
    /// A directory holding a complete root filesystem, used as the single lower layer.
    Directory(PathBuf),
    /// An imported image (`airlock image import`): its tree is the single lower layer, like a
    /// directory; the name and digest are what a plan records and compares (L1).
    Imported(ImportedImage),
}

/// An imported image as the backend needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedImage {
    pub name: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Absolute path of the image's tree in the store.
    pub rootfs: PathBuf,
}

impl Image {
    /// The directory whose files the sandbox sees as `/` (the host's `/` for [`Image::Host`]).
    pub fn root_dir(&self) -> &std::path::Path {
        match self {
            Image::Host => std::path::Path::new("/"),
            Image::Directory(p) => p,
            Image::Imported(i) => &i.rootfs,
        }
    }
}

/// A host directory (or a single file, such as a service's Unix socket) mapped into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// Absolute, canonical host path (validated by the caller).
    pub host: PathBuf,
    /// Absolute path inside the sandbox. Workspaces use the host path itself (PRODUCT I3).
    pub sandbox: PathBuf,
    /// Whether sandbox processes may write through the mapping.
    pub writable: bool,
}

/// One resource limit and whether the user set it explicitly (config or flag). An explicit limit
/// that cannot be enforced refuses the start; a default one is skipped with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit<T> {
    pub value: T,
    pub explicit: bool,
}

/// Resource limits (PRODUCT I8, C5). `None` means "no limit of this kind".
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_mb: Option<Limit<u64>>,
    pub pids_max: Option<Limit<u64>>,
    pub cpus: Option<Limit<f64>>,
}

/// The invoking host user: whose files the sandbox user's files become (PRODUCT I5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostUser {
    pub uid: u32,
    pub gid: u32,
    /// Login name, used for the generated `/etc/passwd` entry.
    pub name: String,
    /// Absolute host home path; the sandbox gets its own empty directory at the same path (I3).
    pub home: PathBuf,
}

/// Everything needed to build one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Short identifier, `[a-z0-9-]`, unique among this user's live sandboxes.
    pub id: String,
    pub image: Image,
    /// Project directories, mapped read-write (usually) at their host path.
    pub workspaces: Vec<Mapping>,
    /// Other configured host directories (PRODUCT C3).
    pub mounts: Vec<Mapping>,
    pub user: HostUser,
    pub hostname: String,
    /// Environment every sandbox process starts from (the exec request adds to it).
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    /// Whether a root identity inside the sandbox's user namespace must be available (`--root`).
    /// When the host cannot provide one, the start is refused with the reason.
    pub require_root: bool,
    /// The host-side egress relays (PRODUCT N1, N6, N10); `None`: no way out at all.
    #[serde(default)]
    pub egress: Option<Egress>,
    /// Paths inside every writable workspace that sandbox processes may not change, rename or
    /// remove (issue 9.9: files the host executes or trusts, such as `.git/hooks`).
    #[serde(default)]
    pub protect: Vec<Protected>,
}

/// One protected path, relative to a workspace root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protected {
    /// `/`-separated components; a component `*` stands for every directory entry there.
    pub path: String,
    /// What to do when the path does not exist but its parent directory does.
    pub if_missing: IfMissing,
    /// Protect it only when it is not a directory (`.git` as a worktree's or submodule's
    /// `gitdir:` file; a `.git` directory is only pinned as the ancestor of its protected parts).
    #[serde(default)]
    pub files_only: bool,
}

/// How a missing protected path is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IfMissing {
    /// Leave it missing: the sandbox may create it (fine for paths the host only trusts when
    /// they arrive with the repository, e.g. `.airlock`, whose new content is untrusted).
    Skip,
    /// Create an empty directory (owned by the sandbox user) and protect it.
    Dir,
    /// Create an empty file (owned by the sandbox user) and protect it.
    File,
}

/// Where [`Egress::host_dir`] appears inside the sandbox (read-only).
pub const EGRESS_DIR: &str = "/run/airlock";

/// The system CA bundle path that [`Egress::trust_bundle`] replaces inside the sandbox.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The host directory holding the sockets of the host-side egress proxy and host-port
/// connectors, and the generated CA bundle. The caller decided everything in it; the runtime
/// binds it read-only at [`EGRESS_DIR`] and the guest relays each [`Relay`] port to its socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// Absolute host directory (0700, owned by the invoking user).
    pub host_dir: PathBuf,
    /// Loopback ports inside the sandbox and the socket (a file name in `host_dir`) each one is
    /// relayed to.
    pub relays: Vec<Relay>,
    /// A file name in `host_dir` bound read-only over [`SYSTEM_CA_BUNDLE`] when the image has
    /// that file as a regular file (the system trust store plus airlock's CA, N6).
    pub trust_bundle: Option<String>,
}

/// One guest loopback listener relayed to a host socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relay {
    /// Port on the sandbox's `127.0.0.1`.
    pub port: u16,
    /// Socket file name inside [`Egress::host_dir`].
    pub socket: String,
    /// The guest hands each connection over to the socket's server (`SCM_RIGHTS`) instead of
    /// relaying its bytes: the egress proxy's relay (`airlock_protocol::handoff`).
    #[serde(default)]
    pub handoff: bool,
}

impl SandboxSpec {
    /// A spec holding nothing but its id and invoker: the host's `/usr`, no mapping, no
    /// environment, default limits, no egress (no way out), nothing protected, hostname `id`.
    /// Whoever builds a sandbox fills in the rest.
    pub fn bare(id: &str, user: HostUser) -> Self {
        SandboxSpec {
            id: id.to_owned(),
            image: Image::Host,
            workspaces: Vec::new(),
            mounts: Vec::new(),
            user,
            hostname: id.to_owned(),
            env: Vec::new(),
            limits: Limits::default(),
            require_root: false,
            egress: None,
            protect: Vec::new(),
        }
    }

    /// Every mapping, workspaces first, ordered so that a parent directory is mounted before any
    /// mapping nested inside it.
    pub fn mappings_in_mount_order(&self) -> Vec<&Mapping> {
        let mut all: Vec<&Mapping> = self.workspaces.iter().chain(self.mounts.iter()).collect();
        all.sort_by_key(|m| m.sandbox.components().count());
        all
    }
}
