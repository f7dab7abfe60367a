//! The public verbs, one module per verb. Each exposes a clap `Args` struct and
//! `run(args, &Context) -> Result<Report, HostError>`; adding a verb is one variant in
//! [`Command`] and one arm in [`run`].
//!
//! A verb validates its whole command line and configuration before its first side effect
//! (PRODUCT L2); clap has already rejected malformed options before any verb runs.

use clap::Subcommand;

use crate::context::Context;
use crate::error::HostError;
use crate::output::Doc;

pub mod attach;
pub mod clean;
pub mod completions;
pub mod config;
pub mod doctor;
pub mod down;
pub mod exec;
pub mod image;
pub mod init;
pub mod ls;
pub mod plan;
pub mod policy;
pub mod ports;
pub mod pull;
pub mod push;
pub mod run;
pub mod secret;
pub mod sessions;
pub mod status;
pub mod trust;
pub mod up;
pub mod version;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create .airlock/config.toml at the project root (never overwrites)
    Init(init::InitArgs),
    /// Create or open the user config; refresh config.schema.json beside it
    Config(config::ConfigArgs),
    /// Validate everything and show the effective configuration with origins; changes nothing
    Plan(plan::PlanArgs),
    /// Run one command in an ephemeral sandbox of the project, then destroy it
    Run(run::RunArgs),
    /// Create the project's persistent sandbox (or reuse the exact ready one), then attach
    Up(up::UpArgs),
    /// Attach this terminal to a session of the ready sandbox (default: main, created if absent)
    Attach(attach::AttachArgs),
    /// List the sandbox's sessions, or end one (`sessions kill SESSION`)
    Sessions(sessions::SessionsArgs),
    /// Run one command in the ready sandbox
    Exec(exec::ExecArgs),
    /// Copy a host file or directory into the ready sandbox
    Push(push::PushArgs),
    /// Copy a file or directory out of the ready sandbox
    Pull(pull::PullArgs),
    /// Forward host loopback ports into the ready sandbox; list the forwards
    Ports(ports::PortsArgs),
    /// Health of the project's sandbox and of its latest operation; exit 0 only when ready
    Status(status::StatusArgs),
    /// List every sandbox of this user
    Ls(ls::LsArgs),
    /// Stop the sandbox and discard what changed inside it (idempotent)
    Down(down::DownArgs),
    /// Remove inactive sandbox state that airlock can prove it owns
    Clean(clean::CleanArgs),
    /// Network policy: list, allow, deny, check a destination, read the audit log
    Policy(policy::PolicyArgs),
    /// Host-side secrets bound to hosts; the sandbox sees only placeholders
    Secret(secret::SecretArgs),
    /// Imported images: import a rootfs, docker save or OCI archive; list; remove
    Image(image::ImageArgs),
    /// Trust this project's config to widen the network policy (until the file changes)
    Trust(trust::TrustArgs),
    /// Withdraw trust from this project's config
    Untrust(trust::UntrustArgs),
    /// Check what this host offers for sandboxes, with the fix for anything missing
    Doctor(doctor::DoctorArgs),
    /// Print the release version, UTC build label and source revision
    Version(version::VersionArgs),
    /// Print shell completions (bash, zsh, fish) for airlock
    Completions(completions::CompletionsArgs),
}

/// Runs one verb.
pub fn run(command: Command, ctx: &Context) -> Result<Report, HostError> {
    match command {
        Command::Init(args) => init::run(args, ctx),
        Command::Config(args) => config::run(args, ctx),
        Command::Plan(args) => plan::run(args, ctx),
        Command::Run(args) => run::run(args, ctx),
        Command::Up(args) => up::run(args, ctx),
        Command::Attach(args) => attach::run(args, ctx),
        Command::Sessions(args) => sessions::run(args, ctx),
        Command::Exec(args) => exec::run(args, ctx),
        Command::Push(args) => push::run(args, ctx),
        Command::Pull(args) => pull::run(args, ctx),
        Command::Ports(args) => ports::run(args, ctx),
        Command::Status(args) => status::run(args, ctx),
        Command::Ls(args) => ls::run(args, ctx),
        Command::Down(args) => down::run(args, ctx),
        Command::Clean(args) => clean::run(args, ctx),
        Command::Policy(args) => policy::run(args, ctx),
        Command::Secret(args) => secret::run(args, ctx),
        Command::Image(args) => image::run(args, ctx),
        Command::Trust(args) => trust::run_trust(args, ctx),
        Command::Untrust(args) => trust::run_untrust(args, ctx),
        Command::Doctor(args) => doctor::run(args, ctx),
        Command::Version(args) => version::run(args, ctx),
        Command::Completions(args) => completions::run(args, ctx),
    }
}

/// What a verb produced: the human document, the JSON document, and optionally a failure that
/// still comes with a result (e.g. `doctor` listing its checks and exiting 69).
#[derive(Debug)]
pub struct Report {
    pub doc: Doc,
    pub json: serde_json::Value,
    /// When set, the process exits with this error's code after printing the result; in JSON
    /// the error is added to the result document under `"error"`.
    pub failure: Option<HostError>,
    /// Diagnostics for stderr (created files, warnings), printed before the result.
    pub notes: Vec<String>,
    /// The exit status to end with when there is no failure: a guest command's own status for
    /// `exec`/`run` (PRODUCT O5: 128+N when it died of signal N), set by the verb after its
    /// cleanup so the process still ends through the normal output path. `None` means 0.
    pub status: Option<u8>,
}

impl Report {
    pub fn new(doc: Doc, json: serde_json::Value) -> Self {
        Self {
            doc,
            json,
            failure: None,
            notes: Vec::new(),
            status: None,
        }
    }

    /// Adds a diagnostic line for stderr.
    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    pub fn with_failure(mut self, failure: HostError) -> Self {
        self.failure = Some(failure);
        self
    }
}

/// Test hook, debug builds only (release builds never read it): with
/// `AIRLOCK_TEST_PAUSE_AT=<phase>`, says so on stderr and sleeps 3 s at that point of a
/// command, so that a test can act there (press Ctrl+C, run a concurrent command). Slowing
/// airlock down is something any user can do with `kill -STOP` anyway: it grants nothing.
pub(crate) fn pause_hook(phase: &str) {
    if cfg!(debug_assertions)
        && std::env::var(airlock_config::env_vars::AIRLOCK_TEST_PAUSE_AT).is_ok_and(|p| p == phase)
    {
        eprintln!("airlock: test hook: pausing at {phase}");
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
}
