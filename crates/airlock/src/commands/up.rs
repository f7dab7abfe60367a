//! `airlock up [--no-attach] [--memory-mb N] [--timeout D] [--name NAME]` (PRODUCT L1–L4, L7).
//!
//! Order of operations:
//! 1. Validate everything before any side effect (L2): the name, `--timeout`, the terminal
//!    requirement of attaching (L4: without a terminal and without `--no-attach` it fails here,
//!    naming `--no-attach`), the project and its configuration, the sandbox spec. Once the
//!    name and the terminal are known, the keeper is spawned parked
//!    (`airlock_host::lifecycle::park_keeper`) so that its start-up overlaps the rest: it
//!    creates nothing before its go-ahead, which comes after the sandbox's `starting` record,
//!    and a failure here kills and reaps it.
//! 2. Ctrl+C handling (L7): the first Ctrl+C cancels cleanly (what was created is rolled back,
//!    a ready sandbox is kept) and exits 130; a second one exits at once.
//! 3. `airlock_core::lifecycle::up` (lock, stale cleanup, reuse/refuse/create, records), which
//!    provisions the ready sandbox, fresh or retained (`airlock_host::provision`, P1).
//! 4. One line of timings (L3: preparation, provisioning and total, each measured), then the
//!    default session (S1): attach to it, creating it when absent or exited; with `--no-attach`
//!    only make sure it exists.
//!
//! Test hooks, in debug builds only: `AIRLOCK_TEST_CRASH_AT=<phase>` aborts the process when
//! that phase starts, to test crash recovery (L8); `AIRLOCK_TEST_PAUSE_AT=<phase>` sleeps 3 s
//! there, so a test can press Ctrl+C mid-phase (L7) or run a concurrent `down` (also at `home`
//! and `session`, after the lifecycle phases). Release builds never read them; aborting
//! or slowing airlock is something any user can do with `kill` anyway, so they grant nothing.

use std::time::{Duration, Instant};

use airlock_core::lifecycle::{self, Observer, UpRequest};
use airlock_core::records::Epoch;
use airlock_host::agents::ReadySetup;
use airlock_host::sessions;
use airlock_protocol::{Opened, WindowSize, DEFAULT_SESSION};
use airlock_term::attach::{attach_terminal, AttachPlan};
use airlock_term::interrupt::CtrlC;
use airlock_term::terminal::term;
use clap::Args;

use airlock_host::config::load_effective;
use airlock_host::lifecycle::{lifecycle_error, parse_duration, plan_summary};
use airlock_host::provision;
use airlock_host::run::Phases;
use airlock_host::Host;

use super::Report;
use crate::context::{active_project, resolve_name, setup, Context};
use crate::error::HostError;
use crate::lib_errors::attach_error;
use crate::output::{Doc, Style};

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Do not attach to the default session after the sandbox is ready (needed without a terminal)
    #[arg(long)]
    pub no_attach: bool,
    /// Memory limit in MiB for this sandbox only (minimum 256); no file is rewritten
    #[arg(long, value_name = "N")]
    pub memory_mb: Option<u64>,
    /// Longest wait for the sandbox to become ready (e.g. 30s, 2m)
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Sandbox name instead of the project's `<dir>-<digest>` (a-z, 0-9, '-'; at most 63)
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// A `vm` sandbox's boot: under TCG on a loaded host it takes tens of seconds, even minutes.
const VM_DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

