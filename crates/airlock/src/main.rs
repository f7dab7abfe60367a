//! The `airlock` executable.
//!
//! Order of operations:
//! 1. Hidden guest verbs are dispatched on raw argv, before clap (they never show in `--help`).
//! 2. clap parses the public command line; a malformed one exits 2 before any side effect
//!    (PRODUCT L2) — with `--json`, as the JSON error document on stdout.
//! 3. The verb runs and returns a [`commands::Report`] or a [`error::HostError`].
//! 4. The result is printed (stdout), errors go to stderr (or stdout as JSON), and the exit
//!    status comes from [`error::exit_code`]. A closed stdout (broken pipe) ends quietly.
//!
//! The C library calls [`main`] directly, without Rust's runtime start: see its docs.

#![cfg_attr(not(test), no_main)]

mod cli;
mod command_options;
mod commands;
mod context;
mod error;
#[cfg(test)]
mod layout_guards;
mod lib_errors;
mod live;
#[cfg(test)]
mod man_pages;
mod output;
mod session_view;
mod status_json;
mod transfer_view;

use std::ffi::OsString;
use std::io;

use crate::context::Context;
use crate::error::HostError;
use crate::output::Printer;

/// The process's entry point, called by the C library's start code in place of Rust's
/// runtime start (`#![no_main]`). That start's only cost that matters is the stack-overflow
/// message's handler, for which glibc reads and parses all of `/proc/self/maps`
/// (`pthread_getattr_np`) plus ~20 system calls, at every start of this binary: each `run`
/// starts it at least twice (the CLI, the init stage), each `exec` once.
/// [`airlock_linux::sys::start::as_rust_runtime_would`] does the rest of that start (closed
/// standard descriptors opened on `/dev/null`, SIGPIPE ignored); a panic outside a verb still
/// ends with Rust's exit status 101, and [`std::process::exit`] flushes stdout as a return from
/// a Rust `main` does.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    airlock_linux::sys::start::as_rust_runtime_would();
    // Arguments come from std (`args_os`), which glibc hands them to before this call.
    std::process::exit(std::panic::catch_unwind(run).unwrap_or(101))
}

/// C's `pow`, the one function the binary's dependencies (tokio's scheduler statistics,
/// indicatif's rate estimate) took from the C math library, from the `libm` crate (rust-lang's
/// port of musl's) instead. With it defined here, the linker finds no use for `libm.so.6`
/// (`--as-needed`), and no start of the binary loads a third shared object (open, map,
/// relocate, protect) for one function. Should another math function ever be used, the linker
/// takes `libm.so.6` again: correct, only slower to start.
#[no_mangle]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// Everything [`main`] does after the start: returns the exit status.
#[cfg_attr(test, allow(dead_code))]
fn run() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(status) = airlock_host::hidden::dispatch(&args) {
        return exit_status(status);
    }
    // Each standard stream is asked once whether it is a terminal (`TCGETS`): the printer's
    // colors and the context's `-t` checks share the answer for stdout.
    let stdout_is_terminal = std::io::IsTerminal::is_terminal(&io::stdout());
    let mut printer = Printer::from_env(cli::wants_json(&args), stdout_is_terminal);
    let cli = match cli::parse(&args) {
        Ok(cli) => cli,
        Err(err) => return exit_status(cli::report_parse_error(&err, &printer)),
    };
    printer.json = cli.json;
    let outcome = Context::from_process(cli.json, cli.backend, stdout_is_terminal)
        .and_then(|ctx| run_guarded(cli.command, &ctx));
    exit_status(print_outcome(&printer, outcome))
}

/// Runs a verb; a panic (a bug) becomes an internal error, exit 70, with the JSON error
/// document under `--json`, instead of Rust's exit 101. The panic message itself is printed on
/// stderr by the default hook.
fn run_guarded(command: commands::Command, ctx: &Context) -> Result<commands::Report, HostError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commands::run(command, ctx)))
        .unwrap_or_else(|_| {
            Err(HostError::internal(
                "internal.panic",
                "airlock hit an internal error (a bug); nothing after that point was done",
            )
            .with_hint("please report it with the message printed above"))
        })
}

/// Prints what the verb produced and returns the exit status.
fn print_outcome(printer: &Printer, outcome: Result<commands::Report, HostError>) -> i32 {
    let (printed, status) = match outcome {
        Ok(mut report) => {
            for note in &report.notes {
                printer.note(note);
            }
            let status = match &report.failure {
                Some(failure) => error::exit_code(failure.kind),
                None => report.status.map_or(0, i32::from),
            };
            let printed = match report.failure.take() {
                None => printer.result(&report.doc, &report.json),
                Some(failure) if printer.json => {
                    printer.result(&report.doc, &json_with_failure(report.json, &failure))
                }
                Some(failure) => printer
                    .result(&report.doc, &report.json)
                    .and_then(|()| printer.error_to_stderr(&failure)),
            };
            (printed, status)
        }
        Err(err) => (printer.error(&err), error::exit_code(err.kind)),
    };
    match printed {
        Ok(()) => status,
        // The reader went away (`airlock plan | head`): nothing more to say to anyone.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => status,
        Err(e) => {
            let _ = printer.error_to_stderr(&HostError::internal(
                "output.write",
                format!("cannot write the output: {e}"),
            ));
            error::exit_code(error::ErrorKind::Internal)
        }
    }
}

/// The one JSON document of a result that still failed (e.g. `doctor` not ready): the result
/// object with the error added under `"error"`, so scripts find it where every error is.
fn json_with_failure(json: serde_json::Value, failure: &HostError) -> serde_json::Value {
    match json {
        serde_json::Value::Object(mut obj) => {
            obj.insert("error".to_owned(), error::to_json(failure));
            serde_json::Value::Object(obj)
        }
        other => serde_json::json!({ "result": other, "error": error::to_json(failure) }),
    }
}

/// The exit status the process can report: beyond a byte, 255 (the kernel keeps only the low
/// byte, which would turn 256 into success).
fn exit_status(status: i32) -> i32 {
    i32::from(u8::try_from(status).unwrap_or(u8::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn failure() -> HostError {
        HostError::new(
            ErrorKind::BackendUnavailable,
            "backend.unavailable",
            "no userns",
        )
    }

    #[test]
    fn failed_result_keeps_its_fields_and_gains_the_error() {
        let v = json_with_failure(serde_json::json!({"ready": false}), &failure());
        assert_eq!(v["ready"], false);
        assert_eq!(v["error"]["code"], "backend.unavailable");
    }

    #[test]
    fn failed_non_object_result_still_carries_the_error() {
        let v = json_with_failure(serde_json::json!([1, 2]), &failure());
        assert_eq!(v["result"], serde_json::json!([1, 2]));
        assert_eq!(v["error"]["code"], "backend.unavailable");
    }

    #[test]
    fn pow_is_the_c_function() {
        assert_eq!(pow(2.0, 10.0), 1024.0);
        assert_eq!(pow(9.0, 0.5), 3.0);
        assert_eq!(pow(0.0, 0.0), 1.0);
        assert!(pow(-1.0, 0.5).is_nan());
        // indicatif's weight: 0.1 ^ (age / 15 s), here 30 s.
        assert!((pow(0.1, 2.0) - 0.01).abs() < 1e-17);
    }

    #[test]
    fn exit_statuses_beyond_a_byte_saturate_instead_of_wrapping_to_success() {
        assert_eq!(exit_status(256), 255);
        assert_eq!(exit_status(-1), 255);
        assert_eq!(exit_status(130), 130);
    }
}
