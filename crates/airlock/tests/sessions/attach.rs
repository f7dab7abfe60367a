//! `up` and `attach` in a real terminal.

use std::time::Duration;

use super::tmux::{children_running, have_tmux, Tmux};
use super::{session, sessions};
use crate::common::{wait_until, AIRLOCK};
use crate::lifecycle::{alive, kill9, Project};

const WAIT: Duration = Duration::from_secs(20);

/// A project and a terminal `w1` (100×30) in its directory, when tmux is there (see
/// [`have_tmux`]). The terminal is declared last so it closes first, before the world's `down`.
fn world() -> Option<(Project, Tmux)> {
    if !have_tmux() {
        return None;
    }
    let p = Project::new();
    let tmux = Tmux::new();
    tmux.window("w1", &p.env, &p.dir, 100, 30);
    Some((p, tmux))
}

/// Once the session lost its only client (`w1`), it still runs and a new terminal `w2`
/// attaches to it and shows `marker` (typed before the client went).
fn reattach_in_a_new_terminal(p: &Project, tmux: &Tmux, marker: &str) {
    assert!(
        wait_until(WAIT, || clients(p) == Some(0)),
        "{:?}",
        sessions(p)
    );
    assert_eq!(session(p, "main").unwrap()["state"], "running");
    tmux.window("w2", &p.env, &p.dir, 100, 30);
    tmux.line("w2", "\"$A\" attach");
    tmux.expect("w2", marker);
}

/// Runs `"$A" ARGS` in window `w` and waits for the marker a command typed in the session
/// prints (`echo in-session-$((6*7))` shows `in-session-42` only once the session ran it).
fn attached(tmux: &Tmux, w: &str, args: &str) {
    tmux.line(w, &format!("\"$A\" {args}"));
    tmux.line(w, "echo in-session-$((6*7))");
    tmux.expect(w, "in-session-42");
}

/// The `airlock` client running in window `w`.
fn client_pid(tmux: &Tmux, w: &str) -> u32 {
    let sh = tmux.pane_pid(w);
    let mut found = Vec::new();
    assert!(
        wait_until(WAIT, || {
            found = children_running(sh, AIRLOCK);
            !found.is_empty()
        }),
        "no airlock process under the pane's shell {sh}"
    );
    found[0]
}

fn clients(p: &Project) -> Option<u64> {
    session(p, "main").and_then(|s| s["clients"].as_u64())
}

#[test]
fn up_ends_attached_to_the_default_session_and_keys_reach_it() {
    let Some((p, tmux)) = world() else { return };
    attached(&tmux, "w1", "up");
    let main = session(&p, "main").expect("the default session exists");
    assert_eq!(
        (&main["state"], &main["clients"]),
        (&"running".into(), &1.into())
    );
    // The session runs in the workspace, with the terminal's TERM.
    tmux.line("w1", "echo \"cwd=$(pwd) term=$TERM\"");
    let expected = format!("cwd={} term=screen", p.dir.display());
    tmux.expect("w1", &expected);
}

#[test]
fn detaching_leaves_the_session_running_and_attach_redraws_a_full_screen_program() {
    let Some((p, tmux)) = world() else { return };
    let lines: String = (1..=200).map(|i| format!("page-line-{i:03}\n")).collect();
    std::fs::write(p.dir.join("pages.txt"), lines).unwrap();
    attached(&tmux, "w1", "up");
    tmux.line("w1", "less pages.txt");
    tmux.expect("w1", "page-line-001");
    tmux.key("w1", "C-]");
    tmux.expect("w1", "detached from session main");
    tmux.expect("w1", "host$");
    assert!(
        !tmux.screen("w1").contains("page-line-001"),
        "the host screen is back"
    );
    assert!(wait_until(WAIT, || clients(&p) == Some(0)));
    assert_eq!(session(&p, "main").unwrap()["state"], "running");

    tmux.line("w1", "clear; \"$A\" attach");
    // No key typed: the redraw alone shows less's page.
    tmux.expect("w1", "page-line-001");
    tmux.key("w1", "q");
    // Quitting less shows the shell screen the session had under it.
    tmux.expect("w1", "less pages.txt");
    assert!(!tmux.screen("w1").contains("page-line-001"));
}

