//! `airlock secret set|ls|rm` (PRODUCT §2, N5, N8, C6).
//!
//! Secrets are user-level: one store under airlock's data root (`<data>/secrets/`, see
//! `airlock_secrets::store`), shared by every project; a project config can never name one.
//!
//! `set NAME --host H[,H…] [--header TEMPLATE] [--header-name NAME…]`, in order: check the
//! name, hosts, template and header names
//! (a usage error exits 2 before anything is read or created); read the value from stdin
//! (`airlock_term::secret_input::read_value`: echo off on a terminal, restored on every exit path; one trailing
//! newline stripped; never from argv — there is no option for it); open the store (creating
//! it) and store the value; the store refuses an empty value or one with CR, LF or NUL. Nothing
//! airlock prints or returns contains the value: only the name, hosts, header name and
//! placeholder.
//!
//! `ls` reads the store without creating it. `rm` of a secret that does not exist fails with
//! exit 1 and a hint (like `git config --unset` of a missing key), so a typo never looks like
//! a removal.

use airlock_config::policy::HostPattern;
use airlock_config::Roots;
use airlock_secrets::{
    parse_header_name, HeaderTemplate, SecretError, SecretInfo, SecretName, SecretStore,
};
use clap::{Args, Subcommand};

use super::Report;
use crate::context::Context;
use crate::error::{ErrorKind, HostError};
use crate::output::{Doc, Style};

#[derive(Args, Debug)]
pub struct SecretArgs {
    #[command(subcommand)]
    pub command: SecretCommand,
}

#[derive(Subcommand, Debug)]
pub enum SecretCommand {
    /// Store a secret bound to hosts; the value is read from stdin (hidden on a terminal)
    Set(SetArgs),
    /// List secrets: names, hosts, header names and placeholders, never values
    Ls(LsArgs),
    /// Remove a secret
    Rm(RmArgs),
}

#[derive(Args, Debug)]
pub struct SetArgs {
    /// The name, also the environment variable that holds the placeholder in the sandbox
    /// (A-Z, 0-9, _)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Host patterns the value may be sent to (comma-separated or repeated)
    #[arg(
        long = "host",
        value_name = "HOST",
        value_delimiter = ',',
        required = true
    )]
    pub hosts: Vec<String>,
    /// A header the proxy adds for those hosts, e.g. 'Authorization: Bearer {value}'
    #[arg(long, value_name = "TEMPLATE")]
    pub header: Option<String>,
    /// Another header the placeholder may be replaced in, e.g. x-api-key (comma-separated or
    /// repeated; Authorization and Proxy-Authorization always may)
    #[arg(long = "header-name", value_name = "NAME", value_delimiter = ',')]
    pub header_names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LsArgs {}

#[derive(Args, Debug)]
pub struct RmArgs {
    /// The secret to remove
    #[arg(value_name = "NAME")]
    pub name: String,
}

pub fn run(args: SecretArgs, ctx: &Context) -> Result<Report, HostError> {
    match args.command {
        SecretCommand::Set(a) => set(a, ctx),
        SecretCommand::Ls(_) => ls(ctx),
        SecretCommand::Rm(a) => rm(a, ctx),
    }
}

fn set(args: SetArgs, ctx: &Context) -> Result<Report, HostError> {
    let name = SecretName::parse(&args.name).map_err(SecretError::from)?;
    let hosts = args
        .hosts
        .iter()
        .map(|h| {
            HostPattern::parse(h).map_err(|e| {
                HostError::new(ErrorKind::Usage, "secret.bad_host", e.to_string())
                    .with_hint("give host patterns like `api.example.com` or `**.example.com`")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(t) = &args.header {
        HeaderTemplate::parse(t).map_err(SecretError::from)?;
    }
    for h in &args.header_names {
        parse_header_name(h).map_err(SecretError::from)?;
    }
    let roots = ctx.roots()?;
    // The value is checked (not empty, not too long, UTF-8) before the store is created.
    let secret = airlock_term::secret_input::read_value(name.as_str(), ctx.stdin_is_terminal)
        .map_err(crate::lib_errors::secret_input_error)?;
    let store = SecretStore::open(&roots.data)?;
    // Only decides the wording; a corrupt record elsewhere must not block this one.
    let replaced = store
        .list()
        .is_ok_and(|all| all.iter().any(|s| s.name == name.as_str()));
    let carriers: Vec<&str> = args.header_names.iter().map(String::as_str).collect();
    let template = args.header.as_deref();
    let info = store.set_with_headers(name.as_str(), &hosts, template, &carriers, secret)?;
    let mut doc = Doc::new();
    doc.heading(if replaced {
        "Secret replaced"
    } else {
        "Secret stored"
    });
    info_fields(&mut doc, &info);
    doc.text(
        1,
        &[(
            Style::Dim,
            &format!(
                "in the sandbox ${} holds the placeholder; the proxy puts the value in requests to these hosts only",
                info.name
            ),
        )],
    );
    let mut report = Report::new(
        doc,
        serde_json::json!({ "secret": info, "replaced": replaced }),
    );
    let denied = airlock_host::egress::check::denied_secret_hosts(&roots, &ctx.cwd, &hosts);
    report.notes.extend(denied);
    finish(&mut report, &roots);
    Ok(report)
}

fn ls(ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let secrets = if store_exists(&roots) {
        SecretStore::open(&roots.data)?.list()?
    } else {
        Vec::new()
    };
    let mut doc = Doc::new();
    doc.heading("Secrets");
    if secrets.is_empty() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "none; `airlock secret set NAME --host HOST` stores one",
            )],
        );
    }
    for s in &secrets {
        doc.text(1, &[(Style::Plain, &s.name)]);
        info_fields_at(&mut doc, s, 2);
    }
    Ok(Report::new(doc, serde_json::json!({ "secrets": secrets })))
}

fn rm(args: RmArgs, ctx: &Context) -> Result<Report, HostError> {
    let name = SecretName::parse(&args.name).map_err(SecretError::from)?;
    let roots = ctx.roots()?;
    if !store_exists(&roots) {
        return Err(SecretError::NotFound {
            name: name.to_string(),
        }
        .into());
    }
    SecretStore::open(&roots.data)?.remove(name.as_str())?;
    let mut doc = Doc::new();
    doc.heading("Secret removed")
        .field(1, "name", name.as_str());
    let mut report = Report::new(doc, serde_json::json!({ "removed": name.as_str() }));
    finish(&mut report, &roots);
    Ok(report)
}

/// Whether the store directory exists (so listing never creates it).
fn store_exists(roots: &Roots) -> bool {
    std::fs::symlink_metadata(roots.secrets_dir()).is_ok()
}

/// Adds what running sandboxes see of the change (see `policy`'s module docs).
fn finish(report: &mut Report, roots: &Roots) {
    crate::live::apply_live(roots, "secrets", true, report);
}

fn info_fields(doc: &mut Doc, info: &SecretInfo) {
    doc.field(1, "name", &info.name);
    info_fields_at(doc, info, 1);
}

fn info_fields_at(doc: &mut Doc, info: &SecretInfo, indent: usize) {
    doc.field(indent, "hosts", &info.hosts.join(", "));
    doc.field(indent, "header", info.header.as_deref().unwrap_or("-"));
    doc.field(indent, "sent in", &info.headers.join(", "));
    doc.field(indent, "placeholder", &info.placeholder);
}
