//! `airlock attach [SESSION] [--name NAME]` (PRODUCT S2, L4): attaches this terminal to a
//! session of the ready sandbox, creating the default session (`main`) when it is absent or
//! has exited. Never re-provisions and never starts a sandbox.
//!
//! Order of operations: validate the session name and that stdin and stdout are a terminal
//! (L4: before any side effect) → resolve the sandbox, load the configuration (detach key,
//! layout) → prove the sandbox `ready` → open a stream to its PID 1 → attach (`airlock_term::attach`).

use airlock_host::config::load_effective;
use airlock_host::sessions;
use airlock_host::sessions::{open_stream, ready_record};
use airlock_protocol::session::validate_name;
use airlock_protocol::DEFAULT_SESSION;
use airlock_term::attach::{attach_terminal, AttachPlan};
use airlock_term::terminal::term;
use clap::Args;

use super::Report;
use crate::context::{resolve_name, setup, Context};
use crate::error::HostError;
use crate::lib_errors::attach_error;
use crate::output::{escape_untrusted, Doc};

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// The session (default: main, created when absent)
    #[arg(value_name = "SESSION")]
    pub session: Option<String>,
    /// The sandbox to use instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
}

pub fn run(args: AttachArgs, ctx: &Context) -> Result<Report, HostError> {
    let session = args.session.as_deref().unwrap_or(DEFAULT_SESSION);
    validate_name(session).map_err(|e| {
        HostError::usage(e.to_string()).with_hint("`airlock sessions` lists the sessions")
    })?;
    if !(ctx.stdin_is_terminal && ctx.stdout_is_terminal) {
        return Err(HostError::usage(
            "`attach` needs a terminal on stdin and stdout",
        )
        .with_hint(
            "run it from a terminal; `airlock up --no-attach` makes sure the sandbox and its default session exist without one",
        ));
    }
    let (name, project) = resolve_name(ctx, args.name.as_deref())?;
    let roots = ctx.roots()?;
    let mut notes = Vec::new();
    let effective = load_effective(&roots, project, None, &mut notes)?;
    airlock_host::sessions::detach_key(&effective)?;
    let host = setup(ctx, false)?;
    let record = ready_record(&host, &name)?;
    let plan = AttachPlan::new(
        session,
        sessions::create_spec(&effective, &record, &roots.data, session, term()),
        sessions::detach_key(&effective)?,
        args.name.as_deref(),
    );
    for note in &notes {
        eprintln!("{}", escape_untrusted(note));
    }
    let (stream, key) = open_stream(&host, &record)?;
    let status = attach_terminal(stream, &key, &plan).map_err(|e| attach_error(e, &plan.name))?;
    let mut report = Report::new(Doc::new(), serde_json::Value::Null);
    report.status = Some(u8::try_from(status).unwrap_or(u8::MAX));
    Ok(report)
}
