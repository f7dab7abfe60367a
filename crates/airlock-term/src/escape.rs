//! What may reach the host terminal from text airlock did not write itself (paths, config
//! values, session names, guest messages): [`escape_untrusted`] turns every control character
//! into visible text, so such text cannot drive the terminal.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Escapes control characters (C0, DEL, C1) and Unicode bidirectional controls, so the result
/// is one printable line that cannot move the cursor, change colors or reorder text.
/// Backslashes are left alone: library messages already quote values with Rust's `{:?}`
/// (`"\u{1b}"`), and escaping those again would only garble them; what matters is that no
/// control character reaches the terminal.
pub fn escape_untrusted(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// Bidirectional formatting characters ("Trojan Source", CVE-2021-42574).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x100 && needs_escape(c) => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_untrusted_neutralises_terminal_escape_sequences() {
        let hostile = "name\x1b]0;pwned\x07\x1b[2J";
        let shown = escape_untrusted(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert_eq!(shown, "name\\x1b]0;pwned\\x07\\x1b[2J");
    }

    #[test]
    fn escape_untrusted_keeps_values_on_one_line() {
        assert_eq!(escape_untrusted("a\nb\rc\td"), "a\\nb\\rc\\td");
    }

    #[test]
    fn escape_untrusted_escapes_c1_controls_and_del() {
        assert_eq!(escape_untrusted("x\u{9b}31m\u{7f}"), "x\\x9b31m\\x7f");
    }

    #[test]
    fn escape_untrusted_blocks_bidi_reordering() {
        assert_eq!(
            escape_untrusted("a\u{202e}b\u{2066}"),
            "a\\u{202e}b\\u{2066}"
        );
    }

    #[test]
    fn escape_untrusted_leaves_already_quoted_text_readable() {
        assert_eq!(escape_untrusted("\"a\\u{1b}b\""), "\"a\\u{1b}b\"");
    }

    #[test]
    fn escape_untrusted_leaves_ordinary_text_alone() {
        let s = "/home/ana/projects/naïve-ß 日本 $HOME";
        assert!(matches!(escape_untrusted(s), Cow::Borrowed(_)));
    }
}
