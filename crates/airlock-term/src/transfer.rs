//! The terminal side of a file transfer (`push`, `pull`): live progress and Ctrl+C.
//!
//! Progress (PRODUCT O3) appears on stderr, only when stderr is a terminal and only once a
//! transfer has run for a second, as a spinner with bytes, rate and files. Ctrl+C (or
//! SIGTERM/SIGHUP) shuts the transfer stream down: the side that was writing removes its
//! staged copy, so nothing is published; [`Interrupt::interrupted`] tells the verb to say so.

use std::io::IsTerminal;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_files::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nix::sys::signal::{SigSet, Signal};

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
}
