//! `airlock run [-i] [-t] [-w DIR] [-e K=V]… [--root] [--memory-mb N] -- CMD…`: an ephemeral
//! sandbox for the active project (PRODUCT §2, I1–I9, O5).
//!
//! Order of operations:
//! 1. Validate the whole command line (`-e`, `-w`, `-t` needs a terminal) and the configuration
//!    (project discovery C4, strict load) before any side effect: exit 2 on any problem.
//! 2. Build the `SandboxSpec` (`airlock_host::run::build_spec`) and attach its egress.
//! 3. Start the sandbox with its proxy and limits (`airlock_host::run::EphemeralRun`).
//! 4. Exec CMD through the control channel (authenticated stream), stdin streamed with `-i`,
//!    a PTY with `-t`; SIGINT/SIGTERM/SIGHUP/SIGQUIT are forwarded to CMD's process group, a
//!    second one kills it (`airlock_term::stream`). They are taken from step 3 on: one that comes
//!    while the sandbox starts means CMD is not run (exit 128+N after the usual teardown); a
//!    second one then ends airlock at once (exit 130; the sandbox dies with it).
//! 5. Destroy the sandbox and its cgroup, then exit with CMD's status (128+N for signal N).

use std::time::Duration;

use airlock_host::config::load_effective;
use airlock_host::run::{build_spec, refuse_clone_mode, resolve_workdir, EphemeralRun, Phases};
use airlock_host::vm::run::VmRun;
use airlock_protocol::{ExecRequest, Key};
use airlock_term::stream::run_stream;
use clap::Args;

use super::Report;
use crate::command_options::CommandOptions;
use crate::context::{active_project, Context};
use crate::error::{untrusted, HostError};

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub cmd: CommandOptions,
    /// Memory limit in MiB for this run only (minimum 256); no file is rewritten
    #[arg(long, value_name = "N")]
    pub memory_mb: Option<u64>,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs the command; on success this function does not return (the process exits with CMD's
/// status, which the report/exit-code path of the CLI cannot carry).
pub fn run(args: RunArgs, ctx: &Context) -> Result<Report, HostError> {
    let traced = ctx
        .var(airlock_config::env_vars::AIRLOCK_TRACE_PHASES)
        .is_some();
    let mut phases = Phases::new(traced.then_some(print_phase as fn(&str, Duration)));
    // 1. Everything is validated before the first side effect.
    let env = args.cmd.validate(ctx)?;
    let roots = ctx.roots()?;
    let project = active_project(ctx)?;
    let mut notes = Vec::new();
    let effective = load_effective(&roots, Some(project.clone()), args.memory_mb, &mut notes)?;
    for n in &notes {
        eprintln!("{n}");
    }
    refuse_clone_mode(&effective)?;
    let mut spec = build_spec(&effective, args.cmd.root)?;
    airlock_host::egress::attach(&mut spec, &effective.network, &roots.data)?;
    let cwd = resolve_workdir(args.cmd.workdir.as_deref(), &ctx.cwd, &spec)?;
    let request = args.cmd.request(&args.command, env, &cwd)?;
    let vm = airlock_host::vm::selected(ctx.backend.as_deref(), &effective, &spec, &roots)?;

    phases.done("validate");
    // From here on a Ctrl+C (or TERM/HUP/QUIT) is CMD's: held until CMD exists, then forwarded;
    // a second one while the sandbox still starts ends airlock at once.
    airlock_term::stream::catch_signals();
    // Test hook: a test presses Ctrl+C before the sandbox starts.
    super::pause_hook("start");
    airlock_host::project::remember_project(&roots, &project)?;
    // P2, P4: the package cache, `[[tool]]` and `[env]`, as for `up` (not provisioning).
    let cache = airlock_host::provision::prepare_cache(&roots, &effective)?;
    airlock_host::provision::attach_host_environment(&mut spec, &effective, &cache);

    // 3.–5.
    let project_root = effective.project.as_ref().map(|p| p.root.clone());
    if let Some(settings) = vm {
        let vm = VmRun::start(
            &roots,
            project_root,
            &mut spec,
            &settings,
            &mut phases,
            print_warning,
        )?;
        let outcome = vm.open_stream().and_then(|stream| {
            let key = Key::from_bytes(vm.key());
            run_stream(stream, &key, &request, args.cmd.interactive)
                .map_err(|e| untrusted(e.into()))
        });
        phases.done("guest+exec");
        let oom = vm.out_of_memory();
        if vm.finish(&mut phases) {
            print_warning("QEMU did not stop within 5 s and was killed");
        }
        if let Some(oom) = oom {
            eprintln!("airlock: {oom}");
        }
        std::process::exit(match (outcome, oom) {
            (Ok(status), _) => status,
            (Err(_), Some(_)) => 137,
            (Err(e), None) => return Err(e),
        })
    }
    let mut sandbox =
        EphemeralRun::start(&roots, project_root, &mut spec, &mut phases, print_warning)?;
    let outcome = exec_in(&mut sandbox, &request, args.cmd.interactive);
    phases.done("guest+exec");
    // Read before the cgroup goes: an OOM kill explains a lost stream (PID 1 killed) and a
    // command that died of SIGKILL (9.10).
    let oom = sandbox.out_of_memory();
    let destroyed = sandbox.finish(&mut phases);
    if let Some(oom) = oom {
        eprintln!("airlock: {oom}");
    }
    let status = match (outcome, oom) {
        (Ok(status), _) => status,
        (Err(_), Some(_)) => 137,
        (Err(e), None) => return Err(e),
    };
    if let Err(e) = destroyed {
        eprintln!("airlock: warning: {e}");
    }
    std::process::exit(status)
}

/// Streams CMD through the sandbox's control channel (the proxy starts on the first request).
fn exec_in(
    sandbox: &mut EphemeralRun,
    request: &ExecRequest,
    interactive: bool,
) -> Result<i32, HostError> {
    let stream = sandbox.open_stream()?;
    let key = Key::from_bytes(*sandbox.sandbox().key());
    run_stream(stream, &key, request, interactive).map_err(|e| untrusted(e.into()))
}

/// A warning of the host side (limits skipped, a cgroup left behind), on stderr.
fn print_warning(message: &str) {
    eprintln!("airlock: warning: {message}");
}

/// `AIRLOCK_TRACE_PHASES`: `airlock: phase <name> <ms>` lines on stderr, for scripts/bench.
fn print_phase(name: &str, took: Duration) {
    eprintln!("airlock: phase {name} {:.3}", took.as_secs_f64() * 1000.0);
}