#[test]
fn a_session_survives_a_sigkilled_client() {
    let Some((p, tmux)) = world() else { return };
    attached(&tmux, "w1", "up");
    kill9(u64::from(client_pid(&tmux, "w1")));
    reattach_in_a_new_terminal(&p, &tmux, "in-session-42");
}

#[test]
fn a_session_survives_a_closed_terminal() {
    let Some((p, tmux)) = world() else { return };
    attached(&tmux, "w1", "up");
    tmux.line("w1", "echo before-close-$((1+1))");
    tmux.expect("w1", "before-close-2");
    tmux.close("w1");
    reattach_in_a_new_terminal(&p, &tmux, "before-close-2");
}

#[test]
fn a_resized_terminal_resizes_the_session() {
    let Some((p, tmux)) = world() else { return };
    attached(&tmux, "w1", "up");
    tmux.line("w1", "clear; stty size");
    tmux.expect("w1", "30 100");
    tmux.resize("w1", 120, 40);
    // SIGWINCH → resize message → the session's PTY: asked only once it arrived.
    let size = |p: &Project| session(p, "main").map(|s| s["size"].clone());
    let wanted = serde_json::json!({ "rows": 40, "cols": 120 });
    assert!(
        wait_until(WAIT, || size(&p).as_ref() == Some(&wanted)),
        "{:?}",
        size(&p)
    );
    tmux.line("w1", "clear; stty size");
    tmux.expect("w1", "40 120");
}

#[test]
fn two_clients_share_a_session_and_the_smaller_window_wins() {
    let Some((p, tmux)) = world() else { return };
    attached(&tmux, "w1", "up");
    tmux.window("w2", &p.env, &p.dir, 80, 24);
    tmux.line("w2", "\"$A\" attach");
    assert!(wait_until(WAIT, || clients(&p) == Some(2)));
    tmux.line("w1", "clear; echo typed-in-w1-$((2*3)); stty size");
    for w in ["w1", "w2"] {
        tmux.expect(w, "typed-in-w1-6");
        tmux.expect(w, "24 80");
    }
    tmux.key("w2", "C-]");
    assert!(wait_until(WAIT, || clients(&p) == Some(1)));
    tmux.line("w1", "clear; stty size");
    tmux.expect("w1", "30 100");
}

#[test]
fn the_terminal_is_restored_after_a_detach_and_after_sigterm() {
    let Some((p, tmux)) = world() else { return };
    let saved = p.env.root().join("stty-before");
    tmux.line("w1", &format!("stty -g > '{}'", saved.display()));
    attached(&tmux, "w1", "up");
    // A program in the session turns on modes a terminal keeps: mouse reporting, bracketed
    // paste, application cursor keys, a hidden cursor.
    tmux.line("w1", "printf '\\033[?1000h\\033[?2004h\\033[?1h\\033[?25l'");
    tmux.key("w1", "C-]");
    tmux.expect("w1", "detached from session main");
    let check = format!(
        "stty -g | cmp -s - '{}' && echo termios-restored-$((3*3))",
        saved.display()
    );
    tmux.line("w1", &check);
    tmux.expect("w1", "termios-restored-9");
    let modes = tmux_modes(&tmux, "w1");
    assert_eq!(modes, "0 0 1", "mouse reporting, cursor keys, cursor shown");

    tmux.line("w1", "clear; \"$A\" attach");
    tmux.line("w1", "echo again-$((4*4))");
    tmux.expect("w1", "again-16");
    let pid = client_pid(&tmux, "w1");
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    // Typed before the client is gone, the check would go to the session.
    assert!(
        wait_until(WAIT, || !alive(u64::from(pid))),
        "attach outlived SIGTERM"
    );
    tmux.line("w1", &check.replace("$((3*3))", "$((5*5))"));
    tmux.expect("w1", "termios-restored-25");
    assert_eq!(session(&p, "main").unwrap()["state"], "running");
}

/// The pane's mouse-reporting, application-cursor and cursor-visible flags.
fn tmux_modes(tmux: &Tmux, w: &str) -> String {
    tmux.display(w, "#{mouse_any_flag} #{keypad_cursor_flag} #{cursor_flag}")
}

