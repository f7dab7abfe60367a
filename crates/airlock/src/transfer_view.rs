//! What `push` and `pull` show: live progress on a terminal, the summary, and Ctrl+C.
//!
//! Progress (PRODUCT O3) appears on stderr, only when stderr is a terminal and only once a
//! transfer has run for a second, as a spinner with bytes, rate and files. Ctrl+C shuts the
//! transfer stream down: the side that was writing removes its staged copy, so nothing is
//! published, and the verb exits 130 saying so.

use std::io::IsTerminal;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_files::Progress;
use airlock_protocol::TransferSummary;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nix::sys::signal::{SigSet, Signal};

use crate::error::{CommandError, ErrorKind};
use crate::output::{Doc, Style};

/// How long a transfer runs before progress appears.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// Live progress for one transfer.
pub struct TransferProgress {
    bar: Option<ProgressBar>,
    started: Instant,
    shown: AtomicBool,
    files: AtomicU64,
}

impl TransferProgress {
    /// Progress drawn on stderr when it is a terminal; silent otherwise.
    pub fn new(verb: &str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            let style = ProgressStyle::with_template(&format!(
                "{{spinner}} {verb}: {{bytes}} ({{binary_bytes_per_sec}}), {{msg}} files"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
            bar.set_style(style);
            bar
        });
        Self {
            bar,
            started: Instant::now(),
            shown: AtomicBool::new(false),
            files: AtomicU64::new(0),
        }
    }

    fn tick(&self) -> Option<&ProgressBar> {
        let bar = self.bar.as_ref()?;
        if !self.shown.load(Ordering::Relaxed) {
            if self.started.elapsed() < QUIET_FOR {
                return None;
            }
            self.shown.store(true, Ordering::Relaxed);
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        Some(bar)
    }

    /// Removes the progress line.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Progress for TransferProgress {
    fn bytes(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
            self.tick();
        }
    }

    fn file(&self) {
        let files = self.files.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(bar) = self.tick() {
            bar.set_message(files.to_string());
        }
    }
}

/// Shuts `stream` down on SIGINT, SIGTERM or SIGHUP; `interrupted()` tells whether it did.
pub struct Interrupt {
    hit: Arc<AtomicBool>,
}

impl Interrupt {
    /// Blocks the terminating signals in this thread (and so in every later one) and starts the
    /// thread that waits for them.
    pub fn watch(stream: &UnixStream) -> Self {
        let hit = Arc::new(AtomicBool::new(false));
        let mut set = SigSet::empty();
        for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            set.add(s);
        }
        if let (Ok(()), Ok(stream)) = (set.thread_block(), stream.try_clone()) {
            let flag = Arc::clone(&hit);
            std::thread::spawn(move || {
                if set.wait().is_ok() {
                    flag.store(true, Ordering::SeqCst);
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
            });
        }
        Self { hit }
    }

    pub fn interrupted(&self) -> bool {
        self.hit.load(Ordering::SeqCst)
    }

    /// The error to end with when the transfer was interrupted (exit 130).
    pub fn error(verb: &str) -> CommandError {
        CommandError::new(
            ErrorKind::Interrupted,
            "files.interrupted",
            format!("{verb} interrupted; nothing was published"),
        )
        .with_hint(format!("run `airlock {verb}` again"))
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The human summary and the JSON document of a finished transfer.
pub fn summary(
    verb: &str,
    from: &str,
    to: &str,
    summary: &TransferSummary,
    elapsed: Duration,
) -> (Doc, serde_json::Value, Option<String>) {
    let seconds = elapsed.as_secs_f64();
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
            (Style::Good, verb),
            (Style::Plain, " "),
            (Style::Plain, &counts),
        ],
    );
    doc.field(1, "from", from);
    doc.field(1, "to", to);
    let note = (summary.skipped > 0).then(|| {
        format!(
            "skipped {} (device nodes, FIFOs and sockets are never copied)",
            plural(summary.skipped, "special file", "special files")
        )
    });
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
    (doc, json, note)
}
