//! The clap definition of the public command line, and how a malformed one is reported.
//!
//! A parse error is a usage error: exit 2, before any side effect. With `--json` anywhere before
//! `--`, stdout is exactly `{"error":{"code","message","hint"}}` (PRODUCT O2), since the parse
//! failed we find `--json` on raw argv.

use std::ffi::OsString;

use clap::error::ErrorKind as ClapErrorKind;
use clap::{Args, FromArgMatches, Parser};

use crate::commands::version::{self, LONG_VERSION};
use crate::commands::Command;
use crate::error::{exit_code, ErrorKind, HostError};
use crate::output::Printer;

/// Run coding agents and development work in disposable, isolated Linux sandboxes.
#[derive(Parser, Debug)]
#[command(
    name = "airlock",
    version = LONG_VERSION,
    propagate_version = false,
    long_about = LONG_ABOUT
)]
pub struct Cli {
    /// Print the result as one JSON document on stdout (errors too)
    #[arg(long, global = true)]
    pub json: bool,

    /// Backend of the sandboxes `up` and `run` create: linux (namespaces) or vm (a QEMU
    /// microVM with its own kernel); overrides `backend` in the user config
    #[arg(long, global = true, value_name = "NAME", value_parser = ["linux", "vm"])]
    pub backend: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// What `airlock --help` and the man page say about airlock as a whole.
const LONG_ABOUT: &str = "\
Run coding agents and development work in disposable, isolated Linux sandboxes.

The project (the nearest directory holding .airlock/, else the git work tree) is mapped into the \
sandbox read-write at its own path; the rest of your home is invisible. Network traffic leaves \
only through airlock's proxy on the host, which enforces an allowlist and puts secrets into \
requests for the hosts they are bound to: inside, a secret is only ever a placeholder.

Start with `airlock doctor`, then `airlock run -- CMD` for a one-off command or `airlock up` for \
a sandbox that stays. Every command accepts --json and then prints exactly one JSON document.";

/// Parses the command line. `exec` and `run` (the verbs paid per command, B1/B2) are parsed
/// against their own definition under the global options alone: building the whole tree of
/// verbs first, page-faulting every verb's code and allocating its arguments, cost each `exec`
/// about as much as the rest of its start-up. Whatever that reduced parser does not accept
/// outright (an error, `--help`, anything else) goes through the full definition, so errors,
/// help and every other verb read exactly as before.
pub fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    match parse_hot_verb(args) {
        Some(cli) => Ok(cli),
        None => Cli::try_parse_from(args),
    }
}

/// `args` parsed by the reduced definition of its verb, when that verb is a hot one and the
/// reduced parser accepts the command line; `None` otherwise.
fn parse_hot_verb(args: &[OsString]) -> Option<Cli> {
    let sub = match args.get(1)?.to_str()? {
        "exec" => crate::commands::exec::ExecArgs::augment_args(clap::Command::new("exec")),
        "run" => crate::commands::run::RunArgs::augment_args(clap::Command::new("run")),
        _ => return None,
    };
    let matches = hot_root().subcommand(sub).try_get_matches_from(args).ok()?;
    Cli::from_arg_matches(&matches).ok()
}

/// [`Cli`]'s global options without its verbs (the tests keep the two in step).
fn hot_root() -> clap::Command {
    clap::Command::new("airlock")
        .subcommand_required(true)
        .arg(
            clap::Arg::new("json")
                .long("json")
                .global(true)
                .action(clap::ArgAction::SetTrue),
        )
        .arg(
            clap::Arg::new("backend")
                .long("backend")
                .global(true)
                .value_name("NAME")
                .value_parser(["linux", "vm"]),
        )
}

/// Whether raw argv asks for JSON output (`--json` before any `--`).
pub fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Prints a clap error the way the product promises and returns the exit status.
pub fn report_parse_error(err: &clap::Error, printer: &Printer) -> i32 {
    // `--help` and `--version` are results, not errors. Every other clap kind (the enum is
    // `#[non_exhaustive]`, so it cannot be matched exhaustively) is a usage error.
    if matches!(
        err.kind(),
        ClapErrorKind::DisplayHelp | ClapErrorKind::DisplayVersion
    ) {
        if printer.json {
            // Still exactly one JSON document on stdout (O2).
            let doc = match err.kind() {
                ClapErrorKind::DisplayVersion => version::json(),
                _ => serde_json::json!({ "help": err.render().to_string() }),
            };
            let _ = printer.result(&crate::output::Doc::new(), &doc);
        } else {
            let _ = err.print();
        }
        return 0;
    }
    let usage = usage_error(err);
    if printer.json {
        let _ = printer.error(&usage);
    } else {
        // clap's own rendering carries the usage line and suggestions; keep it on stderr.
        let _ = err.print();
    }
    exit_code(ErrorKind::Usage)
}

