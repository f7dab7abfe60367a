//! What `push` and `pull` share: running the transfer with live progress and Ctrl+C
//! (`airlock_term::transfer`), and the summary they print.
//!
//! Ctrl+C shuts the transfer stream down: the side that was writing removes its staged copy,
//! so nothing is published, and the verb exits 130 saying so.

use std::time::{Duration, Instant};

use airlock_files::{Outcome, TransferError, Wire};
use airlock_protocol::TransferSummary;
use airlock_term::transfer::{Interrupt, TransferProgress};

use crate::commands::Report;
use crate::error::{untrusted, HostError};
use crate::output::{Doc, Style};

/// Runs `transfer` on `wire` for `verb` (`push`, `pull`); the outcome and how long it took.
pub fn run(
    verb: &'static str,
    mut wire: Wire,
    transfer: impl FnOnce(&mut Wire, &TransferProgress) -> Result<Outcome, TransferError>,
) -> Result<(Outcome, Duration), HostError> {
    let interrupt = Interrupt::watch(wire.stream());
    let progress = TransferProgress::new(verb);
    let started = Instant::now();
    let result = transfer(&mut wire, &progress);
    progress.finish();
    match result {
        Ok(outcome) => Ok((outcome, started.elapsed())),
        Err(_) if interrupt.interrupted() => Err(airlock_host::files::interrupted(verb)),
        Err(e) => Err(untrusted(airlock_host::files::transfer_error(e, verb))),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The report of a finished transfer: `done` (`pushed`, `pulled`) with the counts, from, to.
pub fn report(
    done: &str,
    from: &str,
    to: &str,
    summary: &TransferSummary,
    took: Duration,
) -> Report {
    let seconds = took.as_secs_f64();
    let mut doc = Doc::new();
    let counts = format!(
        "{}, {}, {} ({}) in {:.2} s",
        plural(summary.files, "file", "files"),
        plural(summary.dirs, "directory", "directories"),
        plural(summary.symlinks, "link", "links"),
        airlock_host::lifecycle::human_bytes(summary.bytes),
        seconds
    );
    doc.text(
        0,
        &[
            (Style::Good, done),
            (Style::Plain, " "),
            (Style::Plain, &counts),
        ],
    );
    doc.field(1, "from", from);
    doc.field(1, "to", to);
    let json = serde_json::json!({
        "from": from,
        "to": to,
        "files": summary.files,
        "dirs": summary.dirs,
        "symlinks": summary.symlinks,
        "bytes": summary.bytes,
        "skipped": summary.skipped,
        "seconds": seconds,
    });
    let mut report = Report::new(doc, json);
    if summary.skipped > 0 {
        report.note(format!(
            "skipped {} (device nodes, FIFOs and sockets are never copied)",
            plural(summary.skipped, "special file", "special files")
        ));
    }
    report
}
