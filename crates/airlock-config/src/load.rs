//! Loading: both files → every diagnostic at once, or the [`Effective`] configuration.
//!
//! Order of operations (L2: nothing here has side effects; only the two config files and the
//! metadata of referenced paths are read):
//! 1. read and parse the user config, then the project config (absent files are defaults);
//! 2. hash the project config and ask the caller whether that hash is trusted (C6);
//! 3. resolve scalars with precedence default < user < project < flag, validating each file's
//!    value on its own so both files' errors are reported;
//! 4. validate the workspace, mounts, network (trust-aware), agents;
//! 5. list provisioning steps in P1 order;
//! 6. return every diagnostic of steps 1–5 together, or the effective configuration.

use std::io;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::agent_defs;
use crate::agents::{self, AgentSpec};
use crate::beneath;
use crate::diagnostics::{key_segment, ConfigErrors, Diagnostic};
use crate::effective::{
    Agent, DetachKey, Effective, Files, HomeMapping, Image, LoadedFile, Origin, Phase,
    ProvisionStep, Sourced, StepOwner, Workspace,
};
use crate::git_worktree;
use crate::limits;
use crate::mounts;
use crate::network::{self, NetworkInputs};
use crate::parse::{parse_file, FileRole, ParsedFile};
use crate::project::Project;
use crate::raw::{Layout, RawAgentSettings, RawConfig, WorkspaceMode};
use crate::roots::Roots;
use crate::toolchain;
use crate::values;

/// Values given on the command line for one run (C5: they never rewrite a file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--memory-mb`.
    pub memory_mb: Option<u64>,
}

/// What [`load`] needs.
pub struct LoadRequest<'a> {
    /// airlock's directories (the user config lives in `roots.config`).
    pub roots: &'a Roots,
    /// The active project, if any.
    pub project: Option<&'a Project>,
    /// Command-line overrides.
    pub overrides: Overrides,
    /// Trust lookup: `(canonical project root, sha256 hex of the project config) -> trusted`.
    pub is_trusted: &'a dyn Fn(&Path, &str) -> bool,
    /// Image lookup: whether an image of this name is imported (`None`: spelling only).
    pub image_exists: Option<&'a dyn Fn(&str) -> bool>,
}

/// SHA-256 of a config file's bytes, lowercase hex: the key of trust records (C6).
pub fn config_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The pseudo-file named in diagnostics about command-line values.
pub const COMMAND_LINE: &str = "<command line>";

/// The user's own config file. `None` when it does not exist.
fn read_user(path: &Path, diags: &mut Vec<Diagnostic>) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            diags.push(Diagnostic {
                file: path.to_owned(),
                key: String::new(),
                line: 0,
                column: 0,
                message: format!("cannot read: {e}"),
            });
            None
        }
    }
}

/// The project's config file, read beneath the project root without following links, as a
/// regular file of at most [`beneath::CONFIG_CAP`] bytes (C7). `None` when it does not exist.
fn read_project(project: &Project, diags: &mut Vec<Diagnostic>) -> Option<Vec<u8>> {
    let path = &project.config_path;
    let rel = path.strip_prefix(&project.root).unwrap_or(path);
    match beneath::read_beneath(&project.root, rel, beneath::CONFIG_CAP) {
        Ok(bytes) => bytes,
        Err(e) => {
            diags.push(Diagnostic {
                file: path.to_owned(),
                key: String::new(),
                line: 0,
                column: 0,
                message: e.to_string(),
            });
            None
        }
    }
}

fn load_file(
    path: &Path,
    bytes: Option<Vec<u8>>,
    role: FileRole,
    diags: &mut Vec<Diagnostic>,
) -> (LoadedFile, Option<ParsedFile>) {
    let info = LoadedFile {
        path: path.to_owned(),
        present: bytes.is_some(),
        sha256: bytes.as_deref().map(config_hash),
    };
    let parsed = bytes.map(|b| match String::from_utf8(b) {
        Ok(text) => parse_file(path, &text, role, diags),
        Err(_) => {
            diags.push(Diagnostic {
                file: path.to_owned(),
                key: String::new(),
                line: 0,
                column: 0,
                message: "is not valid UTF-8".to_owned(),
            });
            parse_file(path, "", role, &mut Vec::new())
        }
    });
    (info, parsed)
}

