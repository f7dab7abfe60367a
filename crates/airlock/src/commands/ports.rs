//! `airlock ports [--publish HOST:GUEST]… [--unpublish HOST]… [--name NAME]`: forward host
//! loopback ports into the ready sandbox, and list the forwards.
//!
//! Order of operations: every spec is checked while the command line is read (exit 2) → the
//! sandbox must be ready → unpublish requests, then publish requests, are sent one by one to
//! the sandbox's keeper, which owns the listeners (bound to `127.0.0.1` only; a port in use is
//! an error, exit 1; earlier requests of the same command stay applied) → the table is listed.

use airlock_host::lifecycle::backend::SOCKET;
use airlock_host::lifecycle::ports;
use airlock_host::wire::{Forward, PortsRequest};
use clap::Args;

use super::Report;
use crate::context::{resolve_name, setup, Context};
use crate::error::HostError;
use crate::output::{Doc, Style};
use crate::status_json::ports_json;

#[derive(Args, Debug)]
pub struct PortsArgs {
    /// Forward host 127.0.0.1:HOST to sandbox port GUEST (HOST 0: any free port); repeatable
    #[arg(long, value_name = "HOST:GUEST", value_parser = parse_publish)]
    pub publish: Vec<(u16, u16)>,
    /// Stop forwarding host port HOST; repeatable
    #[arg(long, value_name = "HOST", value_parser = clap::value_parser!(u16).range(1..))]
    pub unpublish: Vec<u16>,
    /// The sandbox to use instead of the project's
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    pub name: Option<String>,
}

/// `HOST:GUEST`, host 0–65535 (0: any free port), guest 1–65535.
fn parse_publish(text: &str) -> Result<(u16, u16), String> {
    let (host, guest) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not HOST:GUEST (e.g. 8080:3000)"))?;
    let port = |s: &str, what: &str| {
        s.parse::<u16>()
            .map_err(|_| format!("{what} port {s:?} is not a number from 0 to 65535"))
    };
    let (host, guest) = (port(host, "host")?, port(guest, "sandbox")?);
    if guest == 0 {
        return Err("the sandbox port must be from 1 to 65535".into());
    }
    Ok((host, guest))
}

pub fn run(args: PortsArgs, ctx: &Context) -> Result<Report, HostError> {
    let (name, _) = resolve_name(ctx, args.name.as_deref())?;
    let host = setup(ctx, false)?;
    let record = airlock_host::files::ready(&host, &name, airlock_host::files::Verb::Ports)?;
    let socket = record.paths.runtime_dir.join(SOCKET);
    let mut forwards = ports::request(&socket, &PortsRequest::List)?;
    for port in &args.unpublish {
        forwards = ports::request(&socket, &PortsRequest::Unpublish { host: *port })?;
    }
    for (host_port, guest) in &args.publish {
        forwards = ports::request(
            &socket,
            &PortsRequest::Publish {
                host: *host_port,
                guest: *guest,
            },
        )?;
    }
    Ok(Report::new(
        render(name.as_str(), &forwards),
        serde_json::json!({ "sandbox": name.as_str(), "ports": ports_json(&forwards) }),
    ))
}

fn render(name: &str, forwards: &[Forward]) -> Doc {
    let mut doc = Doc::new();
    doc.heading(&format!("Ports of sandbox {name}"));
    if forwards.is_empty() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "none published (airlock ports --publish HOST:GUEST)",
            )],
        );
    }
    for f in forwards {
        doc.text(
            1,
            &[(
                Style::Plain,
                &format!("127.0.0.1:{} -> sandbox port {}", f.host, f.guest),
            )],
        );
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::parse_publish;

    #[test]
    fn publish_specs_are_checked_while_the_command_line_is_read() {
        assert_eq!(parse_publish("8080:3000"), Ok((8080, 3000)));
        assert_eq!(parse_publish("0:3000"), Ok((0, 3000)));
        for bad in [
            "8080", "8080:", ":3000", "8080:0", "70000:1", "a:b", "1:2:3",
        ] {
            assert!(parse_publish(bad).is_err(), "{bad}");
        }
    }
}
