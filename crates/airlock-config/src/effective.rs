//! The effective configuration: what `plan` prints and `up` executes.
//!
//! Every configurable value carries its origin (`default`, `user`, `project`, `flag`).
//! Precedence, lowest to highest: default < user config < project config < command-line flag,
//! except for the network policy, where an untrusted project may only tighten (C6).
//!
//! In-sandbox paths (I3): workspaces, the home directory and mounts all appear at the same
//! absolute path as on the host, so paths printed by tools inside mean the same thing outside.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::Serialize;

use crate::agents::AgentSpec;
use crate::git_worktree::LinkedGitDir;
use crate::policy::{Policy, Rule};
use crate::project::Project;
use crate::raw::{Layout, Preset, WorkspaceMode};
use crate::toolchain::{CacheScope, HostEnv, Tool};

/// Where a value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Built-in default.
    Default,
    /// The user config.
    User,
    /// The project config.
    Project,
    /// A command-line flag (e.g. `--memory-mb`).
    Flag,
}

impl Origin {
    /// The name used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Default => "default",
            Origin::User => "user",
            Origin::Project => "project",
            Origin::Flag => "flag",
        }
    }
}

/// A value with its origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it comes from.
    pub origin: Origin,
}

impl<T> Sourced<T> {
    /// A value with its origin.
    pub fn new(value: T, origin: Origin) -> Sourced<T> {
        Sourced { value, origin }
    }
}

/// The sandbox's root filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Image {
    /// The host's system directories as overlay lower layers (I2).
    Host,
    /// A directory holding a root filesystem (user config only).
    Directory(PathBuf),
    /// A named (imported) image; this version has no command that imports one yet.
    Named(String),
}

/// A detach key sequence (S2), e.g. `ctrl-p,ctrl-q`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DetachKey {
    /// As written in the config.
    pub text: String,
    /// The bytes the terminal sends for it.
    pub bytes: Vec<u8>,
}

/// A config file that was (or would have been) read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedFile {
    /// Its path.
    pub path: PathBuf,
    /// Whether it exists (absent files mean defaults).
    pub present: bool,
    /// SHA-256 hex of its bytes, when present.
    pub sha256: Option<String>,
}

/// The files a load read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Files {
    /// The user config.
    pub user: LoadedFile,
    /// The project config, when there is a project.
    pub project: Option<LoadedFile>,
    /// Whether the project config is trusted to widen the network policy (C6); `true` when the
    /// project has no config file (nothing to widen).
    pub project_trusted: bool,
}

/// A workspace mapping (I3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workspace {
    /// Workspace name (the project root's base name, reduced to `[a-z0-9_-]`).
    pub name: String,
    /// Canonical host path.
    pub host_path: PathBuf,
    /// Path inside the sandbox: the same absolute path.
    pub sandbox_path: PathBuf,
    /// Direct bind or private clone.
    pub mode: Sourced<WorkspaceMode>,
    /// For a linked git worktree in `direct` mode: the main repository's git directory, mapped
    /// read-write at the same path once git's back-pointer confirmed it (A5, C7).
    pub linked_git_dir: Option<LinkedGitDir>,
}

/// The sandbox home (I3): same path as the host's, but the sandbox's own directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HomeMapping {
    /// The host user's home (never mapped in; only its path is reused).
    pub host_path: PathBuf,
    /// `$HOME` inside the sandbox.
    pub sandbox_path: PathBuf,
}

/// A validated `[[mount]]` (C3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// Mapping name.
    pub name: String,
    /// Host directory (absolute, existing, no symlink component).
    pub host_path: PathBuf,
    /// Path inside the sandbox: the same absolute path (I3).
    pub sandbox_path: PathBuf,
    /// Whether the sandbox may only read it.
    pub read_only: bool,
}

/// A setting dropped because it would widen policy or raise a limit from an untrusted project
/// (C6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ignored {
    /// Key path in the project config, e.g. `network.allow[0]`.
    pub key: String,
    /// The value as written.
    pub value: String,
    /// Why it was dropped, including the word "untrusted" and the command `airlock trust`.
    pub reason: String,
}

/// A static name → address entry for the proxy's resolver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostEntry {
    /// Host name (lowercase).
    pub name: String,
    /// Its address.
    pub address: IpAddr,
    /// Which file declared it.
    pub origin: Origin,
}

/// A host loopback port exposed inside the sandbox (N10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HostPort {
    /// Port on the host's loopback.
    pub port: u16,
    /// Port on the sandbox's `127.0.0.1`.
    pub guest_port: u16,
}