/// The clap error as a [`HostError`]: its first line as the message, its tip as the hint.
fn usage_error(err: &clap::Error) -> HostError {
    let rendered = err.render().to_string();
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let message = lines
        .next()
        .map(|l| l.strip_prefix("error: ").unwrap_or(l).to_owned())
        .unwrap_or_else(|| "invalid command line".to_owned());
    let hint = lines
        .find_map(|l| l.strip_prefix("tip: "))
        .map(str::to_owned)
        .unwrap_or_else(|| "run `airlock --help` for usage".to_owned());
    HostError::usage(message).with_hint(hint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn argv(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn hot_verbs_parse_exactly_as_the_full_definition_or_fall_back_to_it() {
        let cases: &[&[&str]] = &[
            &["airlock", "exec", "--", "true"],
            &[
                "airlock", "exec", "-i", "-t", "-w", "/x", "-e", "A=B", "-e", "C=", "--", "sh",
                "-c", "echo hi",
            ],
            &[
                "airlock", "exec", "--json", "--name", "box-1", "--root", "--", "id", "-u",
            ],
            &[
                "airlock",
                "exec",
                "-d",
                "--backend",
                "vm",
                "--",
                "sleep",
                "9",
            ],
            &["airlock", "exec", "--", "--json"],
            &[
                "airlock",
                "exec",
                "--env",
                "K=V",
                "--workdir=rel",
                "--",
                "ls",
                "-la",
            ],
            &["airlock", "run", "--", "true"],
            &[
                "airlock", "run", "--memory", "512", "-i", "--json", "--", "cat",
            ],
            &["airlock", "run", "--backend", "linux", "--", "true"],
            // Refused by both (the reduced parser then hands over to the full one).
            &["airlock", "exec", "--backend", "bogus", "--", "true"],
            &["airlock", "exec", "-d", "-i", "--", "x"],
            &["airlock", "exec"],
            &["airlock", "exec", "true"],
            &["airlock", "exec", "--bogus", "--", "true"],
            &["airlock", "exec", "--help"],
            &["airlock", "run", "-h"],
            &["airlock", "exec", "--version"],
        ];
        for case in cases {
            let args = argv(case);
            let full = Cli::try_parse_from(&args);
            match (parse_hot_verb(&args), &full) {
                (Some(hot), Ok(full)) => {
                    assert_eq!(format!("{hot:?}"), format!("{full:?}"), "{case:?}")
                }
                (Some(hot), Err(e)) => panic!("{case:?}: reduced parser gave {hot:?}, full: {e}"),
                (None, Ok(_)) if case[1] == "exec" || case[1] == "run" => {
                    panic!("{case:?}: a hot verb the full definition accepts was not taken")
                }
                (None, _) => {}
            }
            assert_eq!(
                format!("{:?}", parse(&args).map_err(|e| e.kind())),
                format!("{:?}", full.map_err(|e| e.kind())),
                "{case:?}"
            );
        }
    }

    #[test]
    fn hot_root_has_the_global_options_of_the_full_definition() {
        let describe = |cmd: &clap::Command| {
            let mut args: Vec<String> = cmd
                .get_arguments()
                .filter(|a| a.is_global_set())
                .map(|a| format!("{:?} {:?} {:?}", a.get_id(), a.get_long(), a.get_action()))
                .collect();
            args.sort();
            args
        };
        assert_eq!(describe(&hot_root()), describe(&Cli::command()));
    }

    #[test]
    fn json_is_detected_before_the_double_dash_only() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(wants_json(&a(&["airlock", "plan", "--json"])));
        assert!(!wants_json(&a(&["airlock", "run", "--", "--json"])));
        assert!(!wants_json(&a(&["airlock", "plan"])));
    }

    #[test]
    fn unknown_option_becomes_a_usage_error_with_a_hint() {
        let err = Cli::try_parse_from(["airlock", "version", "--bogus"]).unwrap_err();
        let e = usage_error(&err);
        assert_eq!(e.kind, ErrorKind::Usage);
        assert_eq!(e.code, "usage.invalid");
        assert!(e.message.contains("--bogus"), "{}", e.message);
        assert!(e.hint.is_some());
    }
}
