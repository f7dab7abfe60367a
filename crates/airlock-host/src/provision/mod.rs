//! Provisioning of a ready sandbox on every `up` (PRODUCT P1, P3, L7), and the host
//! environment it relies on: the package cache, `[[tool]]` mappings and `[env]` ([`host_env`]).
//!
//! Order of operations:
//! 1. [`plan`], before any side effect (L2): the steps of the effective configuration in P1
//!    order. Scripts are read here, on the host, and only this way: the project's
//!    `.airlock/provision.sh` beneath the project root without following any link, as a regular
//!    file of at most [`SCRIPT_CAP`] bytes (C7, `airlock_config::beneath`); the user's
//!    `provision.sh` the same way beneath the user config directory. `packages` in the `host`
//!    image of an unprivileged invoker are refused here ([`check_packages`]).
//! 2. `airlock_core::lifecycle::up` calls [`Provisioner`] once the sandbox is ready, under the
//!    sandbox lock, recording each step's phase first. The base step starts no process: it
//!    has the keeper's proxy reload the current network policy and secrets, so a retained
//!    sandbox enforces the configuration as it is now, before any package is fetched (a `linux`
//!    sandbox this `up` created skips it: its keeper starts the proxy only at the first
//!    connection from inside, which loads the configuration in force then). Each step runs *inside* the sandbox
//!    through the exec channel — never on the host — as the sandbox user, or as the sandbox's
//!    root for `packages` and for a script that asks for it with a `# airlock: run-as root`
//!    line in its leading comments. Its output streams live to stderr, each line prefixed with
//!    the phase name.
//! 3. A step that fails stops provisioning with its phase, owner file, workspace and how it
//!    ended; the sandbox stays `ready` (P3). Ctrl+C stops the running step (SIGTERM to its
//!    process group, SIGKILL after [`STOP_GRACE`]) and `up` exits 130 saying what it left.

pub(crate) mod host_env;
mod output;
mod runner;

pub use host_env::{attach_host_environment, cache_dir, prepare_cache, CacheError};
pub use runner::Provisioner;

use std::path::Path;
use std::time::Duration;

use airlock_config::effective::{Image, Phase, StepOwner};
use airlock_config::{beneath, env_vars, Effective, Roots};
use airlock_protocol::ExecUser;

use crate::error::{ErrorKind, HostError};

/// Largest provision script airlock reads (it travels as one argument, below the kernel's
/// 128 KiB limit per argument).
pub const SCRIPT_CAP: u64 = 64 * 1024;

/// How long a cancelled step gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// The line that makes a script run as the sandbox's root (namespaced, never the host's).
pub const RUN_AS_ROOT: &str = "# airlock: run-as root";

/// What one step runs inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The base setup: locale and CA trust are part of the sandbox's environment and files
    /// from its start; what can change between two `up`s of a retained sandbox — the network
    /// policy and the secrets (hand edits included) — is re-applied by its keeper's proxy.
    Base,
    /// A process.
    Exec {
        argv: Vec<String>,
        user: ExecUser,
        cwd: Option<String>,
    },
}

/// One provisioning step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub phase: Phase,
    /// The file that asked for it (or `airlock`), named when it fails (P3).
    pub owner: String,
    pub action: Action,
}

/// The steps of one `up`, in P1 order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionPlan {
    pub steps: Vec<Step>,
    /// The workspace the steps belong to (named when one fails).
    pub workspace: String,
}

/// The phase name used in output and operation records.
pub fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Base => "base",
        Phase::Packages => "packages",
        Phase::UserScript => "user-script",
        Phase::ProjectScript => "project-script",
    }
}

/// Refuses `packages` where they cannot be installed: the `host` image of an unprivileged
/// invoker, whose system files are read-only inside (I2).
pub fn check_packages(eff: &Effective) -> Result<(), HostError> {
    let unprivileged = rustix::process::getuid().as_raw() != 0;
    if eff.packages.is_empty() || !unprivileged || eff.image.value != Image::Host {
        return Ok(());
    }
    let names: Vec<&str> = eff.packages.iter().map(|p| p.value.as_str()).collect();
    Err(HostError::new(
        ErrorKind::Config,
        "provision.packages_read_only",
        format!(
            "`packages` ({}) cannot be installed: for an unprivileged user the host image's \
             system files are read-only inside the sandbox",
            names.join(" ")
        ),
    )
    .with_hint(
        "remove `packages` and use a directory image (image = \"/path/to/rootfs\"), or a \
         user-space installer (pip --user, npm, cargo install, uv) in .airlock/provision.sh",
    ))
}

