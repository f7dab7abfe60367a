//! Reading a secret value from stdin (N5: never from argv, where every process can read it).
//!
//! On a terminal: a prompt on stderr, echo off (`ECHO` cleared, `ECHONL` set so Enter still
//! moves to a new line), one line read, the saved settings restored. Restoring happens on every
//! exit path we can see: [`EchoOff`]'s `Drop` (normal return, error, panic unwinding) and a
//! signal thread that, on SIGINT/SIGTERM/SIGHUP/SIGQUIT, restores the settings and exits with
//! 128+N. (SIGKILL cannot be caught; `stty sane` repairs the terminal then.)
//!
//! From a pipe or file: everything up to end of file.
//!
//! Either way: at most [`MAX_VALUE`] bytes, read unbuffered straight from fd 0 into one
//! buffer that is zeroed when dropped (std's stdin buffer would keep a copy for the life of
//! the process); exactly one trailing newline (`\n` or `\r\n`) stripped; the value must be
//! UTF-8 and not empty. Header-safety (no CR, LF, NUL) is checked by the store
//! (`SecretError::InvalidValue`).

use std::io::Write;

use airlock_secrets::Redacted;
use rustix::termios::{LocalModes, OptionalActions, Termios};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use zeroize::{Zeroize, Zeroizing};

/// Why no value was read; nothing was stored in every case.
#[derive(Debug, thiserror::Error)]
pub enum SecretInputError {
    /// More than [`MAX_VALUE`] bytes came in.
    #[error("the value is longer than {MAX_VALUE} bytes; nothing was stored")]
    TooLong,
    /// Nothing (or only a newline) came in.
    #[error("the value of {name} is empty; nothing was stored")]
    Empty {
        /// The secret's name.
        name: String,
    },
    /// The bytes are not UTF-8.
    #[error("the value is not UTF-8 text; nothing was stored")]
    NotUtf8,
    /// Reading fd 0 failed.
    #[error("cannot read the value from stdin: {0}")]
    Stdin(rustix::io::Errno),
    /// Echo could not be switched off on the terminal.
    #[error("cannot switch off echo on the terminal: {0}")]
    Terminal(rustix::io::Errno),
}

/// Longest accepted value (far above any token; keeps a mistaken `< bigfile` bounded).
pub const MAX_VALUE: usize = 64 * 1024;

/// Reads the value of secret `name` (see the module docs).
pub fn read_value(name: &str, is_terminal: bool) -> Result<Redacted<String>, SecretInputError> {
    let mut buf = Zeroizing::new(vec![0u8; MAX_VALUE + 1]);
    let len = if is_terminal {
        let echo = EchoOff::begin()?;
        let mut err = std::io::stderr();
        let _ = write!(err, "Value of {name} (input hidden, Enter to finish): ");
        let _ = err.flush();
        let read = read_until(&mut buf, true);
        drop(echo);
        read?
    } else {
        read_until(&mut buf, false)?
    };
    if len > MAX_VALUE {
        return Err(SecretInputError::TooLong);
    }
    let keep = strip_one_newline(&buf[..len]);
    if keep == 0 {
        return Err(SecretInputError::Empty {
            name: name.to_owned(),
        });
    }
    buf.truncate(keep);
    let mut bytes = std::mem::take(&mut *buf);
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Redacted::new(text)),
        Err(e) => {
            bytes = e.into_bytes();
            bytes.zeroize();
            Err(SecretInputError::NotUtf8)
        }
    }
}

/// The length of `value` without one trailing `\n` or `\r\n`.
fn strip_one_newline(value: &[u8]) -> usize {
    match value {
        [.., b'\r', b'\n'] => value.len() - 2,
        [.., b'\n'] => value.len() - 1,
        _ => value.len(),
    }
}

/// Reads from stdin until end of file, a full buffer or, with `line`, the end of a line (a
/// terminal in canonical mode returns at most one line per `read`); returns the bytes read.
fn read_until(buf: &mut [u8], line: bool) -> Result<usize, SecretInputError> {
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::read(rustix::stdio::stdin(), &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if line && buf[len - 1] == b'\n' {
                    break;
                }
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(SecretInputError::Stdin(e)),
        }
    }
    Ok(len)
}

/// Echo switched off on the stdin terminal until dropped (see the module docs).
struct EchoOff {
    saved: Termios,
}

impl EchoOff {
    fn begin() -> Result<EchoOff, SecretInputError> {
        let tty_error = SecretInputError::Terminal;
        let stdin = rustix::stdio::stdin();
        let saved = rustix::termios::tcgetattr(stdin).map_err(tty_error)?;
        restore_on_signal(saved.clone());
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        quiet.local_modes.insert(LocalModes::ECHONL);
        rustix::termios::tcsetattr(stdin, OptionalActions::Now, &quiet).map_err(tty_error)?;
        Ok(EchoOff { saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        let _ =
            rustix::termios::tcsetattr(rustix::stdio::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// Starts a thread that, on a terminating signal, puts `saved` back and exits 128+N. The
/// handlers stay installed for the rest of the process, which ends right after `secret set`;
/// restoring already-restored settings is harmless.
fn restore_on_signal(saved: Termios) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
    else {
        return; // no handler: the default action ends the process as before
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ =
                rustix::termios::tcsetattr(rustix::stdio::stdin(), OptionalActions::Now, &saved);
            let _ = writeln!(std::io::stderr());
            std::process::exit(128 + sig);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_trailing_newline_is_stripped() {
        assert_eq!(strip_one_newline(b"tok\n"), 3);
        assert_eq!(strip_one_newline(b"tok\r\n"), 3);
        assert_eq!(strip_one_newline(b"tok\n\n"), 4);
        assert_eq!(strip_one_newline(b"tok"), 3);
        assert_eq!(strip_one_newline(b""), 0);
    }
}
