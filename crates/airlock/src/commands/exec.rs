//! `airlock exec [-i] [-t] [-d] [-w DIR] [-e K=V]… [--root] [--name NAME] -- CMD…`: one command
//! in the ready sandbox (PRODUCT §2, O5).
//!
//! Order of operations: validate the command line (`-e`, `-t` needs a terminal, `-d` excludes
//! `-i`/`-t`) → find the sandbox and prove it `ready` (else exit 1 with the next action) →
//! connect to its keeper's socket → resolve `-w` against the sandbox's mappings (a bad one
//! drops the connection unused: nothing was sent). Attached: the connection is handed to PID 1
//! and authenticated with the epoch key, the request going out with the handshake; stdio is
//! streamed and the guest's status is returned (128+N for signal N). Detached (`-d`): the keeper runs the
//! command and holds its stream; `exec` returns as soon as the guest accepted it and prints the
//! command's process id inside the sandbox (JSON: `{"detached": true, "pid": N}`).
//! Processes a command leaves in the background keep running after `exec` returns.

use airlock_host::lifecycle::exec;
use clap::Args;

use super::Report;
use crate::command_options::CommandOptions;
use crate::context::{resolve_name, setup, Context};
use crate::error::{untrusted, HostError};
use crate::output::{Doc, Style};

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub cmd: CommandOptions,
    /// Start the command detached and return at once
    #[arg(short = 'd', long, conflicts_with_all = ["interactive", "tty"])]
    pub detach: bool,
    /// The sandbox to use instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(args: ExecArgs, ctx: &Context) -> Result<Report, HostError> {
    let env = args.cmd.validate(ctx)?;
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let setup = setup(ctx, false)?;
    if args.detach {
        let (record, start) = exec::ready_for_exec(&setup, &name)?;
        let request = request_for(&args, ctx, env, &start)?;
        let pid = exec::exec_detached(&record, &request).map_err(untrusted)?;
        let mut doc = Doc::new();
        let line = format!("started pid {pid} in sandbox {name} (detached)");
        doc.text(0, &[(Style::Plain, &line)]);
        return Ok(Report::new(
            doc,
            serde_json::json!({ "detached": true, "pid": pid }),
        ));
    }
    let record = airlock_host::lifecycle::ready(&setup, &name, "exec.not_ready")?;
    // Connected right after the proof: the keeper hands the stream to PID 1 and the guest
    // opens the handshake while the request is built here. Nothing is sent before it is.
    let (stream, key) = airlock_host::lifecycle::open_stream(&setup, &record)?;
    let start = exec::start_request(&record)?;
    let request = request_for(&args, ctx, env, &start)?;
    let oom_watch = exec::OomWatch::start(&record);
    let outcome = airlock_term::stream::run_stream(stream, &key, &request, args.cmd.interactive)
        .map_err(|e| untrusted(e.into()));
    // An OOM kill during the command explains a lost stream (9.10): 137, not 70.
    let oom = oom_watch.since(&record);
    if let Some(oom) = &oom {
        eprintln!("airlock: {oom}");
    }
    let code = match (outcome, oom) {
        (Ok(code), _) => code,
        (Err(_), Some(_)) => 137,
        (Err(e), None) => return Err(e),
    };
    let mut report = Report::new(Doc::new(), serde_json::Value::Null);
    report.status = Some(u8::try_from(code).unwrap_or(u8::MAX));
    Ok(report)
}

/// The request for the command line, in the sandbox `start` describes: `-w` resolved against
/// its mappings, the placeholders of the secrets stored now when it has egress.
fn request_for(
    args: &ExecArgs,
    ctx: &Context,
    mut env: std::collections::BTreeMap<String, String>,
    start: &airlock_host::wire::StartRequest,
) -> Result<airlock_protocol::ExecRequest, HostError> {
    let cwd =
        airlock_host::run::resolve_workdir(args.cmd.workdir.as_deref(), &ctx.cwd, &start.spec)?;
    if start.spec.egress.is_some() {
        airlock_host::egress::add_current_placeholders(&ctx.roots()?.data, &mut env);
    }
    args.cmd.request(&args.command, env, &cwd)
}
