//! Raw configuration types: exactly what the TOML files may contain, nothing checked beyond
//! TOML types. The JSON Schema (C2) is generated from these same types, and the parser (the
//! private `parse` module) deserializes every value through them, so they cannot drift.
//!
//! Both files share one shape ([`RawConfig`]). Keys marked *user config only* are rejected in a
//! project's `.airlock/config.toml` (C6: a repository never chooses host mounts, credentials or
//! trust anchors).

use std::collections::BTreeMap;
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One airlock configuration file: the user config (`$XDG_CONFIG_HOME/airlock/config.toml`) or a
/// project config (`.airlock/config.toml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "airlock configuration")]
pub struct RawConfig {
    /// Root filesystem of the sandbox: `"host"` (default: the host's system directories as
    /// read-only overlay lower layers), the name of an image imported with `airlock image
    /// import` (`airlock image ls` lists them), or `"dir:/absolute/path"` of a directory
    /// holding a root filesystem (user config only).
    pub image: Option<String>,
    /// The agent from the built-in catalogue that the default session runs: claude, codex,
    /// opencode, gemini, copilot or aider. Its API hosts are added to the network policy (when
    /// an untrusted project config selects it, only those the user config already allows).
    pub agent: Option<String>,
    /// Memory limit of the sandbox in MiB (default 8192, minimum 256).
    #[schemars(range(min = 256))]
    pub memory_mb: Option<u64>,
    /// CPU limit of the sandbox, in CPUs (fractions allowed; must be greater than 0).
    pub cpus: Option<f64>,
    /// Maximum number of processes in the sandbox (default 4096, minimum 16).
    #[schemars(range(min = 16))]
    pub pids_max: Option<u64>,
    /// Packages installed by provisioning, through the proxy (P1). Names use letters, digits
    /// and `+._:=~-`, and never start with `-`.
    pub packages: Option<Vec<String>>,
    /// Default session layout: `"plain"` (default) or `"tmux"` (windows agent, edit, shell).
    pub layout: Option<Layout>,
    /// Key sequence that detaches from a session, e.g. `"ctrl-]"` (default) or
    /// `"ctrl-p,ctrl-q"`.
    pub detach_key: Option<String>,
    /// How workspaces are mapped: `"direct"` (default, read-write bind) or `"clone"`
    /// (a private clone whose commits the host sees through the `airlock-<name>` remote).
    pub workspace_mode: Option<WorkspaceMode>,
    /// User config only. Extra host directories mapped into sandboxes (at most 16), each at
    /// the same absolute path as on the host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub mount: Vec<RawMount>,
    /// Network policy of the egress proxy.
    pub network: Option<RawNetwork>,
    /// Per-agent settings, keyed by catalogue name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, RawAgentSettings>,
    /// User config only. Extra paths, relative to each workspace root, that sandbox processes
    /// may not change, rename or remove (at most 32), in addition to `.airlock`, `.git/hooks`
    /// and `.git/config`. `/`-separated, no `.` or `..`; a component `*` matches every
    /// directory there. A path that does not exist when the sandbox starts is not protected.
    pub protect: Option<Vec<String>>,
    /// User config only. Protected paths lifted for one project.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unprotect: Vec<RawUnprotect>,
    /// User config only. Environment of every sandbox process (P4).
    pub env: Option<RawEnv>,
    /// User config only. Host toolchains mapped read-only at their host path (P4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool: Vec<RawTool>,
    /// User config only. The package cache mapped into sandboxes (P2).
    pub cache: Option<RawCache>,
    /// User config only. Host loopback ports forwarded into every sandbox on each `up`
    /// (at most 32), like `airlock ports --publish HOST:GUEST`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub ports: Vec<RawPort>,
    /// User config only. Backend of the sandboxes `up` and `run` create: `"linux"` (default:
    /// namespaces on the host's kernel) or `"vm"` (a QEMU microVM with its own kernel; see
    /// `[vm]`). `--backend` overrides it for one command.
    pub backend: Option<String>,
    /// User config only. Settings of the `vm` backend.
    pub vm: Option<RawVm>,
}

