//! The detach key of `airlock attach` (PRODUCT S2): parsing its spelling and finding it in
//! what the terminal sends.
//!
//! A key is spelled `ctrl-<c>` with `<c>` one of `a`–`z`, `@`, `\`, `]`, `^`, `_`; a sequence
//! of up to [`MAX_KEYS`] keys is comma separated (`ctrl-p,ctrl-q`, as in `docker attach`). The
//! default is `ctrl-]`. Keys a terminal cannot do without are refused anywhere in a sequence:
//! `ctrl-m` (Enter), `ctrl-i` (Tab), `ctrl-j` (newline), `ctrl-h` (Backspace on many
//! terminals) and `ctrl-[` (Escape).
//!
//! A terminal sends a key as its control byte, unless a program in the session switched on an
//! extended keyboard protocol (the session's output reaches the terminal raw): then it arrives
//! as `CSI <code> ; 5 u` (the kitty/fixterms "CSI u" form, optionally with the event type `:1`)
//! or `CSI 27 ; 5 ; <code> ~` (xterm's `modifyOtherKeys`). All three are recognised; an
//! extended form is matched within one read only (terminals write a key's sequence at once, and
//! holding back a trailing `ESC` to wait for more would delay every Escape keypress).
//!
//! Of a sequence, the keys typed so far are held back ([`DetachScanner`]); when the next key
//! is not the expected one they are sent on, followed by that key.

use std::fmt;

/// The default spelling.
pub const DEFAULT_DETACH_KEY: &str = "ctrl-]";
/// The longest sequence.
pub const MAX_KEYS: usize = 4;

/// A parsed detach key sequence (one key or more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachKey {
    /// Each key's character (`]`, `q`, …), as the extended protocols encode it.
    keys: Vec<u8>,
}

/// Why a detach key spelling is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetachKeyError {
    /// Not `ctrl-<c>[,ctrl-<c>…]`.
    #[error("detach key {spelling:?} is not of the form ctrl-<key>[,ctrl-<key>…] with key a-z or one of @ \\ ] ^ _ (e.g. \"ctrl-]\", \"ctrl-p,ctrl-q\")")]
    Form {
        /// What was given.
        spelling: String,
    },
    /// More than [`MAX_KEYS`] keys.
    #[error("detach key {spelling:?} has more than {MAX_KEYS} keys")]
    TooLong {
        /// What was given.
        spelling: String,
    },
    /// A key that typing needs.
    #[error("detach key {spelling:?} would take {what} away from the session; pick another (e.g. \"ctrl-]\", \"ctrl-p,ctrl-q\")")]
    Reserved {
        /// What was given.
        spelling: String,
        /// The key it would take away.
        what: &'static str,
    },
}

/// The key character of control byte `byte` (`0x1d` → `]`), if it is one.
fn key_of_byte(byte: u8) -> Option<u8> {
    match byte {
        0 => Some(b'@'),
        1..=26 => Some(byte - 1 + b'a'),
        0x1b..=0x1f => Some(byte + 0x40),
        _ => None,
    }
}

impl DetachKey {
    /// Parses `ctrl-<c>[,ctrl-<c>…]` (case-insensitive).
    pub fn parse(spelling: &str) -> Result<Self, DetachKeyError> {
        let form = || DetachKeyError::Form {
            spelling: spelling.to_owned(),
        };
        let mut bytes = Vec::new();
        for part in spelling.split(',') {
            let lower = part.trim().to_ascii_lowercase();
            let rest = lower.strip_prefix("ctrl-").ok_or_else(form)?;
            let &[key] = rest.as_bytes() else {
                return Err(form());
            };
            let byte = match key {
                b'a'..=b'z' => key - b'a' + 1,
                b'@' | b'[' | b'\\' | b']' | b'^' | b'_' => key - 0x40,
                _ => return Err(form()),
            };
            bytes.push(byte);
        }
        Self::from_bytes(spelling, &bytes)
    }

