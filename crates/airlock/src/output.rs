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

use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};
use std::path::Path;

pub use airlock_term::escape_untrusted;

use crate::error::HostError;

/// A path as text for a [`Doc`] span (which escapes it); bytes that are not UTF-8 become U+FFFD.
pub fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
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
    /// The printer for `--json` or not; `stdout_is_terminal` is the caller's one probe of
    /// stdout (stderr is probed here).
    pub fn from_env(json: bool, stdout_is_terminal: bool) -> Self {
        let no_color = std::env::var_os(airlock_config::env_vars::NO_COLOR);
        Self {
            json,
            stdout_color: color_allowed(stdout_is_terminal, no_color.as_deref()),
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
    pub fn error(&self, err: &HostError) -> io::Result<()> {
        if self.json {
            let doc = serde_json::json!({ "error": crate::error::to_json(err) });
            let mut out = io::stdout().lock();
            serde_json::to_writer_pretty(&mut out, &doc).map_err(io::Error::from)?;
            out.write_all(b"\n")?;
            return out.flush();
        }
        self.error_to_stderr(err)
    }

    /// Prints an error on stderr only (also with `--json`, when stdout already holds a result).
    pub fn error_to_stderr(&self, err: &HostError) -> io::Result<()> {
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
