//! A session's terminal screen model (PRODUCT S1): everything the session's PTY printed is fed
//! to a `vt100` parser, so a client that attaches later gets the current screen (characters,
//! colours and attributes, cursor position and visibility, input modes such as application
//! cursor keys, bracketed paste and mouse reporting) and the bounded scrollback.
//!
//! What a redraw holds, in order:
//! 1. on the main screen, the scrollback and the visible rows as plain lines with colours, so
//!    they scroll into the client terminal's own scrollback (the visible rows are then drawn
//!    over); on the alternate screen (a full-screen program such as `vim` or `less`), the
//!    switch to the client's alternate screen instead, since the main screen is not visible;
//! 2. the visible screen: clear, every row, attributes, cursor (vt100 `state_formatted`);
//! 3. the input modes.
//!
//! Not modelled (they reach an attached client's terminal raw, but are not redrawn): the window
//! title, the kitty keyboard protocol, OSC hyperlinks and clipboard requests.

use std::num::NonZeroU16;

use airlock_protocol::WindowSize;
use vt100::capture::{BasicFormattedCaptureRange, BasicFormattedCaptureState};

/// Lines of scrollback kept per session (tmux's default `history-limit`). A line of `c` columns
/// costs a few dozen bytes per cell in the model, so this bounds a session's memory.
pub const SCROLLBACK_LINES: usize = 2000;

/// The terminal state of one session.
pub struct Screen {
    parser: vt100::Parser,
}

fn dims(size: WindowSize) -> (NonZeroU16, NonZeroU16) {
    (
        NonZeroU16::new(size.rows).unwrap_or(NonZeroU16::MIN),
        NonZeroU16::new(size.cols).unwrap_or(NonZeroU16::MIN),
    )
}

impl Screen {
    /// An empty screen of `size` keeping `scrollback` lines.
    pub fn new(size: WindowSize, scrollback: usize) -> Self {
        let (rows, cols) = dims(size);
        Self {
            parser: vt100::Parser::new(rows, cols, scrollback),
        }
    }

    /// Feeds what the session's PTY printed.
    pub fn process(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
    }

    /// Follows the PTY's new size.
    pub fn resize(&mut self, size: WindowSize) {
        let (rows, cols) = dims(size);
        self.parser.set_size(rows, cols);
    }

    /// The text on screen, rows joined by newlines (tests and diagnostics).
    pub fn contents(&self) -> String {
        self.parser.screen().contents()
    }

    /// The bytes that bring a freshly attached terminal to the current state (module docs).
    pub fn redraw(&self) -> Vec<u8> {
        let screen = self.parser.screen();
        let mut out = String::new();
        if screen.alternate_screen() {
            out.push_str("\x1b[?1049h");
        } else {
            let mut history = String::new();
            let mut state = BasicFormattedCaptureState::new();
            // Writing into a String cannot fail.
            let _ = screen.write_contents_formatted_basic(
                &mut history,
                BasicFormattedCaptureRange::Full(&mut state),
            );
            // The client's terminal is in raw mode: a newline must also return the carriage.
            out.push_str(&history.replace('\n', "\r\n"));
            out.push_str("\x1b[0m");
        }
        out.push_str(&screen.state_formatted());
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(rows: u16, cols: u16) -> WindowSize {
        WindowSize { rows, cols }
    }

    /// What a terminal shows after `bytes`: a fresh model fed with them.
    fn render(bytes: &[u8], rows: u16, cols: u16) -> vt100::Parser {
        let mut parser = vt100::Parser::new(
            NonZeroU16::new(rows).unwrap(),
            NonZeroU16::new(cols).unwrap(),
            100,
        );
        parser.process(bytes);
        parser
    }

    #[test]
    fn redraw_reproduces_colours_cursor_and_text() {
        let mut screen = Screen::new(size(5, 20), 100);
        screen.process(b"plain \x1b[31mred\x1b[0m\r\n\x1b[1;44mbold on blue\x1b[0m\x1b[3;7H");
        let shown = render(&screen.redraw(), 5, 20);
        let shown = shown.screen();
        assert_eq!(shown.contents(), screen.contents());
        assert_eq!(shown.cursor_position(), (2, 6));
        let red = shown.cell(0, 6).unwrap();
        assert_eq!((red.contents(), red.fgcolor()), ("r", vt100::Color::Idx(1)));
        let bold = shown.cell(1, 0).unwrap();
        assert!(bold.bold());
        assert_eq!(bold.bgcolor(), vt100::Color::Idx(4));
    }

    #[test]
    fn redraw_replays_scrollback_before_the_screen() {
        let mut screen = Screen::new(size(3, 10), 100);
        for i in 0..8 {
            screen.process(format!("line{i}\r\n").as_bytes());
        }
        let redraw = String::from_utf8(screen.redraw()).unwrap();
        let first = redraw.find("line0").expect("scrollback replayed");
        assert!(first < redraw.rfind("line7").unwrap());
        // Shown on a terminal as tall as the session, the visible rows are the session's.
        assert_eq!(
            render(redraw.as_bytes(), 3, 10).screen().contents(),
            screen.contents()
        );
    }

    #[test]
    fn scrollback_is_bounded() {
        let mut screen = Screen::new(size(2, 10), 5);
        for i in 0..100 {
            screen.process(format!("l{i}\r\n").as_bytes());
        }
        let redraw = String::from_utf8(screen.redraw()).unwrap();
        assert!(!redraw.contains("l10\r"), "old lines kept: {redraw:?}");
        assert!(redraw.contains("l99"));
    }

    #[test]
    fn a_full_screen_program_is_redrawn_on_the_alternate_screen_with_its_input_modes() {
        let mut screen = Screen::new(size(4, 20), 100);
        screen.process(b"shell$ less file\r\n");
        // What less/vim do: alternate screen, application cursor keys, then the page.
        screen.process(b"\x1b[?1049h\x1b[?1h\x1b[H\x1b[2Jpage one\r\n~\r\n(END)");
        let redraw = screen.redraw();
        let shown = render(&redraw, 4, 20);
        assert!(shown.screen().alternate_screen());
        assert!(shown.screen().application_cursor());
        assert!(shown.screen().contents().starts_with("page one"));
        assert!(!String::from_utf8_lossy(&redraw).contains("shell$"));
    }

    #[test]
    fn resize_follows_the_pty() {
        let mut screen = Screen::new(size(4, 20), 100);
        screen.resize(size(10, 40));
        screen.process(&[b'x'; 39]);
        assert_eq!(screen.contents().lines().next().unwrap().len(), 39);
        screen.resize(size(0, 0));
        screen.process(b"y");
    }
}