/// `[vm]` (user config only): how the `vm` backend runs its microVMs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawVm {
    /// Accelerator: `"auto"` (default: KVM when a probe boot succeeds, else a refusal naming
    /// the reason), `"kvm"`, or `"tcg"` (QEMU's emulator: correct, many times slower).
    pub accel: Option<String>,
    /// Absolute path of a kernel directory `scripts/fetch-vm-kernel` unpacked (default: the
    /// newest under `$XDG_CACHE_HOME/airlock/vm-kernel`).
    pub kernel: Option<String>,
    /// Absolute path of `qemu-system-x86_64` (default: the one on `PATH`).
    pub qemu: Option<String>,
    /// MiB the monitor itself may use beyond the guest's RAM (`memory_mb`); the sandbox's
    /// cgroup limit is the sum (default 256, 64 to 4096).
    #[schemars(range(min = 64, max = 4096))]
    pub memory_overhead_mb: Option<u64>,
}

/// `[[ports]]` (user config only): a forward from host `127.0.0.1:host` to sandbox port `guest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPort {
    /// Port on the host's loopback interface (1–65535), unique among the entries.
    #[schemars(range(min = 1))]
    pub host: u16,
    /// Port inside the sandbox (1–65535).
    #[schemars(range(min = 1))]
    pub guest: u16,
}

/// `[[unprotect]]` (user config only): protected paths a sandbox of one project may change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUnprotect {
    /// Absolute path of the project root, as `airlock plan` shows it.
    pub project: String,
    /// Protected paths (as listed by `airlock plan`) lifted there; `.airlock` cannot be lifted.
    pub paths: Vec<String>,
}

/// `[env]` (user config only): variables set for every sandbox process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEnv {
    /// Variables to set, `NAME = "value"`. Names match `[A-Za-z_][A-Za-z0-9_]*`; `PATH`
    /// (use `path_prepend`), `HOME`, the proxy and CA variables and `AIRLOCK_*` are airlock's.
    pub vars: Option<BTreeMap<String, String>>,
    /// Absolute directories put in front of `PATH`, in this order.
    pub path_prepend: Option<Vec<String>>,
}

/// `[[tool]]` (user config only): a host toolchain from the catalogue, mapped read-only at its
/// host path without the files that hold credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    /// `"rust"` (`~/.rustup` and `~/.cargo/bin`; `CARGO_HOME` is a writable directory in the
    /// cache), `"pyenv"` (`~/.pyenv`), `"nvm"` (`~/.nvm`) or `"local-bin"` (`~/.local/bin`).
    pub name: String,
}

/// `[cache]` (user config only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// Share one package cache between all projects (default false: one cache per project,
    /// so a project cannot poison another's downloads).
    pub shared: Option<bool>,
}

/// A host directory mapped into the sandbox (`[[mount]]`, user config only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMount {
    /// Name of the mapping: `[a-z0-9][a-z0-9_-]{0,31}`, unique.
    pub name: String,
    /// Absolute host path of an existing directory with no symbolic link in any component;
    /// never `/`, the home directory itself, a credential directory, or inside `/dev`, `/proc` or
    /// `/sys` (the sandbox has its own).
    pub path: String,
    /// Required, no default: whether the sandbox may only read the directory.
    pub read_only: bool,
}

/// `[network]`: the egress policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    /// Base policy: `"none"` (nothing allowed), `"dev"` (default: code hosts, package
    /// registries, toolchains, LLM APIs) or `"open"` (everything allowed, still logged).
    /// A project config may only narrow it unless trusted (`airlock trust`).
    pub preset: Option<Preset>,
    /// Host patterns to allow: `example.com`, `*.example.com` (one extra label),
    /// `**.example.com` (any depth), optionally `:port` (default ports 80 and 443).
    /// Ignored in an untrusted project config.
    pub allow: Option<Vec<String>>,
    /// Host patterns to deny; deny beats allow. A pattern without port denies every port.
    pub deny: Option<Vec<String>>,
    /// User config only. Absolute paths of extra PEM CA certificates trusted for upstream
    /// TLS verification.
    pub extra_ca: Option<Vec<String>>,
    /// Static name → IP address entries the proxy resolves without DNS.
    /// Ignored in an untrusted project config.
    pub hosts: Option<BTreeMap<String, IpAddr>>,
    /// User config only. Host loopback ports exposed inside the sandbox at `127.0.0.1:PORT`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_port: Vec<RawHostPort>,
}

/// `[[network.host_port]]`: a host loopback port reachable from the sandbox (N10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHostPort {
    /// Port on the host's loopback interface (1–65535).
    #[schemars(range(min = 1))]
    pub port: u16,
    /// Port inside the sandbox (default: the same as `port`).
    #[schemars(range(min = 1))]
    pub guest_port: Option<u16>,
}

