//! `airlock sessions [--name NAME] [--json]` lists the sessions of the ready sandbox: name,
//! state (running / exited N / killed by signal N), attached clients, start time, command.
//! `airlock sessions kill SESSION` hangs a session up (SIGKILL if it lingers) and removes it,
//! also an exited one (PRODUCT S1, §2).

use airlock_host::sessions::{kill, list, ready_record};
use airlock_protocol::session::validate_name;
use clap::{Args, Subcommand};

use super::Report;
use crate::context::{resolve_name, setup, Context};
use crate::error::HostError;
use crate::output::{Doc, Style};
use crate::session_view;

#[derive(Args, Debug)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub action: Option<SessionsAction>,
    /// The sandbox to use instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true, global = true)]
    pub name: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum SessionsAction {
    /// End a session's processes and remove it (also an exited one)
    Kill {
        /// The session
        #[arg(value_name = "SESSION")]
        session: String,
    },
}

pub fn run(args: SessionsArgs, ctx: &Context) -> Result<Report, HostError> {
    if let Some(SessionsAction::Kill { session }) = &args.action {
        validate_name(session).map_err(|e| {
            HostError::usage(e.to_string()).with_hint("`airlock sessions` lists the sessions")
        })?;
    }
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let host = setup(ctx, false)?;
    let record = ready_record(&host, &name)?;
    let mut doc = Doc::new();
    match args.action {
        None => {
            let sessions = list(&host, &record)?;
            if sessions.is_empty() {
                doc.text(0, &[(Style::Dim, "no sessions")]);
            }
            for info in &sessions {
                doc.text(0, &[(Style::Plain, &session_view::line(info))]);
            }
            let items: Vec<_> = sessions.iter().map(session_view::json).collect();
            Ok(Report::new(
                doc,
                serde_json::json!({ "sandbox": name.as_str(), "sessions": items }),
            ))
        }
        Some(SessionsAction::Kill { session }) => {
            let info = kill(&host, &record, &session)?;
            let line = format!("removed session {session} ({})", info.state.describe());
            doc.text(0, &[(Style::Plain, &line)]);
            Ok(Report::new(
                doc,
                serde_json::json!({ "sandbox": name.as_str(), "removed": session_view::json(&info) }),
            ))
        }
    }
}