pub fn run(args: UpArgs, ctx: &Context) -> Result<Report, HostError> {
    let t0 = Instant::now();
    let traced = ctx
        .var(airlock_config::env_vars::AIRLOCK_TRACE_PHASES)
        .is_some();
    let mut phases = Phases::new(traced.then_some(print_phase as fn(&str, Duration)));
    let (name, project) = resolve_name(ctx, args.name.as_deref())?;
    let has_terminal = ctx.stdin_is_terminal && ctx.stdout_is_terminal;
    if !args.no_attach && !has_terminal {
        return Err(HostError::usage(
            "`up` ends attached to the default session, which needs a terminal on stdin and stdout",
        )
        .with_hint(
            "pass --no-attach to only create the sandbox and its default session (e.g. in scripts)",
        ));
    }
    let roots = ctx.roots()?;
    // The keeper's exec and start-up overlap the validation: it waits for its go-ahead and
    // does nothing until then; dropped on any failure below, it is killed and reaped.
    let parked = airlock_host::lifecycle::park_keeper(&roots, &name);
    let project = match project {
        Some(p) => p,
        None => active_project(ctx)?,
    };
    let mut notes = Vec::new();
    let effective = load_effective(&roots, Some(project.clone()), args.memory_mb, &mut notes)?;
    airlock_host::sessions::detach_key(&effective)?;
    let steps = provision::plan(&effective, &roots)?;
    let mut spec = airlock_host::run::build_spec(&effective, false)?;
    // Until this `up` ends (its record written), `image rm` of the image is refused.
    let _image = airlock_host::run::hold_image(&roots, &spec.image)?;
    airlock_host::egress::attach(&mut spec, &effective.network, &roots.data)?;
    let vm = airlock_host::vm::selected(ctx.backend.as_deref(), &effective, &spec, &roots)?;
    // Validation is over: the agent's directories and a clone-mode workspace's clone.
    let agents = airlock_host::agents::prepare(&effective, &roots, name.as_str(), &mut spec);
    notes.extend(agents?);
    airlock_host::project::remember_project(&roots, &project)?;
    let cache = provision::prepare_cache(&roots, &effective)?;
    provision::attach_host_environment(&mut spec, &effective, &cache);
    let plan = plan_summary(&spec);
    phases.done("validate");

    let cancel = CtrlC::install();
    let default_timeout = match vm {
        Some(_) => VM_DEFAULT_TIMEOUT,
        None => DEFAULT_TIMEOUT,
    };
    let mut setup = setup(ctx, true)?;
    setup.backend.vm = vm;
    setup.backend.parked = std::sync::Mutex::new(Some(parked));
    let request = UpRequest {
        name: name.clone(),
        project_root: project.root.clone(),
        plan,
        spec,
        paths: setup.paths(&name),
        lock_wait: airlock_host::lifecycle::lock_wait(),
        timeout: args.timeout.unwrap_or(default_timeout),
    };
    let mut progress = Progress::new(phases);
    let cancelled = cancel.check();
    let mut provisioner = provision::Provisioner {
        plan: steps,
        backend: &setup.backend,
        cancel: cancel.flag(),
        timings: Vec::new(),
    };
    // The home files come from the host only (synced agent configuration, a git process for
    // the user's identity): collected while the sandbox starts, not after.
    let (outcome, base) = std::thread::scope(|scope| {
        let base = scope.spawn(|| airlock_host::agents::home::base_files(&effective, &roots));
        let outcome = lifecycle::up(
            &setup.stores,
            &setup.backend,
            request,
            &mut progress,
            &mut provisioner,
            &cancelled,
        );
        let base = base
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (outcome.map_err(lifecycle_error), base)
    });
    let mut phases = progress.finish();
    let outcome = outcome?;
    let total = ms(t0.elapsed());
    if cancel.cancelled() {
        // L7: Ctrl+C came after the sandbox was ready; keep it and say so.
        return Err(HostError::new(
            crate::error::ErrorKind::Interrupted,
            "lifecycle.cancelled",
            format!("cancelled; sandbox {name} was already ready and is kept"),
        )
        .with_hint("run `airlock up` to attach to it, or `airlock down` to remove it"));
    }
    notes.extend(outcome_notes(&outcome));
    // What the sandbox runs without (e.g. cgroup limits this user may not create).
    notes.extend(
        airlock_host::lifecycle::backend::start_warnings(&outcome.record)
            .into_iter()
            .map(|w| format!("warning: {w}")),
    );
    phases.done("notes");
    let (lines, json) = summary(&name, &outcome, total);
    // Test hook: a concurrent `down` stops the sandbox before its setup.
    super::pause_hook("home");
    // `--no-attach` ends with a request for the default session: its stream is opened (and
    // authenticated) while the home files are written, which the request itself must follow.
    let (ready, early) = std::thread::scope(|scope| {
        let early = args
            .no_attach
            .then(|| scope.spawn(|| sessions::connect(&setup, &outcome.record)));
        let ready = airlock_host::agents::setup_ready(
            &setup,
            &name,
            &outcome.record.epoch,
            &effective,
            &roots,
            base,
        );
        let early = early.map(|handle| {
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        (ready, early)
    });
    match ready? {
        ReadySetup::Done(ready_notes) => notes.extend(ready_notes),
        ReadySetup::Gone => return Ok(stopped_meanwhile(&name, notes, lines, json)),
    }
    // Issue 11: the user config's `[[ports]]`, on every `up` (fresh or retained).
    notes.extend(airlock_host::lifecycle::ports::publish_configured(
        &outcome.record.paths.runtime_dir,
        &effective.ports,
    ));
    phases.done("home");
    for (name, ms) in &outcome.operation.timings {
        if name.starts_with("backend.") {
            phases.add(name, Duration::from_millis(*ms));
        }
    }
    // S1: every `up` makes sure the default session exists; attaching creates it.
    let plan = AttachPlan::new(
        DEFAULT_SESSION,
        sessions::create_spec(
            &effective,
            &outcome.record,
            &roots.data,
            DEFAULT_SESSION,
            term(),
        ),
        sessions::detach_key(&effective)?,
        args.name.as_deref(),
    );
    if args.no_attach {
        let mut doc = Doc::new();
        for line in &lines {
            doc.text(0, &[(Style::Plain, line)]);
        }
        // Test hook: a concurrent `down` stops the sandbox between its setup and the session.
        super::pause_hook("session");
        let session = match ensure_default(&setup, &outcome.record, &plan, early) {
            Err(e) if no_shell(&e, &plan) => {
                notes.push(no_shell_note(&e));
                None
            }
            Err(_) if gone(&setup, &name, &outcome.record.epoch) => {
                return Ok(stopped_meanwhile(&name, notes, lines, json));
            }
            other => Some(other),
        };
        phases.done("session");
        let mut json = json;
        if let Some(Ok((line, opened))) = &session {
            doc.text(0, &[(Style::Plain, line)]);
            json["session"] = crate::session_view::json(&opened.session);
            json["session"]["created"] = opened.created.into();
        }
        let mut report = Report::new(doc, json);
        report.notes = notes;
        // The sandbox is ready either way; a session that cannot start fails `up` (exit 1),
        // unless it is the shell an image without one cannot run (a note above).
        return Ok(match session {
            Some(Err(e)) => report.with_failure(e),
            Some(Ok(_)) | None => report,
        });
    }
    // An image other than the host's may have no shell: find out before taking the terminal.
    if effective.image.value != airlock_config::effective::Image::Host
        && plan.create.as_ref().is_some_and(runs_a_shell)
    {
        if let Err(e) = ensure_default(&setup, &outcome.record, &plan, None) {
            if !no_shell(&e, &plan) {
                return Err(e);
            }
            notes.push(no_shell_note(&e));
            for line in notes.iter().chain(lines.iter()) {
                eprintln!("{}", crate::output::escape_untrusted(line));
            }
            return Ok(Report::new(Doc::new(), json));
        }
    }
    // Attaching takes over the terminal: say everything first.
    for line in notes.iter().chain(lines.iter()) {
        eprintln!("{}", crate::output::escape_untrusted(line));
    }
    cancel.stop();
    // Test hook: a concurrent `down` stops the sandbox between its setup and the attach.
    super::pause_hook("attach");
    let (stream, key) = match airlock_host::sessions::open_stream(&setup, &outcome.record) {
        Ok(opened) => opened,
        // Everything else was said above; only the note is left to say.
        Err(_) if gone(&setup, &name, &outcome.record.epoch) => {
            return Ok(stopped_meanwhile(&name, Vec::new(), Vec::new(), json));
        }
        Err(e) => return Err(e),
    };
    let status = attach_terminal(stream, &key, &plan).map_err(|e| attach_error(e, &plan.name))?;
    let mut report = Report::new(Doc::new(), json);
    report.status = Some(u8::try_from(status).unwrap_or(u8::MAX));
    Ok(report)
}

/// Whether a concurrent command (`down`, a newer `up`) stopped or replaced the sandbox of
/// `epoch` that this `up` made ready. Waits for the sandbox's lock, so that a `down` still
/// at work has finished and the answer is the truth; any doubt is "no".
fn gone(host: &Host, name: &airlock_core::names::SandboxName, epoch: &Epoch) -> bool {
    let Ok(_guard) = host.stores.lock(name, airlock_host::lifecycle::lock_wait()) else {
        return false;
    };
    matches!(
        airlock_host::agents::still_ready(host, name, epoch),
        Ok(None)
    )
}

/// `up`'s report when the sandbox it made ready was stopped or replaced by a concurrent
/// command before the default session: the two commands ran one after the other, both
/// succeeded, and `status` tells what is there now. No session is started in a sandbox
/// that `up` did not make (a replacing `up` makes its own).
fn stopped_meanwhile(
    name: &airlock_core::names::SandboxName,
    mut notes: Vec<String>,
    lines: Vec<String>,
    json: serde_json::Value,
) -> Report {
    notes.push(format!(
        "note: sandbox {name} was stopped or replaced meanwhile by another airlock command; \
         no session was started (run `airlock status` to see what is there now)"
    ));
    let mut doc = Doc::new();
    for line in &lines {
        doc.text(0, &[(Style::Plain, line)]);
    }
    let mut json = json;
    json["stopped_meanwhile"] = true.into();
    let mut report = Report::new(doc, json);
    report.notes = notes;
    report
}

/// Diagnostics about what `up` found and cleaned on its way.
fn outcome_notes(outcome: &lifecycle::UpOutcome) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(op) = &outcome.interrupted {
        notes.push(format!(
            "note: an earlier `{}` (pid {}) died during phase {}; it was marked interrupted",
            op.kind.as_str(),
            op.process.pid,
            op.phase
        ));
    }
    for (n, health, freed) in &outcome.cleaned.cleaned {
        notes.push(format!(
            "note: cleaned up {health} sandbox {n} ({} freed)",
            airlock_host::lifecycle::human_bytes(freed.bytes)
        ));
    }
    notes
}

/// The result lines (L3: one line of timings) and the JSON document.
fn summary(
    name: &airlock_core::names::SandboxName,
    outcome: &lifecycle::UpOutcome,
    total: u64,
) -> (Vec<String>, serde_json::Value) {
    let epoch = outcome.record.epoch.display();
    let verb = if outcome.reused { "reused" } else { "created" };
    let provisioning = ms(outcome.provisioning);
    let preparation = total.saturating_sub(provisioning);
    let lines = vec![
        format!("{verb} sandbox {name} (epoch {epoch})"),
        format!(
            "ready in {total} ms (preparation {preparation} ms, provisioning {provisioning} ms)"
        ),
    ];
    let json = serde_json::json!({
        "name": name.as_str(),
        "reused": outcome.reused,
        "epoch": epoch,
        "guest": { "pid": outcome.record.guest.as_ref().map(|g| g.pid) },
        "timings": {
            "total_ms": total,
            "preparation_ms": preparation,
            "provisioning_ms": provisioning,
            "phases": outcome.operation.timings,
        },
    });
    (lines, json)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether the default session `spec` runs a shell — the login shell, or the `tmux` layout's
/// `/bin/sh` wrapper — rather than a configured agent's command.
fn runs_a_shell(spec: &airlock_protocol::SessionSpec) -> bool {
    match &spec.command {
        airlock_protocol::SessionCommand::LoginShell { .. } => true,
        airlock_protocol::SessionCommand::Argv { argv } => {
            argv.first().is_some_and(|a| a == "/bin/sh")
        }
    }
}

/// Whether `e` is the default session failing to start a shell the image does not have (no
/// failure of `up`: the sandbox is ready, and `exec` runs the image's programs).
fn no_shell(e: &HostError, plan: &AttachPlan) -> bool {
    e.code == "session.spawn" && plan.create.as_ref().is_some_and(runs_a_shell)
}

fn no_shell_note(e: &HostError) -> String {
    format!(
        "note: no default session: the image has no shell to run ({}); run its programs with \
         `airlock exec -- PROGRAM`, or add a shell to the image",
        e.message
    )
}

/// Makes sure the default session exists (`up --no-attach`); a line saying so. `early`: a
/// stream opened for it beforehand; without one, or when opening it failed, one is opened now.
fn ensure_default(
    host: &Host,
    record: &airlock_core::records::SandboxRecord,
    plan: &AttachPlan,
    early: Option<Result<airlock_protocol::SessionClient, HostError>>,
) -> Result<(String, Opened), HostError> {
    let Some(spec) = plan.create.clone() else {
        return Err(HostError::internal(
            "session.default",
            "the default session has no spec",
        ));
    };
    let size = airlock_term::terminal::window_size().unwrap_or(WindowSize { rows: 24, cols: 80 });
    let opened = match early {
        Some(Ok(client)) => airlock_host::sessions::ensure_on(client, &plan.name, spec, size)?,
        Some(Err(_)) | None => {
            airlock_host::sessions::ensure(host, record, &plan.name, spec, size)?
        }
    };
    let state = if opened.created {
        "started"
    } else {
        "already running"
    };
    let line = format!(
        "session {} {state}: {}",
        plan.name,
        opened.session.command.join(" ")
    );
    Ok((line, opened))
}

/// `AIRLOCK_TRACE_PHASES`: `airlock: phase <name> <ms>` lines on stderr, for scripts/bench.
fn print_phase(name: &str, took: Duration) {
    eprintln!("airlock: phase {name} {:.3}", took.as_secs_f64() * 1000.0);
}

/// Progress on stderr (PRODUCT O3): one line per phase, or one live line on a terminal that
/// is cleared when `up` is done. Also the debug-build test hooks (see the module docs), and
/// the time each lifecycle phase took (`AIRLOCK_TRACE_PHASES`).
struct Progress {
    live: bool,
    phases: Phases,
    current: Option<String>,
}

impl Progress {
    fn new(phases: Phases) -> Progress {
        use std::io::IsTerminal;
        Progress {
            live: std::io::stderr().is_terminal(),
            phases,
            current: None,
        }
    }

    /// Ends the live line and the last phase's timing; the timings go on.
    fn finish(mut self) -> Phases {
        if let Some(last) = self.current.take() {
            self.phases.done(&last);
        }
        std::mem::replace(&mut self.phases, Phases::new(None))
    }

    fn describe(phase: &str) -> &str {
        match phase {
            "lock" => "waiting for the sandbox lock",
            "cleanup" => "cleaning up stale state",
            "prepare" => "preparing the sandbox's directories",
            "start" => "starting the sandbox",
            "wait" => "waiting for the sandbox to be ready",
            "record" => "recording the ready sandbox",
            "rollback" => "rolling back what was created",
            "provision:base" => "provisioning: base setup",
            "provision:packages" => "provisioning: packages",
            "provision:user-script" => "provisioning: the user's provision.sh",
            "provision:project-script" => "provisioning: the project's .airlock/provision.sh",
            other => other,
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.live {
            eprint!("\r\x1b[K");
        }
    }
}

impl Observer for Progress {
    fn phase(&mut self, phase: &str) {
        let last = self.current.replace(phase.to_owned());
        self.phases.done(last.as_deref().unwrap_or("setup"));
        #[cfg(debug_assertions)]
        if std::env::var(airlock_config::env_vars::AIRLOCK_TEST_CRASH_AT).is_ok_and(|p| p == phase)
        {
            std::process::abort();
        }
        if self.live && phase.starts_with("provision:") {
            // A step streams its own lines: its phase line stays, above them.
            eprintln!("\r\x1b[Kairlock up: {}", Self::describe(phase));
        } else if self.live {
            eprint!("\r\x1b[Kairlock up: {}…", Self::describe(phase));
        } else {
            eprintln!("airlock up: {}", Self::describe(phase));
        }
        #[cfg(debug_assertions)]
        if std::env::var(airlock_config::env_vars::AIRLOCK_TEST_PAUSE_AT).is_ok_and(|p| p == phase)
        {
            std::thread::sleep(Duration::from_secs(3));
        }
    }
}
