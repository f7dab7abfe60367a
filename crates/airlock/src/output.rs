//! Human and JSON output (PRODUCT O1–O3).
//!
//! Invariants:
//! - Results go to stdout, diagnostics to stderr. With `--json`, stdout receives exactly one JSON
//!   document per invocation (the result, or `{"error":{…}}`), nothing else.
//! - Every string that did not come from airlock itself (paths, config values, names, guest
//!   messages) passes through [`escape_untrusted`] before it reaches a terminal, so it cannot
//!   carry escape sequences that drive the host terminal. [`Doc`] does this for every value it
//!   is given; only headings and keys, which are airlock's own literals, are trusted.
//! - Color is used only when the stream is a terminal and `NO_COLOR` is unset or empty
//!   (<https://no-color.org>).
//! - Order is the order in which the command added lines; commands add them in a deterministic
//!   order (sorted, or the order of the configuration).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};
use std::path::Path;

use crate::error::CommandError;

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

/// A path as text for a [`Doc`] span (which escapes it); bytes that are not UTF-8 become U+FFFD.
pub fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
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

/// How a span of human output is emphasised when color is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Heading,
    Good,
    Bad,
    Warn,
    Dim,
}

impl Style {
    fn sgr(self) -> Option<&'static str> {
        match self {
            Style::Plain => None,
            Style::Heading => Some("1"),
            Style::Good => Some("32"),
            Style::Bad => Some("31"),
            Style::Warn => Some("33"),
            Style::Dim => Some("2"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Heading(String),
    Field {
        indent: usize,
        key: String,
        value: Vec<(Style, String)>,
    },
    Text {
        indent: usize,
        spans: Vec<(Style, String)>,
    },
    Blank,
}

/// A human-readable document: sections with indented fields, rendered with or without color.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Doc {
    lines: Vec<Line>,
}

impl Doc {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a section; a blank line separates it from the previous one.
    pub fn heading(&mut self, title: &str) -> &mut Self {
        if !self.lines.is_empty() {
            self.lines.push(Line::Blank);
        }
        self.lines.push(Line::Heading(title.to_owned()));
        self
    }

    /// `key: value` at `indent` levels; `value` is untrusted and escaped. Consecutive fields at
    /// the same indent have their values aligned.
    pub fn field(&mut self, indent: usize, key: &str, value: &str) -> &mut Self {
        self.styled_field(indent, key, &[(Style::Plain, value)])
    }

    /// Like [`Doc::field`] with styled spans; every span is escaped.
    pub fn styled_field(&mut self, indent: usize, key: &str, spans: &[(Style, &str)]) -> &mut Self {
        self.lines.push(Line::Field {
            indent,
            key: key.to_owned(),
            value: escape_spans(spans),
        });
        self
    }

    /// A free line of text at `indent` levels; every span is escaped.
    pub fn text(&mut self, indent: usize, spans: &[(Style, &str)]) -> &mut Self {
        self.lines.push(Line::Text {
            indent,
            spans: escape_spans(spans),
        });
        self
    }

    /// Renders the document; `color` adds SGR sequences around styled spans.
    pub fn render(&self, color: bool) -> String {
        let mut out = String::new();
        for (i, line) in self.lines.iter().enumerate() {
            match line {
                Line::Heading(title) => out.push_str(&paint(Style::Heading, title, color)),
                Line::Field { indent, key, value } => {
                    let width = self.key_width(i, *indent);
                    let pad = width - key.chars().count();
                    let _ = write!(out, "{}{key}:{} ", "  ".repeat(*indent), " ".repeat(pad));
                    push_spans(&mut out, value, color);
                }
                Line::Text { indent, spans } => {
                    out.push_str(&"  ".repeat(*indent));
                    push_spans(&mut out, spans, color);
                }
                Line::Blank => {}
            }
            out.push('\n');
        }
        out
    }

