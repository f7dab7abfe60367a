//! Persistent sessions through a real terminal (PRODUCT S1–S4, L4, issue 10 item 8): `up`
//! ends attached to the default session; typing, resizing, the detach key, reattaching to a
//! full-screen program, a SIGKILLed client, a closed terminal, two clients; `sessions` and
//! `sessions kill`. Terminals are panes of a private tmux server ([`tmux::Tmux`]).

mod attach;
mod cli;
mod tmux;

use crate::lifecycle::Project;

/// `sessions --json` of the project's sandbox (must succeed).
pub fn sessions(p: &Project) -> Vec<serde_json::Value> {
    let run = p.run(&["sessions", "--json"]);
    run.assert_code(0);
    run.json()["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The session `name` as `sessions --json` shows it.
pub fn session(p: &Project, name: &str) -> Option<serde_json::Value> {
    sessions(p).into_iter().find(|s| s["name"] == name)
}
