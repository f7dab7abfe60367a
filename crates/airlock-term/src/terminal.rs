//! The host terminal while a session is attached (PRODUCT S2): raw mode, the window size, and
//! putting everything back on every exit path.
//!
//! Exit paths and who restores:
//! - a detach, the session's end, an error: [`Terminal`]'s `Drop` (also during a panic's
//!   unwinding, which `main` catches);
//! - SIGTERM, SIGHUP, SIGINT, SIGQUIT sent to airlock (raw mode makes Ctrl+C a key for the
//!   session, so these come from outside, or from a closed terminal): the signal thread of
//!   [`watch_signals`] restores, then exits `128 + N`;
//! - a killed sandbox: the stream ends, the attach returns an error, `Drop` restores;
//! - SIGKILL cannot be caught: `reset` (or `stty sane`) repairs the terminal then.
//!
//! Restoring is the saved `termios` plus [`RESET_MODES`] for what a program in the session may
//! have switched on in the terminal through the raw stream (mouse reporting, bracketed paste,
//! application keys, a hidden cursor), and leaving the alternate screen when the session's
//! output entered it ([`ScreenTracker`]).

use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use airlock_protocol::{SessionController, WindowSize};
use nix::sys::signal::{SigSet, Signal};
use rustix::termios::{tcgetattr, tcsetattr, OptionalActions, Termios};

/// Modes a session may have left on in the terminal, switched off: application cursor keys and
/// keypad, bracketed paste, every mouse reporting mode and encoding, focus events, a hidden
/// cursor, a cursor style, colours and attributes. Each is harmless when it was not on.
pub const RESET_MODES: &str = "\x1b[?1l\x1b>\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1003l\
\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1004l\x1b[?25h\x1b[0 q\x1b[0m";
/// Leaves the alternate screen (only sent when the session entered it: on the main screen it
/// would also move the cursor to a saved position).
pub const LEAVE_ALTERNATE: &str = "\x1b[?1049l";

/// The terminal's size, when stdout is one.
pub fn window_size() -> Option<WindowSize> {
    let ws = rustix::termios::tcgetwinsize(io::stdout().as_fd()).ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some(WindowSize {
        rows: ws.ws_row,
        cols: ws.ws_col,
    })
}

/// `TERM` for a session, as the host terminal is.
pub fn term() -> String {
    std::env::var(airlock_config::env_vars::TERM)
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "xterm-256color".to_owned())
}

/// Shared between the owner and the signal thread: restores at most once.
#[derive(Debug)]
struct Saved {
    termios: Mutex<Option<Termios>>,
    alternate: Arc<AtomicBool>,
}

impl Saved {
    fn restore(&self) {
        let saved = self
            .termios
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(termios) = saved else { return };
        // Straight to the descriptor: the signal thread must not wait for std's stdout lock,
        // which the attach loop may hold while this runs.
        let mut reset = String::new();
        if self.alternate.load(Ordering::SeqCst) {
            reset.push_str(LEAVE_ALTERNATE);
        }
        reset.push_str(RESET_MODES);
        write_all_fd(reset.as_bytes());
        // A closed terminal fails here (EIO); there is nothing left to restore then.
        let _ = tcsetattr(io::stdin().as_fd(), OptionalActions::Now, &termios);
    }
}

/// Writes to fd 1 without std's buffer or lock; errors (a closed terminal) end the write.
fn write_all_fd(mut bytes: &[u8]) {
    let stdout = io::stdout();
    while !bytes.is_empty() {
        match rustix::io::write(stdout.as_fd(), bytes) {
            Ok(0) | Err(_) => return,
            Ok(n) => bytes = &bytes[n..],
        }
    }
}

/// The terminal in raw mode; restored when dropped.
#[derive(Debug)]
pub struct Terminal {
    saved: Arc<Saved>,
}

/// Why the terminal could not be switched to raw mode.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    /// stdin or stdout is not a terminal.
    #[error("attaching needs a terminal on stdin and stdout")]
    NotATerminal,
    /// `tcgetattr`/`tcsetattr` failed.
    #[error("cannot switch the terminal to raw mode: {0}")]
    Termios(io::Error),
}

