//! A session's terminal screen model (PRODUCT S1): everything the session's PTY printed is fed
//! to a `vt100` parser, so a client that attaches later gets the current screen (characters,
//! colours and attributes, cursor position and visibility, input modes such as application
//! cursor keys, bracketed paste and mouse reporting) and the bounded scrollback.
//!
//! What a redraw holds, in order:
//! 1. the scrollback and the visible rows of the main screen as plain lines with colours, so
//!    they scroll into the client terminal's own scrollback (the visible rows are then drawn
//!    over);
//! 2. when a full-screen program (`vim`, `less`) has switched to the alternate screen: the main
//!    screen as it was at that switch, then the switch, so quitting the program shows the
//!    client the same shell screen the session has;
//! 3. the visible screen: clear, every row, attributes, cursor (vt100 `state_formatted`);
//! 4. the input modes.
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
    /// The main screen as it was when a program switched to the alternate one (the main grid
    /// does not change meanwhile), so a redraw can put it under the alternate screen.
    main: Option<vt100::Screen>,
}

/// The sequences that switch to the alternate screen (xterm's 1049, 1047, 47).
const ENTER_ALTERNATE: [&[u8]; 3] = [b"\x1b[?1049h", b"\x1b[?1047h", b"\x1b[?47h"];

/// Where the first switch to the alternate screen starts in `bytes`.
fn find_enter_alternate(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find(|&at| {
        bytes[at] == 0x1b
            && ENTER_ALTERNATE
                .iter()
                .any(|seq| bytes[at..].starts_with(seq))
    })
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
            main: None,
        }
    }

    /// Feeds what the session's PTY printed. Just before a switch to the alternate screen the
    /// main screen is kept aside. (A switch split across two chunks is missed: the redraw then
    /// shows the alternate screen alone, as if the main one were empty.)
    pub fn process(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let split = if self.parser.screen().alternate_screen() {
                None
            } else {
                find_enter_alternate(bytes)
            };
            let Some(at) = split else {
                self.parser.process(bytes);
                break;
            };
            self.parser.process(&bytes[..at]);
            self.main = Some(self.parser.screen().clone());
            // The switch itself, so the next round looks past it.
            let len = ENTER_ALTERNATE
                .iter()
                .find(|seq| bytes[at..].starts_with(seq))
                .map_or(1, |seq| seq.len());
            self.parser.process(&bytes[at..at + len]);
            bytes = &bytes[at + len..];
        }
        if !self.parser.screen().alternate_screen() {
            self.main = None;
        }
    }

    /// Follows the PTY's new size.
    pub fn resize(&mut self, size: WindowSize) {
        let (rows, cols) = dims(size);
        self.parser.set_size(rows, cols);
        if let Some(main) = &mut self.main {
            main.set_size(rows, cols);
        }
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
            if let Some(main) = &self.main {
                history(main, &mut out);
                out.push_str(&main.contents_formatted());
            }
            out.push_str("\x1b[?1049h");
        } else {
            history(screen, &mut out);
        }
        out.push_str(&screen.state_formatted());
        out.into_bytes()
    }
}

/// The scrollback and the visible rows as plain lines with colours (they scroll into the
/// client's own scrollback; the visible rows are drawn over afterwards).
fn history(screen: &vt100::Screen, out: &mut String) {
    let mut lines = String::new();
    let mut state = BasicFormattedCaptureState::new();
    // Writing into a String cannot fail.
    let _ = screen
        .write_contents_formatted_basic(&mut lines, BasicFormattedCaptureRange::Full(&mut state));
    // The client's terminal is in raw mode: a newline must also return the carriage.
    out.push_str(&lines.replace('\n', "\r\n"));
    out.push_str("\x1b[0m");
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
    }

    #[test]
    fn the_main_screen_is_redrawn_under_a_full_screen_program() {
        let mut screen = Screen::new(size(4, 20), 100);
        // The switch arrives in the same chunk as the shell's output before it.
        screen.process(b"shell$ less file\r\n\x1b[?1049h\x1b[H\x1b[2Jpage one");
        screen.process(b"\r\n(END)");
        let mut shown = render(&screen.redraw(), 4, 20);
        assert!(shown.screen().contents().starts_with("page one"));
        // When the program quits, the terminal shows the shell's screen, as the session does.
        shown.process(b"\x1b[?1049l");
        screen.process(b"\x1b[?1049l");
        assert!(shown.screen().contents().starts_with("shell$ less file"));
        assert_eq!(shown.screen().contents(), screen.contents());
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
