//! A real terminal for `attach`: a private tmux server (its own socket, no config file, no
//! status line) whose panes run `sh` in the test world's cleared environment. Tests type with
//! `send-keys` and read the screen with `capture-pane`, as a user would see it.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{wait_until, TestEnv, AIRLOCK};

/// How long a test waits for something to appear on a screen.
pub const SCREEN_WAIT: Duration = Duration::from_secs(20);

/// `TERM` inside a pane of a config-less tmux server.
const PANE_TERM: &str = "screen";

/// Whether tmux is installed; fails under `CI` (scripts/test installs it), else says why the
/// test is skipped.
pub fn have_tmux() -> bool {
    airlock_testkit::needs_tool("tmux")
}

/// A private tmux server, killed on drop.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn new() -> Tmux {
        let socket = format!("airlock-test-{}-{}", std::process::id(), unique());
        Tmux { socket }
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    fn ok(&self, args: &[&str]) {
        let out = self.tmux(args);
        assert!(
            out.status.success(),
            "tmux {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A new window (its own tmux session `name`, `cols`×`rows`) running `sh` in `cwd` with the
    /// world's environment; airlock is `$A` there.
    pub fn window(&self, name: &str, env: &TestEnv, cwd: &Path, cols: u16, rows: u16) {
        let mut line = String::from("exec env -i");
        let command = env.command_for("sh".as_ref(), cwd);
        for (k, v) in command.get_envs() {
            if let Some(v) = v {
                line.push_str(&format!(
                    " {}={}",
                    k.to_string_lossy(),
                    quote(&v.to_string_lossy())
                ));
            }
        }
        line.push_str(&format!(
            " TERM={PANE_TERM} A={} PS1='host$ ' sh",
            quote(AIRLOCK)
        ));
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let cwd = cwd.to_string_lossy();
        self.ok(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            &cols,
            "-y",
            &rows,
            "-c",
            &cwd,
            &line,
        ]);
        self.ok(&["set-option", "-g", "status", "off"]);
        self.ok(&["set-option", "-t", name, "remain-on-exit", "on"]);
        self.expect(name, "host$");
    }

    /// Types `text` literally.
    pub fn type_text(&self, target: &str, text: &str) {
        self.ok(&["send-keys", "-t", target, "-l", text]);
    }

    /// Types `text` and Enter.
    pub fn line(&self, target: &str, text: &str) {
        self.type_text(target, text);
        self.key(target, "Enter");
    }

    /// Presses a key by tmux name (`C-]`, `Enter`, `q`).
    pub fn key(&self, target: &str, key: &str) {
        self.ok(&["send-keys", "-t", target, key]);
    }

    /// The visible screen, rows joined by newlines.
    pub fn screen(&self, target: &str) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", target]).stdout)
            .into_owned()
    }

    /// Waits until `needle` is on the screen.
    pub fn wait_for(&self, target: &str, needle: &str) -> bool {
        wait_until(SCREEN_WAIT, || self.screen(target).contains(needle))
    }

    /// Fails the test unless `needle` appears on the screen of `target` in time; the message
    /// shows what the screen held instead.
    #[track_caller]
    pub fn expect(&self, target: &str, needle: &str) {
        assert!(
            self.wait_for(target, needle),
            "{target}: no {needle:?} on the screen:\n{}",
            self.screen(target)
        );
    }

    /// Resizes a window (and so its only pane).
    pub fn resize(&self, target: &str, cols: u16, rows: u16) {
        let (cols, rows) = (cols.to_string(), rows.to_string());
        self.ok(&["resize-window", "-t", target, "-x", &cols, "-y", &rows]);
    }

    /// Closes a window as a user closing the terminal does: its processes get SIGHUP.
    pub fn close(&self, target: &str) {
        self.ok(&["kill-session", "-t", target]);
    }

    /// A tmux format evaluated for the pane (`#{cursor_flag}`, …).
    pub fn display(&self, target: &str, format: &str) -> String {
        let out = self.tmux(&["display-message", "-p", "-t", target, format]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The pid of the process running in the pane (its `sh`).
    pub fn pane_pid(&self, target: &str) -> u32 {
        self.display(target, "#{pane_pid}")
            .parse()
            .expect("pane pid")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// Single-quotes `s` for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The children of `pid` whose command line starts with `program`.
pub fn children_running(pid: u32, program: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            ppid == Some(pid) && cmdline.starts_with(program.as_bytes())
        })
        .collect()
}
