//! `airlock exec [-i] [-t] [-d] [-w DIR] [-e K=V]… [--root] [--name NAME] -- CMD…`: one command
//! in the ready sandbox (PRODUCT §2, O5).
//!
//! Order of operations: validate the command line (`-e`, `-t` needs a terminal, `-d` excludes
//! `-i`/`-t`) → find the sandbox and prove it `ready` (else exit 1 with the next action) →
//! resolve `-w` against the sandbox's mappings → connect to its keeper's socket. Attached: the
//! connection is handed to PID 1 and authenticated with the epoch key; stdio is streamed and
//! the guest's status is returned (128+N for signal N). Detached (`-d`): the keeper runs the
//! command and holds its stream; `exec` returns as soon as the guest accepted it and prints the
//! command's process id inside the sandbox (JSON: `{"detached": true, "pid": N}`).
//! Processes a command leaves in the background keep running after `exec` returns.

use std::io::{BufRead, BufReader, Write};

use airlock_core::backend::Backend;
use airlock_core::lifecycle::{self, Health};
use airlock_host::lifecycle::backend::{oom_kills, with_socket_path, SOCKET};
use airlock_host::run::limits::OutOfMemory;
use airlock_host::wire::{KeeperAnswer, StartRequest, MODE_DETACHED, START_FILE};
use airlock_protocol::ExecRequest;
use clap::Args;

use airlock_host::lifecycle::lifecycle_error;

use super::Report;
use crate::command_options::CommandOptions;
use crate::context::{resolve_name, setup, Context};
use crate::error::{CommandError, ErrorKind};
use crate::output::Doc;

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

pub fn run(args: ExecArgs, ctx: &Context) -> Result<Report, CommandError> {
    let env = args.cmd.validate(ctx)?;
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let setup = setup(ctx, false)?;
    let status =
        lifecycle::status(&setup.stores, &setup.backend, &name).map_err(lifecycle_error)?;
    let record = match (status.health, status.record) {
        (Health::Ready, Some(record)) => record,
        (health, _) => {
            return Err(CommandError::new(
                ErrorKind::Failed,
                "exec.not_ready",
                format!("sandbox {name} is {health}, not ready"),
            )
            .with_hint(format!("next: {}", status.next)))
        }
    };
    let start_path = record.paths.state_dir.join(START_FILE);
    let start: StartRequest = std::fs::read(&start_path)
        .ok()
        .and_then(|b| airlock_host::wire::decode(&b).ok())
        .ok_or_else(|| {
            CommandError::internal(
                "exec.state",
                format!(
                    "cannot read the sandbox's start request {}",
                    start_path.display()
                ),
            )
            .with_hint("run `airlock down` and `airlock up` to rebuild the sandbox")
        })?;
    let cwd =
        airlock_host::run::resolve_workdir(args.cmd.workdir.as_deref(), &ctx.cwd, &start.spec)?;
    let mut env = env;
    if start.spec.egress.is_some() {
        airlock_host::egress::add_current_placeholders(&ctx.roots()?.data, &mut env);
    }
    let request = args.cmd.request(&args.command, env, &cwd)?;
    if args.detach {
        let pid = detached(&record.paths.runtime_dir.join(SOCKET), &request)?;
        let mut doc = Doc::new();
        doc.text(
            0,
            &[(
                crate::output::Style::Plain,
                &format!("started pid {pid} in sandbox {name} (detached)"),
            )],
        );
        return Ok(Report::new(
            doc,
            serde_json::json!({ "detached": true, "pid": pid }),
        ));
    }
    let channel = setup
        .backend
        .connect(&record)
        .map_err(|e| CommandError::from(lifecycle_error(e.into())))?;
    let key = airlock_host::lifecycle::key_of(&channel.key)?;
    let oom_before = oom_kills(&record);
    let outcome =
        airlock_term::stream::run_stream(channel.stream, &key, &request, args.cmd.interactive)
            .map_err(CommandError::from);
    // An OOM kill during the command explains a lost stream (9.10): 137, not 70.
    let oom = match (oom_before, oom_kills(&record)) {
        (Some(before), Some(after)) if after > before => Some(OutOfMemory {
            memory_mb: record.plan.memory_mb,
            kills: after - before,
        }),
        (Some(_) | None, Some(_) | None) => None,
    };
    if let Some(oom) = oom {
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

/// Hands the command to the keeper; returns its process id inside the sandbox (the keeper
/// answers `ok PID` once the guest started it, or `error: …`).
fn detached(socket: &std::path::Path, request: &ExecRequest) -> Result<u32, CommandError> {
    let fail = |e: std::io::Error| {
        CommandError::new(
            ErrorKind::Failed,
            "exec.detached",
            format!(
                "cannot reach the sandbox's keeper at {}: {e}",
                socket.display()
            ),
        )
        .with_hint("run `airlock status` to see the sandbox's health")
    };
    let mut conn =
        with_socket_path(socket, |p| std::os::unix::net::UnixStream::connect(p)).map_err(fail)?;
    let mut line = serde_json::to_vec(request).map_err(|e| fail(std::io::Error::other(e)))?;
    line.push(b'\n');
    conn.write_all(&[MODE_DETACHED]).map_err(fail)?;
    conn.write_all(&line).map_err(fail)?;
    let mut reply = String::new();
    BufReader::new(conn).read_line(&mut reply).map_err(fail)?;
    let reply = reply.trim();
    let (code, message, hint) = match serde_json::from_str(reply) {
        Ok(KeeperAnswer::Started { pid }) => return Ok(pid),
        Ok(KeeperAnswer::Error { message }) => (
            "exec.detached",
            format!(
                "the sandbox refused the command: {}",
                crate::output::escape_untrusted(&message)
            ),
            "run it without -d to see its output",
        ),
        Ok(KeeperAnswer::Ok) | Err(_) => (
            "exec.detached_reply",
            format!(
                "the sandbox's keeper gave no answer a detached command gets (reply {:?})",
                crate::output::escape_untrusted(reply)
            ),
            "run `airlock status`; if it names another airlock version: `airlock down`, then \
             `airlock up`",
        ),
    };
    Err(CommandError::new(ErrorKind::Failed, code, message).with_hint(hint))
}