/// The steps of the effective configuration; reads the scripts (see the module docs).
pub fn plan(eff: &Effective, roots: &Roots) -> Result<ProvisionPlan, HostError> {
    check_packages(eff)?;
    let workspace = eff
        .workspaces
        .first()
        .map(|w| w.sandbox_path.display().to_string())
        .unwrap_or_default();
    let mut steps = Vec::new();
    for step in &eff.provisioning {
        let owner = match &step.owner {
            StepOwner::Airlock => "airlock".to_owned(),
            StepOwner::File(path) => path.display().to_string(),
        };
        let action = match step.phase {
            Phase::Base => Action::Base,
            // One step per config file asking for packages; the first installs them all.
            Phase::Packages if steps.iter().any(|s: &Step| s.phase == Phase::Packages) => continue,
            Phase::Packages => packages_action(eff),
            Phase::UserScript => {
                let text = read_script(&roots.config, Path::new("provision.sh"))?;
                script_action(&text, &owner, None)
            }
            Phase::ProjectScript => {
                let Some(project) = &eff.project else {
                    continue;
                };
                let rel = project
                    .provision_path
                    .strip_prefix(&project.root)
                    .unwrap_or(&project.provision_path);
                let text = read_script(&project.root, rel)?;
                script_action(&text, &owner, Some(workspace.clone()))
            }
        };
        steps.push(Step {
            phase: step.phase,
            owner,
            action,
        });
    }
    Ok(ProvisionPlan { steps, workspace })
}

/// A script beneath `root`, never following a link, regular file, capped, UTF-8 without NUL.
fn read_script(root: &Path, rel: &Path) -> Result<String, HostError> {
    let path = root.join(rel);
    let refuse = |why: String| {
        HostError::new(
            ErrorKind::Config,
            "provision.script",
            format!("cannot use the provision script {}: {why}", path.display()),
        )
        .with_hint("make it a regular UTF-8 text file of at most 64 KiB, or remove it")
    };
    let bytes = beneath::read_beneath(root, rel, SCRIPT_CAP)
        .map_err(|e| refuse(e.to_string()))?
        .ok_or_else(|| refuse("it disappeared after the configuration was read".into()))?;
    let text = String::from_utf8(bytes).map_err(|_| refuse("it is not UTF-8 text".into()))?;
    if text.contains('\0') {
        return Err(refuse("it contains a NUL byte".into()));
    }
    Ok(text)
}

/// `bash` when the script's `#!` line names bash, else `sh`; as root when it asks for it.
fn script_action(text: &str, owner: &str, cwd: Option<String>) -> Action {
    let first = text.lines().next().unwrap_or("");
    let shell = if first.starts_with("#!") && first.contains("bash") {
        "bash"
    } else {
        "sh"
    };
    let as_root = text
        .lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .any(|l| l.trim() == RUN_AS_ROOT);
    Action::Exec {
        // `$0` is the owner file, so the shell's own messages name it.
        argv: vec![shell.into(), "-c".into(), text.into(), owner.into()],
        user: if as_root {
            ExecUser::Root
        } else {
            ExecUser::Sandbox
        },
        cwd,
    }
}

/// apt-get as the sandbox's root, archives and lists in the package cache (P2): nothing is
/// fetched when every package is installed, and a fresh sandbox installs from the cached
/// archives without `apt-get update` unless that fails.
///
/// The cache outlives the sandbox, and the next sandbox's root may be another host id (a root
/// invoker's sandboxes each claim their own range): whatever root writes there is given to the
/// cache's owner, the sandbox user, when the step ends, however it ends; apt's lock files are
/// removed. A tree a killed step left owned by an id this sandbox cannot use is moved aside
/// (`apt.stale-*`, the host user may delete it) and the cache starts again.
const APT_SCRIPT: &str = r#"set -eu
if ! command -v apt-get >/dev/null 2>&1; then
  echo "airlock: \`packages\` needs apt-get, which this image does not have" >&2
  exit 127
fi
missing=
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "already installed: $*"
  exit 0
fi
cache=@CACHE@
owner=$(stat -c %u:%g "${cache%/*}")
if [ -e "$cache" ] && [ -n "$(find "$cache" ! -user "${owner%:*}" -print -quit 2>/dev/null || echo unreadable)" ]; then
  stale="$cache.stale-$$"
  echo "airlock: moving aside $cache (left by an interrupted step) to $stale" >&2
  mv "$cache" "$stale"
fi
release() {
  rm -f "$cache/archives/lock" "$cache/lists/lock"
  chown -R "$owner" "$cache" 2>/dev/null || true
}
trap release EXIT
trap 'exit 143' TERM INT HUP
mkdir -p "$cache/archives/partial" "$cache/lists/partial"
export DEBIAN_FRONTEND=noninteractive
aptc() {
  apt-get -q -o "Dir::Cache::Archives=$cache/archives/" -o "Dir::State::Lists=$cache/lists/" \
    -o APT::Sandbox::User=root "$@"
}
if ls "$cache/lists" | grep -q _Packages && aptc -y --no-install-recommends install "$@"; then
  exit 0
fi
aptc update
aptc -y --no-install-recommends install "$@"
"#;

fn packages_action(eff: &Effective) -> Action {
    let mut argv = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        APT_SCRIPT.replace("@CACHE@", &format!("{}/apt", env_vars::SANDBOX_CACHE_DIR)),
        "airlock-packages".to_owned(),
    ];
    argv.extend(eff.packages.iter().map(|p| p.value.clone()));
    Action::Exec {
        argv,
        user: ExecUser::Root,
        cwd: Some("/".to_owned()),
    }
}