impl Terminal {
    /// Saves the terminal's settings and switches it to raw mode.
    pub fn raw(tracker: &ScreenTracker) -> Result<Terminal, TerminalError> {
        if !(io::stdin().is_terminal() && io::stdout().is_terminal()) {
            return Err(TerminalError::NotATerminal);
        }
        let stdin = io::stdin();
        let saved = tcgetattr(stdin.as_fd()).map_err(|e| TerminalError::Termios(e.into()))?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(stdin.as_fd(), OptionalActions::Now, &raw)
            .map_err(|e| TerminalError::Termios(e.into()))?;
        Ok(Terminal {
            saved: Arc::new(Saved {
                termios: Mutex::new(Some(saved)),
                alternate: Arc::clone(&tracker.alternate),
            }),
        })
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.saved.restore();
    }
}

/// Follows whether the session's output switched the terminal to the alternate screen
/// (`CSI ? 1049 h`, `? 1047 h`, `? 47 h` and their `l` forms), so leaving restores the user's
/// own screen. A sequence split across two chunks is missed; the next switch corrects it.
#[derive(Debug, Default, Clone)]
pub struct ScreenTracker {
    alternate: Arc<AtomicBool>,
}

impl ScreenTracker {
    /// Looks at one chunk of output.
    pub fn observe(&self, chunk: &[u8]) {
        let mut last: Option<(usize, bool)> = None;
        for mode in ["1049", "1047", "47"] {
            for (on, suffix) in [(true, 'h'), (false, 'l')] {
                let needle = format!("\x1b[?{mode}{suffix}");
                if let Some(at) = find_last(chunk, needle.as_bytes()) {
                    if last.is_none_or(|(prev, _)| at > prev) {
                        last = Some((at, on));
                    }
                }
            }
        }
        if let Some((_, on)) = last {
            self.alternate.store(on, Ordering::SeqCst);
        }
    }

    /// Whether the terminal is on the alternate screen now.
    #[cfg(test)]
    pub fn alternate(&self) -> bool {
        self.alternate.load(Ordering::SeqCst)
    }
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

/// Output that goes to a writer and through a [`ScreenTracker`].
pub struct Tracked<W: Write> {
    /// Where the bytes go.
    pub inner: W,
    /// What follows them.
    pub tracker: ScreenTracker,
}

impl<W: Write> Write for Tracked<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.tracker.observe(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Starts the signal thread of an attachment: SIGWINCH sends the new window size; SIGTERM,
/// SIGHUP, SIGINT and SIGQUIT restore the terminal and exit `128 + N` (closing the stream,
/// which the guest takes as a detach). Blocks those signals in the calling thread first, so
/// threads started later inherit the mask and only this thread receives them.
pub fn watch_signals(terminal: &Terminal, controller: SessionController) {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGWINCH,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
    ] {
        set.add(signal);
    }
    if set.thread_block().is_err() {
        return;
    }
    let saved = Arc::clone(&terminal.saved);
    std::thread::spawn(move || loop {
        let Ok(signal) = set.wait() else { return };
        if signal == Signal::SIGWINCH {
            if let Some(size) = window_size() {
                // A failed send means the attachment is over; the main thread reports it.
                let _ = controller.resize(size);
            }
            continue;
        }
        saved.restore();
        std::process::exit(128 + signal as i32);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracker_follows_the_last_alternate_screen_switch_in_a_chunk() {
        let tracker = ScreenTracker::default();
        tracker.observe(b"text");
        assert!(!tracker.alternate());
        tracker.observe(b"\x1b[?1049h\x1b[Hvim");
        assert!(tracker.alternate());
        tracker.observe(b"\x1b[?1049l\x1b[?47h");
        assert!(tracker.alternate());
        tracker.observe(b"\x1b[?47h...\x1b[?1047l");
        assert!(!tracker.alternate());
        tracker.observe(b"\x1b[?1049");
        assert!(!tracker.alternate(), "a partial sequence changes nothing");
    }

    #[test]
    fn tracked_output_passes_every_byte_through() {
        let mut out = Tracked {
            inner: Vec::new(),
            tracker: ScreenTracker::default(),
        };
        out.write_all(b"a\x1b[?1049hb").unwrap();
        assert_eq!(out.inner, b"a\x1b[?1049hb");
        assert!(out.tracker.alternate());
    }

    #[test]
    fn reset_modes_never_leave_the_alternate_screen_or_move_the_cursor() {
        // Leaving the alternate screen restores a saved cursor position: only on demand.
        assert!(!RESET_MODES.contains("1049"));
        for moving in ["\x1b[H", "\x1b[f", "\x1b[u", "\x1b8"] {
            assert!(!RESET_MODES.contains(moving), "{moving:?}");
        }
    }
}