    /// Widest key among the run of consecutive fields at `indent` that contains line `i`.
    fn key_width(&self, i: usize, indent: usize) -> usize {
        let same = |l: &Line| matches!(l, Line::Field { indent: n, .. } if *n == indent);
        let start = self.lines[..i]
            .iter()
            .rposition(|l| !same(l))
            .map_or(0, |p| p + 1);
        let end = self.lines[i..]
            .iter()
            .position(|l| !same(l))
            .map_or(self.lines.len(), |p| i + p);
        self.lines[start..end]
            .iter()
            .filter_map(|l| match l {
                Line::Field { key, .. } => Some(key.chars().count()),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

fn escape_spans(spans: &[(Style, &str)]) -> Vec<(Style, String)> {
    spans
        .iter()
        .map(|(s, t)| (*s, escape_untrusted(t).into_owned()))
        .collect()
}

fn push_spans(out: &mut String, spans: &[(Style, String)], color: bool) {
    for (style, text) in spans {
        out.push_str(&paint(*style, text, color));
    }
}

fn paint(style: Style, text: &str, color: bool) -> String {
    match (color, style.sgr()) {
        (true, Some(sgr)) => format!("\x1b[{sgr}m{text}\x1b[0m"),
        _ => text.to_owned(),
    }
}

/// Escapes each line of a multi-line message; the line breaks themselves are kept.
pub fn escape_lines(s: &str) -> String {
    s.split('\n')
        .map(escape_untrusted)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether color may be used on a stream: a terminal, and `NO_COLOR` unset or empty.
pub fn color_allowed(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Writes results and diagnostics according to the `--json` choice.
pub struct Printer {
    pub json: bool,
    stdout_color: bool,
    stderr_color: bool,
}

impl Printer {
    pub fn from_env(json: bool) -> Self {
        let no_color = std::env::var_os(airlock_config::env_vars::NO_COLOR);
        Self {
            json,
            stdout_color: color_allowed(io::stdout().is_terminal(), no_color.as_deref()),
            stderr_color: color_allowed(io::stderr().is_terminal(), no_color.as_deref()),
        }
    }

    /// Prints a successful result: the document on stdout, or the JSON value.
    ///
    /// A `null` JSON result means the verb already wrote its output itself (the guest's stdout
    /// of `exec`, the entries of `policy log --follow`): nothing more goes to stdout, so what the
    /// guest wrote stays exactly what the caller reads (O2 has no document to add).
    pub fn result(&self, doc: &Doc, json: &serde_json::Value) -> io::Result<()> {
        let mut out = io::stdout().lock();
        if self.json && json.is_null() {
            return out.flush();
        }
        if self.json {
            serde_json::to_writer_pretty(&mut out, json).map_err(io::Error::from)?;
            out.write_all(b"\n")?;
        } else {
            out.write_all(doc.render(self.stdout_color).as_bytes())?;
        }
        out.flush()
    }

    /// Prints an error: `{"error":{…}}` on stdout with `--json`, else a message on stderr.
    pub fn error(&self, err: &CommandError) -> io::Result<()> {
        if self.json {
            let doc = serde_json::json!({ "error": err.to_json() });
            let mut out = io::stdout().lock();
            serde_json::to_writer_pretty(&mut out, &doc).map_err(io::Error::from)?;
            out.write_all(b"\n")?;
            return out.flush();
        }
        self.error_to_stderr(err)
    }

    /// Prints an error on stderr only (also with `--json`, when stdout already holds a result).
    pub fn error_to_stderr(&self, err: &CommandError) -> io::Result<()> {
        let mut text = paint(Style::Bad, "error", self.stderr_color);
        let _ = write!(text, "[{}]: ", err.code);
        text.push_str(&escape_lines(&err.message));
        text.push('\n');
        if let Some(hint) = &err.hint {
            text.push_str(&paint(Style::Warn, "hint", self.stderr_color));
            let _ = writeln!(text, ": {}", escape_lines(hint));
        }
        let mut e = io::stderr().lock();
        e.write_all(text.as_bytes())?;
        e.flush()
    }

    /// A diagnostic or progress line on stderr (never stdout, so `--json` stays one document).
    pub fn note(&self, line: &str) {
        let _ = writeln!(io::stderr().lock(), "{}", escape_untrusted(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

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

    #[test]
    fn doc_escapes_values_and_aligns_fields() {
        let mut d = Doc::new();
        d.heading("Sandbox")
            .field(1, "image", "host")
            .field(1, "memory_mb", "8192\x1b[31m");
        let text = d.render(false);
        assert_eq!(
            text,
            "Sandbox\n  image:     host\n  memory_mb: 8192\\x1b[31m\n"
        );
    }

    #[test]
    fn doc_without_color_has_no_escape_sequences() {
        let mut d = Doc::new();
        d.heading("A")
            .text(1, &[(Style::Good, "ok"), (Style::Plain, " fine")]);
        assert!(!d.render(false).contains('\x1b'));
        assert!(d.render(true).contains("\x1b[32mok\x1b[0m"));
    }

    #[test]
    fn color_only_on_a_terminal_without_no_color() {
        assert!(color_allowed(true, None));
        assert!(color_allowed(true, Some(OsStr::new(""))));
        assert!(!color_allowed(true, Some(OsStr::new("1"))));
        assert!(!color_allowed(false, None));
    }
}
