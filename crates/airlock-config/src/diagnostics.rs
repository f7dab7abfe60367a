//! Configuration diagnostics: every error names the file, the dotted key path and the line.
//!
//! Invariant: a load collects every independent error of both files into one
//! [`ConfigErrors`]; nothing stops at the first problem except a TOML syntax error, which
//! ends the parsing of that one file (the other file is still checked).

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The file the problem is in (or a pseudo-file such as `<command line>`).
    pub file: PathBuf,
    /// Dotted key path, e.g. `network.allow[2]` or `mount[1].read_only`; empty for syntax errors.
    pub key: String,
    /// 1-based line; 0 when the problem has no position (e.g. a missing directory).
    pub line: u32,
    /// 1-based column (in characters); 0 when the problem has no position.
    pub column: u32,
    /// What is wrong, in one sentence.
    pub message: String,
}

/// Human form: `<file>:<line>:<col>: <key>: <message>` (position and key omitted when
/// unknown). Control characters are escaped: keys and messages quote file contents, which must
/// not be able to drive the terminal (O1).
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Escaped(&self.file.display().to_string()))?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", Escaped(&self.key))?;
        }
        write!(f, ": {}", Escaped(&self.message))
    }
}

/// Writes a string with control characters as `\u{..}` escapes.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_unicode())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// A key as it appears in a dotted key path: bare when it is a TOML bare key
/// (`A-Za-z0-9_-`), else quoted, so `network.hosts."db.local"` stays unambiguous.
pub(crate) fn key_segment(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// Every error of one load, in file order then position order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct ConfigErrors(pub Vec<Diagnostic>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl ConfigErrors {
    /// The diagnostics.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.0
    }
}

/// Maps byte offsets of a source text to 1-based (line, column) positions.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
    text: String,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex {
            starts,
            text: text.to_owned(),
        }
    }

    /// 1-based line and character column of `offset` (clamped to the text).
    pub(crate) fn position(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (to_u32(line + 1), to_u32(column + 1))
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_escapes_control_characters_from_file_contents() {
        let d = Diagnostic {
            file: "/c.toml".into(),
            key: "\u{1b}[2J".into(),
            line: 1,
            column: 1,
            message: "unknown key `\u{1b}[2J`".into(),
        };
        let text = d.to_string();
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("\\u{1b}[2J"), "{text}");
    }

    #[test]
    fn key_segments_are_quoted_unless_bare() {
        assert_eq!(key_segment("claude"), "claude");
        assert_eq!(key_segment("db.local"), "\"db.local\"");
        assert_eq!(key_segment(""), "\"\"");
    }

    #[test]
    fn positions_are_one_based_lines_and_character_columns() {
        let idx = LineIndex::new("a = 1\nbé = 2\n");
        assert_eq!(idx.position(0), (1, 1));
        assert_eq!(idx.position(4), (1, 5));
        assert_eq!(idx.position(6), (2, 1));
        // 'é' is two bytes: byte 9 is the third character of line 2.
        assert_eq!(idx.position(9), (2, 3));
    }

    #[test]
    fn display_is_one_line_per_error_with_file_line_column_and_key() {
        let errs = ConfigErrors(vec![
            Diagnostic {
                file: "/p/.airlock/config.toml".into(),
                key: "network.allow[2]".into(),
                line: 7,
                column: 3,
                message: "bad pattern".into(),
            },
            Diagnostic {
                file: "/u/config.toml".into(),
                key: "mount[0]".into(),
                line: 0,
                column: 0,
                message: "no such directory".into(),
            },
        ]);
        assert_eq!(
            errs.to_string(),
            "/p/.airlock/config.toml:7:3: network.allow[2]: bad pattern\n\
             /u/config.toml: mount[0]: no such directory"
        );
    }
}