/// The network part of the effective configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    /// Base preset.
    pub preset: Sourced<Preset>,
    /// Explicit user/project allow and deny rules, in file order (user first).
    pub rules: Vec<Rule>,
    /// API hosts of the selected agent (A1), added whatever the preset.
    pub agent_hosts: Vec<Rule>,
    /// Project settings dropped because the project is untrusted.
    pub ignored: Vec<Ignored>,
    /// Static host entries.
    pub hosts: Vec<HostEntry>,
    /// Host loopback ports exposed inside (user config only).
    pub host_ports: Vec<HostPort>,
    /// Extra CA certificates for upstream verification (user config only).
    pub extra_ca: Vec<PathBuf>,
}

impl Network {
    /// The policy the proxy enforces: explicit rules, agent hosts, then the preset's list.
    pub fn policy(&self) -> Policy {
        let mut rules = self.rules.clone();
        rules.extend(self.agent_hosts.iter().cloned());
        Policy::new(self.preset.value, rules)
    }
}

/// An agent's effective settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agent {
    /// Catalogue entry.
    pub spec: &'static AgentSpec,
    /// Whether it is the selected agent (`agent = ...`), i.e. what the default session runs.
    pub selected: bool,
    /// Arguments it is started with.
    pub args: Sourced<Vec<String>>,
    /// Whether allowlisted user configuration is synced in (A2).
    pub sync_config: Sourced<bool>,
    /// Whether its API credentials are provided through placeholders (A3, user only).
    pub credentials: Sourced<bool>,
    /// Whether its login/state persists on the host (A4, user only).
    pub persist_state: Sourced<bool>,
}

/// A provisioning phase (P1), in execution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Locale, CA trust, git, agent config.
    Base,
    /// `packages` from the config files.
    Packages,
    /// `$XDG_CONFIG_HOME/airlock/provision.sh`.
    UserScript,
    /// `.airlock/provision.sh`.
    ProjectScript,
}

/// Who owns a provisioning step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum StepOwner {
    /// airlock itself.
    Airlock,
    /// A configuration file or script.
    File(PathBuf),
}

/// One provisioning step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProvisionStep {
    /// Its phase.
    pub phase: Phase,
    /// Its owner (P3 names it when the step fails).
    pub owner: StepOwner,
    /// What it does.
    pub detail: String,
}

/// The complete, validated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Effective {
    /// Files read.
    pub files: Files,
    /// The active project, if any.
    pub project: Option<Project>,
    /// Root filesystem.
    pub image: Sourced<Image>,
    /// The selected agent's catalogue name.
    pub agent: Sourced<Option<String>>,
    /// Memory limit in MiB.
    pub memory_mb: Sourced<u64>,
    /// CPU limit (`None`: unlimited).
    pub cpus: Sourced<Option<f64>>,
    /// Process limit.
    pub pids_max: Sourced<u64>,
    /// Settings outside `[network]` (today the limits) that the untrusted project config asked
    /// to raise and that were dropped (C6); `network.ignored` lists the network ones.
    pub ignored: Vec<Ignored>,
    /// Packages to install, user's first, each with the file that asked for it.
    pub packages: Vec<Sourced<String>>,
    /// Session layout.
    pub layout: Sourced<Layout>,
    /// Detach key.
    pub detach_key: Sourced<DetachKey>,
    /// Workspaces (the project root, when there is a project).
    pub workspaces: Vec<Workspace>,
    /// The sandbox home.
    pub home: HomeMapping,
    /// Extra mounts (user config only).
    pub mounts: Vec<Mount>,
    /// Network policy and host access.
    pub network: Network,
    /// Configured or selected agents, in catalogue order.
    pub agents: Vec<Agent>,
    /// Provisioning steps in P1 order.
    pub provisioning: Vec<ProvisionStep>,
    /// Paths inside every workspace the sandbox may not change (issue 9.9), lifted ones too.
    pub protect: Vec<crate::protect::ProtectedPath>,
    /// `[env]` (user config only).
    pub env: Sourced<HostEnv>,
    /// `[[tool]]` (user config only).
    pub tools: Vec<Tool>,
    /// Whose downloads the package cache holds.
    pub cache: Sourced<CacheScope>,
    /// `[[ports]]` (user config only): forwards published on every `up`.
    pub ports: Vec<crate::ports::PublishedPort>,
    /// `backend` (user config only): what `up` and `run` create sandboxes with.
    pub backend: Sourced<crate::backend::BackendKind>,
    /// `[vm]` (user config only).
    pub vm: crate::backend::VmSettings,
}