/// The files of one load, in precedence order (user, then project).
struct Layers<'a> {
    files: Vec<(Origin, &'a ParsedFile)>,
}

impl Layers<'_> {
    /// Checks every file's value of one key and returns the highest-precedence valid one.
    fn resolve<T, U>(
        &self,
        diags: &mut Vec<Diagnostic>,
        key: &str,
        get: impl Fn(&RawConfig) -> Option<&T>,
        check: impl Fn(&T, Origin) -> Result<U, String>,
    ) -> Option<Sourced<U>> {
        let mut out = None;
        for (origin, file) in &self.files {
            if let Some(v) = get(&file.raw) {
                match check(v, *origin) {
                    Ok(u) => out = Some(Sourced::new(u, *origin)),
                    Err(message) => diags.push(file.diag(key, message)),
                }
            }
        }
        out
    }
}

/// Scalar settings after precedence and validation.
struct Scalars {
    image: Sourced<Image>,
    agent: Sourced<Option<String>>,
    layout: Sourced<Layout>,
    detach_key: Sourced<DetachKey>,
    workspace_mode: Sourced<WorkspaceMode>,
}

fn scalars(
    layers: &Layers<'_>,
    defined: &[&'static AgentSpec],
    image_exists: Option<&dyn Fn(&str) -> bool>,
    d: &mut Vec<Diagnostic>,
) -> Scalars {
    let default = |v| Sourced::new(v, Origin::Default);
    let image = layers
        .resolve(
            d,
            "image",
            |r| r.image.as_ref(),
            |v, o| values::image(v, o == Origin::User, image_exists),
        )
        .unwrap_or(default(Image::Host));
    let agent = layers
        .resolve(
            d,
            "agent",
            |r| r.agent.as_ref(),
            |v, _| {
                lookup(v, defined)
                    .map(|a| Some(a.name.to_owned()))
                    .ok_or_else(|| unknown_agent(v))
            },
        )
        .unwrap_or(Sourced::new(None, Origin::Default));
    let layout = layers
        .resolve(d, "layout", |r| r.layout.as_ref(), |v, _| Ok(*v))
        .unwrap_or(Sourced::new(Layout::default(), Origin::Default));
    let detach_key = layers
        .resolve(
            d,
            "detach_key",
            |r| r.detach_key.as_ref(),
            |v, _| values::detach_key(v),
        )
        .unwrap_or_else(|| {
            let k = values::detach_key(values::DEFAULT_DETACH_KEY)
                .unwrap_or_else(|e| unreachable!("default detach key is invalid: {e}"));
            Sourced::new(k, Origin::Default)
        });
    let workspace_mode = layers
        .resolve(
            d,
            "workspace_mode",
            |r| r.workspace_mode.as_ref(),
            |v, _| Ok(*v),
        )
        .unwrap_or(Sourced::new(WorkspaceMode::default(), Origin::Default));
    Scalars {
        image,
        agent,
        layout,
        detach_key,
        workspace_mode,
    }
}

/// Orders diagnostics by file (user config, project config, command line, others) and then
/// by position, so output follows the files top to bottom.
fn sort_diagnostics(diags: &mut [Diagnostic], req: &LoadRequest<'_>) {
    let user = req.roots.user_config_path();
    let project = req.project.map(|p| p.config_path.clone());
    let rank = |d: &Diagnostic| {
        if d.file == user {
            0
        } else if Some(&d.file) == project.as_ref() {
            1
        } else if d.file == Path::new(COMMAND_LINE) {
            2
        } else {
            3
        }
    };
    diags.sort_by_key(|d| (rank(d), d.line, d.column));
}

/// Loads and validates everything; see the module docs for the order of operations.
pub fn load(req: &LoadRequest<'_>) -> Result<Effective, ConfigErrors> {
    let mut diags = Vec::new();
    let user_path = req.roots.user_config_path();
    let user_bytes = read_user(&user_path, &mut diags);
    let (user_info, user) = load_file(&user_path, user_bytes, FileRole::User, &mut diags);
    let (project_info, project_file) = match req.project {
        Some(p) => {
            let bytes = read_project(p, &mut diags);
            let (info, parsed) = load_file(&p.config_path, bytes, FileRole::Project, &mut diags);
            (Some(info), parsed)
        }
        None => (None, None),
    };
    let project_hash = project_info.as_ref().and_then(|i| i.sha256.as_deref());
    let project_trusted = match (req.project, project_hash) {
        (Some(p), Some(hash)) => (req.is_trusted)(&p.root, hash),
        _ => true,
    };
    let mut layers = Layers { files: Vec::new() };
    layers
        .files
        .extend(user.as_ref().map(|f| (Origin::User, f)));
    layers
        .files
        .extend(project_file.as_ref().map(|f| (Origin::Project, f)));

    let d = &mut diags;
    let defined = defined_agents(user.as_ref(), d);
    let s = scalars(&layers, &defined, req.image_exists, d);
    let limits = limits::resolve_all(&layers.files, project_trusted, req.overrides, d);
    let packages = packages(&layers, d);
    let mounts = user_mounts(user.as_ref(), req, d);
    let workspaces = workspaces(req, s.workspace_mode, &mounts, d);
    let selected = s.agent.value.as_deref().and_then(|n| lookup(n, &defined));
    let network = network::merge(
        &NetworkInputs {
            user: user.as_ref(),
            project: project_file.as_ref(),
            project_trusted,
            agent: selected,
            agent_from_untrusted_project: s.agent.origin == Origin::Project && !project_trusted,
        },
        d,
    );
    let protect = crate::protect::resolve(user.as_ref(), req.project.map(|p| p.root.as_path()), d);
    let agents = agent_settings(&layers, selected, &defined, d);
    let provisioning = provisioning(req, &layers, d);
    let env = toolchain::env(user.as_ref(), d);
    let taken = toolchain::Taken {
        workspace: req.project.map(|p| p.root.as_path()),
        mounts: &mounts,
    };
    let tools = toolchain::tools(user.as_ref(), req.roots, &taken, d);
    let cache = toolchain::cache_scope(user.as_ref());
    let ports = crate::ports::validate(user.as_ref(), d);
    let backend = crate::backend::backend(user.as_ref(), d);
    let vm = crate::backend::vm(user.as_ref(), d);

    if !diags.is_empty() {
        sort_diagnostics(&mut diags, req);
        return Err(ConfigErrors(diags));
    }
    Ok(Effective {
        files: Files {
            user: user_info,
            project: project_info,
            project_trusted,
        },
        project: req.project.cloned(),
        image: s.image,
        agent: s.agent,
        memory_mb: limits.memory_mb,
        cpus: limits.cpus,
        pids_max: limits.pids_max,
        ignored: limits.ignored,
        packages,
        layout: s.layout,
        detach_key: s.detach_key,
        workspaces,
        home: HomeMapping {
            host_path: req.roots.home.clone(),
            sandbox_path: req.roots.home.clone(),
        },
        mounts,
        network,
        agents,
        provisioning,
        protect,
        env,
        tools,
        cache,
        ports,
        backend,
        vm,
    })
}

fn unknown_agent(name: &str) -> String {
    let known: Vec<&str> = agents::names().collect();
    format!(
        "unknown agent {name:?}; the catalogue has: {}",
        known.join(", ")
    )
}

fn packages(layers: &Layers<'_>, d: &mut Vec<Diagnostic>) -> Vec<Sourced<String>> {
    let mut out: Vec<Sourced<String>> = Vec::new();
    for (origin, file) in &layers.files {
        for (i, name) in file.raw.packages.iter().flatten().enumerate() {
            match values::package(name) {
                Ok(()) if out.iter().any(|p| &p.value == name) => {}
                Ok(()) => out.push(Sourced::new(name.clone(), *origin)),
                Err(message) => d.push(file.diag(&format!("packages[{i}]"), message)),
            }
        }
    }
    out
}

fn workspaces(
    req: &LoadRequest<'_>,
    mode: Sourced<WorkspaceMode>,
    mounts: &[crate::effective::Mount],
    d: &mut Vec<Diagnostic>,
) -> Vec<Workspace> {
    let Some(project) = req.project else {
        return Vec::new();
    };
    if let Some(reason) = mounts::sensitive_reason(&project.root, req.roots) {
        d.push(Diagnostic {
            file: project.root.clone(),
            key: "workspace".to_owned(),
            line: 0,
            column: 0,
            message: format!("cannot be a workspace: {reason}"),
        });
        return Vec::new();
    }
    let mut out = vec![Workspace {
        name: project.name(),
        host_path: project.root.clone(),
        sandbox_path: project.root.clone(),
        mode,
        linked_git_dir: None,
    }];
    linked_git_dirs(req, &mut out, mounts, d);
    out
}

/// Finds the git directory a linked-worktree workspace needs (direct mode only: a clone has
/// its own), refusing a `.git` file git does not confirm or whose directory overlaps a mount.
fn linked_git_dirs(
    req: &LoadRequest<'_>,
    workspaces: &mut [Workspace],
    mounts: &[crate::effective::Mount],
    d: &mut Vec<Diagnostic>,
) {
    for w in workspaces {
        if w.mode.value != WorkspaceMode::Direct {
            continue;
        }
        let diag = |message: String| Diagnostic {
            file: w.host_path.join(".git"),
            key: "workspace".to_owned(),
            line: 0,
            column: 0,
            message,
        };
        match git_worktree::linked_worktree(&w.host_path, req.roots) {
            Ok(None) => {}
            Ok(Some(linked)) => {
                if let Some(m) = mounts
                    .iter()
                    .find(|m| mounts::overlaps(&m.host_path, &linked.common_dir))
                {
                    d.push(diag(format!(
                        "the worktree's git directory {} overlaps mount {:?} ({}); \
                         remove the mount or use the main work tree as the project",
                        linked.common_dir.display(),
                        m.name,
                        m.host_path.display()
                    )));
                    continue;
                }
                w.linked_git_dir = Some(linked);
            }
            Err(e) => d.push(diag(format!(
                "cannot map this linked worktree's git directory: {e}"
            ))),
        }
    }
}

/// The user config's validated mounts (C3).
fn user_mounts(
    user: Option<&ParsedFile>,
    req: &LoadRequest<'_>,
    d: &mut Vec<Diagnostic>,
) -> Vec<crate::effective::Mount> {
    let workspace_root = req.project.map(|p| p.root.as_path());
    user.map(|f| mounts::validate(f, req.roots, workspace_root, d))
        .unwrap_or_default()
}

/// The catalogue entry or user-defined agent named `name`.
fn lookup(name: &str, defined: &[&'static AgentSpec]) -> Option<&'static AgentSpec> {
    agents::find(name).or_else(|| defined.iter().copied().find(|a| a.name == name))
}

/// Agents the user config defines (`[agents.<name>]` with `command`), each validated.
fn defined_agents(user: Option<&ParsedFile>, d: &mut Vec<Diagnostic>) -> Vec<&'static AgentSpec> {
    let mut out = Vec::new();
    let Some(user) = user else {
        return out;
    };
    for (name, settings) in &user.raw.agents {
        match agent_defs::define(name, settings) {
            Ok(Some(spec)) => out.push(spec),
            Ok(None) => {}
            Err(errors) => {
                for (key, message) in errors {
                    let base = format!("agents.{}", key_segment(name));
                    let full = if key.is_empty() {
                        base
                    } else {
                        format!("{base}.{key}")
                    };
                    d.push(user.diag(&full, message));
                }
            }
        }
    }
    out
}

fn agent_settings(
    layers: &Layers<'_>,
    selected: Option<&'static AgentSpec>,
    defined: &[&'static AgentSpec],
    d: &mut Vec<Diagnostic>,
) -> Vec<Agent> {
    for (_, file) in &layers.files {
        for (name, settings) in &file.raw.agents {
            if lookup(name, defined).is_none() && settings.command.is_none() {
                let key = format!("agents.{}", key_segment(name));
                d.push(file.diag(&key, unknown_agent(name)));
            }
            for (i, a) in settings.args.iter().flatten().enumerate() {
                if let Err(m) = values::arg(a) {
                    let key = format!("agents.{}.args[{i}]", key_segment(name));
                    d.push(file.diag(&key, m));
                }
            }
        }
    }
    let mut out = Vec::new();
    for spec in agents::CATALOGUE.iter().chain(defined.iter().copied()) {
        let is_selected = selected.is_some_and(|s| s.name == spec.name);
        let configured = layers
            .files
            .iter()
            .any(|(_, f)| f.raw.agents.contains_key(spec.name));
        if !is_selected && !configured {
            continue;
        }
        let pick = |get: &dyn Fn(&RawAgentSettings) -> Option<bool>, default: bool| {
            layers
                .files
                .iter()
                .rev()
                .find_map(|(o, f)| f.raw.agents.get(spec.name).and_then(get).map(|v| (*o, v)))
                .map_or(Sourced::new(default, Origin::Default), |(o, v)| {
                    Sourced::new(v, o)
                })
        };
        let args = layers
            .files
            .iter()
            .rev()
            .find_map(|(o, f)| {
                let args = f.raw.agents.get(spec.name)?.args.clone()?;
                Some(Sourced::new(args, *o))
            })
            .unwrap_or_else(|| {
                let defaults = spec.default_args.iter().map(|s| (*s).to_owned()).collect();
                Sourced::new(defaults, Origin::Default)
            });
        out.push(Agent {
            spec,
            selected: is_selected,
            args,
            sync_config: pick(&|s| s.sync_config, true),
            credentials: pick(&|s| s.credentials, false),
            persist_state: pick(&|s| s.persist_state, false),
        });
    }
    out
}

fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Whether the project's provision script exists, checked beneath the root without following
/// links (C7): a link, FIFO or directory there is an error, not a step.
fn project_script(project: &Project, d: &mut Vec<Diagnostic>) -> bool {
    let path = &project.provision_path;
    let rel = path.strip_prefix(&project.root).unwrap_or(path);
    match beneath::open_beneath(&project.root, rel) {
        Ok(found) => found.is_some(),
        Err(e) => {
            d.push(Diagnostic {
                file: path.clone(),
                key: String::new(),
                line: 0,
                column: 0,
                message: e.to_string(),
            });
            false
        }
    }
}

fn provisioning(
    req: &LoadRequest<'_>,
    layers: &Layers<'_>,
    d: &mut Vec<Diagnostic>,
) -> Vec<ProvisionStep> {
    let mut steps = vec![ProvisionStep {
        phase: Phase::Base,
        owner: StepOwner::Airlock,
        detail: "locale C.UTF-8, CA trust, git configuration, agent configuration".to_owned(),
    }];
    for (_, file) in &layers.files {
        let names: Vec<&str> = file
            .raw
            .packages
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if !names.is_empty() {
            steps.push(ProvisionStep {
                phase: Phase::Packages,
                owner: StepOwner::File(file.file.clone()),
                detail: format!("install {}", names.join(" ")),
            });
        }
    }
    let user_script = req.roots.provision_script_path();
    if is_file(&user_script) {
        steps.push(ProvisionStep {
            phase: Phase::UserScript,
            owner: StepOwner::File(user_script.clone()),
            detail: format!("run {}", user_script.display()),
        });
    }
    if let Some(p) = req.project.filter(|p| project_script(p, d)) {
        steps.push(ProvisionStep {
            phase: Phase::ProjectScript,
            owner: StepOwner::File(p.provision_path.clone()),
            detail: format!("run {}", p.provision_path.display()),
        });
    }
    steps
}