#[test]
fn a_configured_detach_key_sequence_replaces_ctrl_right_bracket() {
    if !have_tmux() {
        return;
    }
    let p = Project::new();
    p.env.write_user_config("detach_key = \"ctrl-p,ctrl-q\"\n");
    let tmux = Tmux::new();
    tmux.window("w1", &p.env, &p.dir, 100, 30);
    attached(&tmux, "w1", "up");
    tmux.line("w1", "cat -v");
    // ctrl-] is an ordinary key now; ctrl-p alone too (it reaches the session once the next
    // key shows the sequence broke off).
    tmux.key("w1", "C-]");
    tmux.key("w1", "C-p");
    tmux.key("w1", "x");
    tmux.key("w1", "Enter");
    tmux.expect("w1", "^]^Px");
    tmux.key("w1", "C-c");
    tmux.key("w1", "C-p");
    tmux.key("w1", "C-q");
    tmux.expect("w1", "detached from session main");
}

#[test]
fn layout_tmux_runs_agent_edit_and_shell_windows_attached_or_created() {
    if !have_tmux() {
        return;
    }
    let p = Project::new();
    p.env.write_user_config("layout = \"tmux\"\n");
    let tmux = Tmux::new();
    tmux.window("w1", &p.env, &p.dir, 100, 30);
    tmux.line("w1", "\"$A\" up");
    for window in ["0:agent", "1:edit", "2:shell"] {
        tmux.expect("w1", window);
    }
    tmux.line("w1", "echo in-tmux-$((7*7))");
    tmux.expect("w1", "in-tmux-49");
    // Killing airlock's session leaves the tmux server; the next attach joins it again
    // instead of creating more windows.
    tmux.key("w1", "C-]");
    tmux.expect("w1", "detached from session main");
    p.run(&["sessions", "kill", "main"]).assert_code(0);
    tmux.line("w1", "clear; \"$A\" attach");
    tmux.expect("w1", "in-tmux-49");
    tmux.expect("w1", "2:shell");
    // A fourth window would show as ` 3:name` in the window list (the status line's clock,
    // e.g. `23:25`, contains `3:` too).
    assert!(!tmux.screen("w1").contains(" 3:"), "{}", tmux.screen("w1"));
}

#[test]
fn a_sandbox_stopped_under_an_attached_client_ends_it_with_the_terminal_restored() {
    let Some((p, tmux)) = world() else { return };
    let saved = p.env.root().join("stty-before");
    tmux.line("w1", &format!("stty -g > '{}'", saved.display()));
    attached(&tmux, "w1", "up");
    p.run(&["down"]).assert_code(0);
    tmux.expect("w1", "session.closed");
    tmux.line(
        "w1",
        &format!(
            "stty -g | cmp -s - '{}' && echo restored-$((8*8))",
            saved.display()
        ),
    );
    tmux.expect("w1", "restored-64");
}

/// A `down` from another shell after an attaching `up` made the sandbox ready, before it
/// attached (held there by the debug hook): `up` attaches to nothing, says the sandbox was
/// stopped meanwhile and succeeds, like `up --no-attach` in the same race; the terminal is
/// the shell's again.
#[test]
fn a_down_before_an_attaching_up_attached_leaves_it_successful_with_a_note() {
    let Some((p, tmux)) = world() else { return };
    tmux.line(
        "w1",
        "AIRLOCK_TEST_PAUSE_AT=attach \"$A\" up; echo up-exited-$?",
    );
    tmux.expect("w1", "pausing at attach");
    p.run(&["down"]).assert_code(0);
    tmux.expect("w1", "up-exited-0");
    let screen = tmux.screen("w1");
    assert!(screen.contains("stopped or replaced meanwhile"), "{screen}");
    assert_eq!(p.health(), "absent");
}

#[test]
fn a_second_up_reattaches_to_the_same_session_with_its_screen() {
    let Some((p, tmux)) = world() else { return };
    attached(&tmux, "w1", "up");
    let pid = session(&p, "main").unwrap()["pid"].clone();
    tmux.key("w1", "C-]");
    tmux.expect("w1", "detached from session main");
    tmux.line("w1", "clear; \"$A\" up");
    tmux.expect("w1", "in-session-42");
    assert_eq!(
        session(&p, "main").unwrap()["pid"],
        pid,
        "the same shell, not a fresh one"
    );
}