/// `[agents.<name>]`: per-agent settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAgentSettings {
    /// Arguments the agent is started with, replacing the catalogue's defaults.
    pub args: Option<Vec<String>>,
    /// Copy the allowlisted, user-authored part of the host agent's configuration into the
    /// sandbox (default true; never credentials, history or caches; A2).
    pub sync_config: Option<bool>,
    /// User config only. Make the agent's API credentials available through proxy
    /// placeholders (default false; A3).
    pub credentials: Option<bool>,
    /// User config only. Keep the agent's login/state directories on the host under
    /// airlock's data root so a login survives `down` (default false; A4).
    pub persist_state: Option<bool>,
    /// User config only. Defines an agent the catalogue lacks (A1): the executable its
    /// session runs. The keys below describe it like a catalogue entry.
    pub command: Option<String>,
    /// User config only, with `command`. Where the command comes from when the image lacks
    /// it: `"npm:<package>"` or `"pip:<package>"`.
    pub package: Option<String>,
    /// User config only, with `command`. Host patterns its API needs (added to the policy
    /// when the agent is selected).
    pub api_hosts: Option<Vec<String>>,
    /// User config only, with `command`. Its configuration directory, relative to the home
    /// directory (`""`: the home itself).
    pub config_dir: Option<String>,
    /// User config only, with `command`. User-authored files and directories (trailing `/`)
    /// inside `config_dir` that config sync copies (scanned for credentials all the same).
    pub config_sync: Option<Vec<String>>,
    /// User config only, with `command`. Home-relative paths that hold its login and state
    /// (mapped with `persist_state`; trailing `/` for a directory).
    pub state_paths: Option<Vec<String>>,
    /// User config only, with `command`. Environment variables carrying its API keys.
    pub api_key_env: Option<Vec<String>>,
}

/// Default session layout (S4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// One session running the agent (or the shell).
    #[default]
    Plain,
    /// A tmux session with windows `agent`, `edit`, `shell`.
    Tmux,
}

/// How a workspace is mapped (A5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceMode {
    /// Read-write bind mount of the host directory.
    #[default]
    Direct,
    /// A private clone; the host work tree is never written.
    Clone,
}

/// Base network policy (N2), ordered from narrowest to widest.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Nothing is allowed but explicit rules.
    None,
    /// Code hosts, package registries, toolchain hosts and LLM APIs.
    #[default]
    Dev,
    /// Everything is allowed (still logged).
    Open,
}

impl Preset {
    /// The name used in config files and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::None => "none",
            Preset::Dev => "dev",
            Preset::Open => "open",
        }
    }
}

/// Keys of [`RawConfig`], in schema order; the parser rejects every other key.
pub(crate) const CONFIG_KEYS: &[&str] = &[
    "image",
    "agent",
    "memory_mb",
    "cpus",
    "pids_max",
    "packages",
    "layout",
    "detach_key",
    "workspace_mode",
    "mount",
    "network",
    "agents",
    "protect",
    "unprotect",
    "env",
    "tool",
    "cache",
    "ports",
    "backend",
    "vm",
];
/// Keys of [`RawVm`].
pub(crate) const VM_KEYS: &[&str] = &["accel", "kernel", "qemu", "memory_overhead_mb"];
/// Keys of [`RawEnv`].
pub(crate) const ENV_KEYS: &[&str] = &["vars", "path_prepend"];
/// Keys of [`RawTool`].
pub(crate) const TOOL_KEYS: &[&str] = &["name"];
/// Keys of [`RawPort`].
pub(crate) const PORT_KEYS: &[&str] = &["host", "guest"];
/// Keys of [`RawCache`].
pub(crate) const CACHE_KEYS: &[&str] = &["shared"];
/// Keys of [`RawMount`].
pub(crate) const MOUNT_KEYS: &[&str] = &["name", "path", "read_only"];
/// Keys of [`RawUnprotect`].
pub(crate) const UNPROTECT_KEYS: &[&str] = &["project", "paths"];
/// Keys of [`RawNetwork`].
pub(crate) const NETWORK_KEYS: &[&str] =
    &["preset", "allow", "deny", "extra_ca", "hosts", "host_port"];
/// Keys of [`RawHostPort`].
pub(crate) const HOST_PORT_KEYS: &[&str] = &["port", "guest_port"];
/// Keys of [`RawAgentSettings`].
pub(crate) const AGENT_KEYS: &[&str] = &[
    "args",
    "sync_config",
    "credentials",
    "persist_state",
    "command",
    "package",
    "api_hosts",
    "config_dir",
    "config_sync",
    "state_paths",
    "api_key_env",
];
