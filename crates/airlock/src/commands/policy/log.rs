//! `airlock policy log [--follow] [--json]`: the audit log of the project's sandbox (N7).
//!
//! Where the log is: `<sandbox state dir>/audit.jsonl` (`airlock_host::paths::audit_log_path`),
//! the state directory being the one recorded in the sandbox's lifecycle record (the keeper
//! opens the proxy's `AuditLog` there). No record, or no file yet: the command says so and exits 0.
//!
//! The log is rotated by size (`audit.jsonl.1` … are older); both forms read the rotated files
//! and the current one in order. A line with `repeated: N` stands for N identical denials.
//!
//! Every field of an entry came through the sandbox (host names, methods, rule texts quoting
//! them), so human output escapes control characters (O1). `--json` prints one document
//! `{"sandbox","log","entries"}`; with `--follow` it prints one compact JSON entry per line
//! (a stream cannot be one document). `--follow` prints what is there, then polls for new
//! lines until Ctrl+C (which ends the process: nothing needs restoring) or until stdout closes.

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use airlock_core::names::SandboxName;
use airlock_host::paths::recorded_audit_log;
use airlock_proxy::audit::{AuditEntry, AuditFollower, Verdict};
use clap::Args;

use super::super::Report;
use crate::context::{resolve_name, Context};
use crate::error::HostError;
use crate::output::{escape_untrusted, path_text, Doc, Style};

/// How often `--follow` looks for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Args, Debug)]
pub struct LogArgs {
    /// Keep printing new entries until Ctrl+C
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// The sandbox (default: the active project's)
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
}

pub fn run(args: LogArgs, ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let Some(path) = recorded_audit_log(&roots, &name)? else {
        return Ok(nothing(
            &name,
            None,
            "this sandbox has not been created, so there is no audit log",
        ));
    };
    if args.follow {
        return follow(&path, ctx.json);
    }
    let entries = airlock_proxy::read_entries(&path)?;
    if entries.is_empty() {
        return Ok(nothing(
            &name,
            Some(&path),
            "no request has been logged yet",
        ));
    }
    let mut doc = Doc::new();
    for e in &entries {
        doc.text(0, &[(style(e), &entry_line(e))]);
    }
    let json = serde_json::json!({ "sandbox": name, "log": path, "entries": entries });
    Ok(Report::new(doc, json))
}

fn nothing(name: &SandboxName, path: Option<&Path>, why: &str) -> Report {
    let mut doc = Doc::new();
    doc.text(0, &[(Style::Dim, why)]);
    if let Some(p) = path {
        doc.field(1, "log", &path_text(p));
    }
    let json = serde_json::json!({ "sandbox": name, "log": path, "entries": [] });
    Report::new(doc, json)
}

fn style(e: &AuditEntry) -> Style {
    match (e.decision, e.warnings.is_empty()) {
        (Verdict::Deny, _) => Style::Bad,
        (Verdict::Allow, false) => Style::Warn,
        (Verdict::Allow, true) => Style::Plain,
    }
}

/// One entry as one line (not yet escaped; the caller escapes).
fn entry_line(e: &AuditEntry) -> String {
    let decision = match e.decision {
        Verdict::Allow => "allow",
        Verdict::Deny => "deny ",
    };
    let target = if e.host.contains(':') {
        format!("[{}]:{}", e.host, e.port)
    } else {
        format!("{}:{}", e.host, e.port)
    };
    let mut line = format!(
        "{}  {decision}  {} {target}  {}  up {} down {}  {}",
        e.time, e.method, e.status, e.bytes_up, e.bytes_down, e.rule
    );
    if let Some(n) = e.repeated {
        let last = e.last.as_deref().unwrap_or("?");
        line.push_str(&format!("  x{n} (same denial until {last})"));
    }
    if !e.secrets.is_empty() {
        line.push_str(&format!("  secrets: {}", e.secrets.join(",")));
    }
    for w in &e.warnings {
        line.push_str(&format!("  warning: {w}"));
    }
    line
}

/// Prints entries as they arrive until Ctrl+C or a closed stdout.
fn follow(path: &Path, json: bool) -> Result<Report, HostError> {
    let mut follower = AuditFollower::from_start(path);
    let mut out = io::stdout();
    loop {
        for e in follower.poll()? {
            let line = if json {
                serde_json::to_string(&e).map_err(|err| {
                    HostError::internal("output.encode", format!("cannot encode: {err}"))
                })?
            } else {
                escape_untrusted(&entry_line(&e)).into_owned()
            };
            match writeln!(out, "{line}").and_then(|()| out.flush()) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {
                    return Ok(Report::new(Doc::new(), serde_json::Value::Null));
                }
                Err(err) => {
                    return Err(HostError::internal(
                        "output.write",
                        format!("cannot write the output: {err}"),
                    ))
                }
            }
        }
        std::thread::sleep(FOLLOW_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_proxy::audit::Mode;

    #[test]
    fn a_hostile_host_cannot_drive_the_terminal_through_the_log() {
        let e = AuditEntry {
            time: "2026-01-01T00:00:00.000Z".into(),
            method: "GET".into(),
            host: "evil\u{1b}]0;pwned\u{7}.example".into(),
            port: 80,
            decision: Verdict::Deny,
            rule: "no rule allows it (preset dev)".into(),
            status: 403,
            bytes_up: 0,
            bytes_down: 0,
            mode: Mode::Http,
            secrets: vec![],
            warnings: vec!["x\u{9b}2J".into()],
            repeated: Some(3),
            last: Some("2026-01-01T00:00:09.000Z".into()),
        };
        let mut doc = Doc::new();
        doc.text(0, &[(style(&e), &entry_line(&e))]);
        let shown = doc.render(false);
        assert!(!shown.trim_end().chars().any(char::is_control), "{shown:?}");
        assert!(
            shown.contains("evil\\x1b]0;pwned\\x07.example:80"),
            "{shown}"
        );
        let streamed = escape_untrusted(&entry_line(&e)).into_owned();
        assert!(!streamed.chars().any(char::is_control), "{streamed:?}");
    }
}
