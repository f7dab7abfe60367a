//! The detach key of `airlock attach` (PRODUCT S2): parsing its spelling and finding it in
//! what the terminal sends.
//!
//! A key is spelled `ctrl-<c>` with `<c>` one of `a`–`z`, `\`, `]`, `^`, `_` (default
//! `ctrl-]`, as in telnet and `docker attach`). Keys a terminal cannot do without are refused:
//! `ctrl-m` (Enter), `ctrl-i` (Tab), `ctrl-j` (newline), `ctrl-h` (Backspace on many
//! terminals) and `ctrl-[` (Escape).
//!
//! A terminal sends the key as its control byte, unless a program in the session switched on
//! an extended keyboard protocol (the session's output reaches the terminal raw): then it
//! arrives as `CSI <code> ; 5 u` (the kitty/fixterms "CSI u" form, optionally with an event
//! type `:1`) or `CSI 27 ; 5 ; <code> ~` (xterm's `modifyOtherKeys`). All three are found.
//! A sequence is matched only within one read: terminals write a key's sequence at once, and
//! holding back a trailing `ESC` to wait for more would delay every Escape keypress.

use std::fmt;

/// The default spelling.
pub const DEFAULT_DETACH_KEY: &str = "ctrl-]";

/// A parsed detach key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetachKey {
    /// The key's character (`]`, `a`, …), as the extended protocols encode it.
    key: u8,
}

/// Why a detach key spelling is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetachKeyError {
    /// Not `ctrl-<c>`.
    #[error("detach key {spelling:?} is not of the form ctrl-<key> (e.g. \"ctrl-]\", \"ctrl-q\")")]
    Form {
        /// What was given.
        spelling: String,
    },
    /// A key that typing needs.
    #[error("detach key {spelling:?} would make {what} impossible to type; pick another (e.g. \"ctrl-]\", \"ctrl-q\")")]
    Reserved {
        /// What was given.
        spelling: String,
        /// The key it would take away.
        what: &'static str,
    },
}

impl DetachKey {
    /// Parses `ctrl-<c>` (case-insensitive).
    pub fn parse(spelling: &str) -> Result<Self, DetachKeyError> {
        let form = || DetachKeyError::Form {
            spelling: spelling.to_owned(),
        };
        let lower = spelling.trim().to_ascii_lowercase();
        let rest = lower
            .strip_prefix("ctrl-")
            .or_else(|| lower.strip_prefix("ctrl+"))
            .or_else(|| lower.strip_prefix("c-"))
            .or_else(|| lower.strip_prefix('^'))
            .ok_or_else(form)?;
        let &[key] = rest.as_bytes() else {
            return Err(form());
        };
        let reserved = match key {
            b'm' => Some("Enter"),
            b'i' => Some("Tab"),
            b'j' => Some("newline"),
            b'h' => Some("Backspace"),
            b'[' => Some("Escape"),
            _ => None,
        };
        if let Some(what) = reserved {
            return Err(DetachKeyError::Reserved {
                spelling: spelling.to_owned(),
                what,
            });
        }
        match key {
            b'a'..=b'z' | b'\\' | b']' | b'^' | b'_' => Ok(Self { key }),
            _ => Err(form()),
        }
    }

    /// The control byte a terminal sends for the key (`ctrl-]` is `0x1d`).
    pub fn byte(self) -> u8 {
        self.key.to_ascii_uppercase() & 0x1f
    }

    /// Finds the first occurrence of the key in `input`: the bytes before it are still the
    /// session's, everything from the key on is dropped. `None`: no detach key here.
    pub fn find(self, input: &[u8]) -> Option<usize> {
        let code = self.key.to_string();
        let forms = [
            format!("\x1b[{code};5u"),
            format!("\x1b[{code};5:1u"),
            format!("\x1b[27;5;{code}~"),
        ];
        let byte = self.byte();
        (0..input.len()).find(|&at| {
            input[at] == byte
                || forms
                    .iter()
                    .any(|form| input[at..].starts_with(form.as_bytes()))
        })
    }
}

impl Default for DetachKey {
    fn default() -> Self {
        Self { key: b']' }
    }
}

impl fmt::Display for DetachKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ctrl-{}", self.key as char)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_is_ctrl_right_bracket_byte_0x1d() {
        let key = DetachKey::parse(DEFAULT_DETACH_KEY).unwrap();
        assert_eq!((key, key.byte()), (DetachKey::default(), 0x1d));
        assert_eq!(key.to_string(), "ctrl-]");
    }

    #[test]
    fn spellings_are_parsed_case_insensitively() {
        for (spelling, byte) in [
            ("ctrl-q", 0x11),
            ("Ctrl-A", 0x01),
            ("^\\", 0x1c),
            ("c-_", 0x1f),
        ] {
            assert_eq!(
                DetachKey::parse(spelling).unwrap().byte(),
                byte,
                "{spelling}"
            );
        }
    }

    #[test]
    fn keys_typing_needs_are_refused_naming_what_they_would_break() {
        for (spelling, what) in [("ctrl-m", "Enter"), ("ctrl-[", "Escape"), ("ctrl-i", "Tab")] {
            let err = DetachKey::parse(spelling).unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
        for bad in ["", "q", "ctrl-", "ctrl-qq", "alt-q", "ctrl-1", "ctrl-é"] {
            assert!(
                matches!(DetachKey::parse(bad), Err(DetachKeyError::Form { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_key_is_found_as_a_byte_and_in_extended_keyboard_encodings() {
        let key = DetachKey::default();
        assert_eq!(key.find(b"abc"), None);
        assert_eq!(key.find(b"ab\x1dcd"), Some(2));
        assert_eq!(key.find(b"x\x1b[93;5u"), Some(1));
        assert_eq!(key.find(b"\x1b[93;5:1u"), Some(0));
        assert_eq!(key.find(b"yy\x1b[27;5;93~"), Some(2));
        // Another key's CSI u form, or ctrl-] with other modifiers, is the session's.
        assert_eq!(key.find(b"\x1b[93;6u\x1b[97;5u"), None);
        let q = DetachKey::parse("ctrl-q").unwrap();
        assert_eq!(q.find(b"\x1dq\x11"), Some(2));
        assert_eq!(q.find(b"\x1b[113;5u"), Some(0));
    }

    proptest! {
        #[test]
        fn bytes_without_the_key_pass_through_untouched(
            input in prop::collection::vec(any::<u8>().prop_filter("no 0x1d", |b| *b != 0x1d), 0..256)
        ) {
            let found = DetachKey::default().find(&input);
            // Only an extended encoding can match then, and it must really be there.
            if let Some(at) = found {
                prop_assert!(input[at..].starts_with(b"\x1b[93;5") || input[at..].starts_with(b"\x1b[27;5;93~"));
            }
        }
    }
}