    /// The sequence of control bytes `bytes` (as the configuration stores it); `spelling`
    /// names it in errors.
    pub fn from_bytes(spelling: &str, bytes: &[u8]) -> Result<Self, DetachKeyError> {
        if bytes.len() > MAX_KEYS {
            return Err(DetachKeyError::TooLong {
                spelling: spelling.to_owned(),
            });
        }
        let mut keys = Vec::with_capacity(bytes.len());
        for &byte in bytes {
            let reserved = match byte {
                0x0d => Some("Enter"),
                0x09 => Some("Tab"),
                0x0a => Some("newline"),
                0x08 => Some("Backspace"),
                0x1b => Some("Escape"),
                _ => None,
            };
            if let Some(what) = reserved {
                return Err(DetachKeyError::Reserved {
                    spelling: spelling.to_owned(),
                    what,
                });
            }
            keys.push(key_of_byte(byte).ok_or_else(|| DetachKeyError::Form {
                spelling: spelling.to_owned(),
            })?);
        }
        if keys.is_empty() {
            return Err(DetachKeyError::Form {
                spelling: spelling.to_owned(),
            });
        }
        Ok(Self { keys })
    }

    /// The control bytes a terminal sends for the sequence (`ctrl-]` is `0x1d`).
    pub fn bytes(&self) -> Vec<u8> {
        self.keys
            .iter()
            .map(|k| k.to_ascii_uppercase() & 0x1f)
            .collect()
    }

    /// A scanner for one attachment's input.
    pub fn scanner(&self) -> DetachScanner {
        DetachScanner {
            key: self.clone(),
            matched: 0,
            held: Vec::new(),
        }
    }

    /// How long key `index` of the sequence is at the front of `input`, in any encoding.
    fn matches(&self, index: usize, input: &[u8]) -> Option<usize> {
        let key = self.keys[index];
        let byte = key.to_ascii_uppercase() & 0x1f;
        if input.first() == Some(&byte) {
            return Some(1);
        }
        if input.first() != Some(&0x1b) {
            return None;
        }
        let code = key;
        [
            format!("\x1b[{code};5u"),
            format!("\x1b[{code};5:1u"),
            format!("\x1b[27;5;{code}~"),
        ]
        .into_iter()
        .find(|form| input.starts_with(form.as_bytes()))
        .map(|form| form.len())
    }
}

impl Default for DetachKey {
    fn default() -> Self {
        Self { keys: vec![b']'] }
    }
}

impl fmt::Display for DetachKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, key) in self.keys.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}ctrl-{}", *key as char)?;
        }
        Ok(())
    }
}

/// What one read of input comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Bytes for the session.
    pub forward: Vec<u8>,
    /// The whole sequence was typed: detach (input after it is dropped).
    pub detach: bool,
}

/// Finds a detach key sequence in a stream of reads, holding back a partial sequence.
#[derive(Debug, Clone)]
pub struct DetachScanner {
    key: DetachKey,
    /// Keys of the sequence typed so far.
    matched: usize,
    /// Their bytes as received, sent on if the sequence breaks off.
    held: Vec<u8>,
}

