//! A step's output on stderr, live, each line prefixed with its phase (P1).

use std::io::{self, Write};

/// Writes whatever it is given to `out`, starting each line with `prefix`.
pub struct Prefixed<W: Write> {
    prefix: String,
    at_line_start: bool,
    out: W,
}

impl<W: Write> Prefixed<W> {
    pub fn new(phase: &str, out: W) -> Self {
        Prefixed {
            prefix: format!("[{phase}] "),
            at_line_start: true,
            out,
        }
    }
}

impl<W: Write> Write for Prefixed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for piece in buf.split_inclusive(|b| *b == b'\n') {
            if self.at_line_start {
                self.out.write_all(self.prefix.as_bytes())?;
            }
            self.out.write_all(piece)?;
            self.at_line_start = piece.ends_with(b"\n");
        }
        self.out.flush()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_prefixed_even_across_writes() {
        let mut p = Prefixed::new("packages", Vec::new());
        p.write_all(b"one\ntw").unwrap();
        p.write_all(b"o\nthree").unwrap();
        assert_eq!(
            String::from_utf8(p.out).unwrap(),
            "[packages] one\n[packages] two\n[packages] three"
        );
    }
}
