//! `airlock policy check HOST[:PORT]`: the decision the proxy would make by rule, and the rule.
//!
//! Exit 0 when allowed, 1 when denied (a result, not an error: the document is printed either
//! way). The port defaults to 443. Besides the rules, the one address check that needs no
//! resolution is applied too: an IP-literal destination is allowed only by a rule naming that
//! exact address (N3; decided by `airlock_host::egress::check`). Whether a *name* resolves to an internal address is only known when the
//! proxy resolves it at request time; the output says so for names.

use std::net::IpAddr;

use airlock_config::policy::parse_target;
use clap::Args;

use super::super::Report;
use crate::context::{discover_project, Context};
use crate::error::{ErrorKind, HostError};
use crate::output::{Doc, Style};
use airlock_host::config::current_network;
use airlock_host::egress::check::verdict;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Destination: a host name or IP address, optionally `:PORT` (default 443; IPv6 as `[addr]:PORT`)
    #[arg(value_name = "HOST[:PORT]")]
    pub target: String,
}

pub fn run(args: CheckArgs, ctx: &Context) -> Result<Report, HostError> {
    let (host, port) = parse_target(&args.target).map_err(|e| {
        HostError::new(ErrorKind::Usage, "policy.bad_target", e.to_string())
            .with_hint("give one destination, e.g. `api.example.com` or `api.example.com:8443`")
    })?;
    let roots = ctx.roots()?;
    let project = discover_project(ctx)?;
    let mut notes = Vec::new();
    let policy = current_network(&roots, project, &mut notes)?.policy();
    let v = verdict(&policy, &host, port);
    let target = display_target(&host, port);
    let mut doc = Doc::new();
    let (style, word) = if v.allowed {
        (Style::Good, "allowed")
    } else {
        (Style::Bad, "denied")
    };
    doc.text(0, &[(style, word), (Style::Plain, &format!("  {target}"))]);
    doc.field(1, "decided by", &v.decided_by);
    if let Some(h) = &v.hint {
        doc.field(1, "next", h);
    }
    if v.allowed && host.parse::<IpAddr>().is_err() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "the proxy still refuses it if the name resolves to a private or loopback address",
            )],
        );
    }
    let json = serde_json::json!({
        "target": target,
        "host": host,
        "port": port,
        "allowed": v.allowed,
        "decided_by": v.decided_by,
        "rule": v.decision.rule,
        "preset": v.decision.preset,
        "hint": v.hint,
    });
    let mut report = Report::new(doc, json);
    report.notes = notes;
    if !v.allowed {
        report.status = Some(1);
    }
    Ok(report)
}

fn display_target(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