impl DetachScanner {
    /// Looks at one read.
    pub fn feed(&mut self, input: &[u8]) -> Scan {
        let mut forward = Vec::with_capacity(input.len());
        let mut at = 0;
        while at < input.len() {
            match self.key.matches(self.matched, &input[at..]) {
                Some(len) => {
                    self.held.extend_from_slice(&input[at..at + len]);
                    self.matched += 1;
                    at += len;
                    if self.matched == self.key.keys.len() {
                        self.held.clear();
                        self.matched = 0;
                        return Scan {
                            forward,
                            detach: true,
                        };
                    }
                }
                None if self.matched > 0 => {
                    // The sequence broke off: what was held is the session's after all, and
                    // this byte may start the sequence anew.
                    forward.append(&mut self.held);
                    self.matched = 0;
                }
                None => {
                    forward.push(input[at]);
                    at += 1;
                }
            }
        }
        Scan {
            forward,
            detach: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scan_all(key: &DetachKey, reads: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut scanner = key.scanner();
        let mut out = Vec::new();
        for read in reads {
            let scan = scanner.feed(read);
            out.extend(scan.forward);
            if scan.detach {
                return (out, true);
            }
        }
        (out, false)
    }

    #[test]
    fn default_is_ctrl_right_bracket_byte_0x1d() {
        let key = DetachKey::parse(DEFAULT_DETACH_KEY).unwrap();
        assert_eq!((&key, key.bytes()), (&DetachKey::default(), vec![0x1d]));
        assert_eq!(key.to_string(), "ctrl-]");
    }

    #[test]
    fn spellings_and_configured_bytes_agree() {
        for (spelling, bytes) in [
            ("ctrl-q", &[0x11][..]),
            ("Ctrl-A", &[0x01]),
            ("ctrl-\\", &[0x1c]),
            ("ctrl-@", &[0x00]),
            ("ctrl-p, ctrl-q", &[0x10, 0x11]),
        ] {
            let key = DetachKey::parse(spelling).unwrap();
            assert_eq!(key.bytes(), bytes, "{spelling}");
            assert_eq!(DetachKey::from_bytes(spelling, bytes).unwrap(), key);
        }
    }

    #[test]
    fn keys_typing_needs_are_refused_naming_what_they_would_take() {
        for (spelling, what) in [
            ("ctrl-m", "Enter"),
            ("ctrl-[", "Escape"),
            ("ctrl-i", "Tab"),
            ("ctrl-p,ctrl-h", "Backspace"),
        ] {
            let err = DetachKey::parse(spelling).unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
        for bad in [
            "", "q", "ctrl-", "ctrl-qq", "alt-q", "ctrl-1", "ctrl-é", "ctrl-a,",
        ] {
            assert!(
                matches!(DetachKey::parse(bad), Err(DetachKeyError::Form { .. })),
                "{bad:?}"
            );
        }
        let long = DetachKey::parse("ctrl-a,ctrl-b,ctrl-c,ctrl-d,ctrl-e").unwrap_err();
        assert!(matches!(long, DetachKeyError::TooLong { .. }));
    }

    #[test]
    fn the_key_is_found_as_a_byte_and_in_extended_keyboard_encodings() {
        let key = DetachKey::default();
        assert_eq!(scan_all(&key, &[b"abc"]), (b"abc".to_vec(), false));
        assert_eq!(scan_all(&key, &[b"ab\x1dcd"]), (b"ab".to_vec(), true));
        assert_eq!(scan_all(&key, &[b"x\x1b[93;5u"]), (b"x".to_vec(), true));
        assert_eq!(scan_all(&key, &[b"\x1b[93;5:1u"]), (vec![], true));
        assert_eq!(
            scan_all(&key, &[b"yy\x1b[27;5;93~"]),
            (b"yy".to_vec(), true)
        );
        // Another key's CSI u form, or ctrl-] with other modifiers, is the session's.
        let other = b"\x1b[93;6u\x1b[97;5u";
        assert_eq!(scan_all(&key, &[other]), (other.to_vec(), false));
    }

    #[test]
    fn a_sequence_is_held_back_across_reads_and_sent_on_when_it_breaks_off() {
        let key = DetachKey::parse("ctrl-p,ctrl-q").unwrap();
        assert_eq!(scan_all(&key, &[b"a\x10", b"\x11z"]), (b"a".to_vec(), true));
        // ctrl-p then another key: both reach the session, in order.
        assert_eq!(
            scan_all(&key, &[b"\x10", b"x\x10\x10\x11"]),
            (b"\x10x\x10".to_vec(), true)
        );
        assert_eq!(scan_all(&key, &[b"\x10k"]), (b"\x10k".to_vec(), false));
    }

    proptest! {
        #[test]
        fn input_without_the_key_passes_through_untouched(
            input in prop::collection::vec(any::<u8>().prop_filter("no 0x1d, no ESC", |b| *b != 0x1d && *b != 0x1b), 0..256),
            cut in 0usize..256,
        ) {
            let cut = cut.min(input.len());
            let (a, b) = input.split_at(cut);
            prop_assert_eq!(scan_all(&DetachKey::default(), &[a, b]), (input.clone(), false));
        }
    }
}
