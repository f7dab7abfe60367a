//! How a `run` ends: Ctrl+C on the terminal gives 130 every time, and a finished run leaves no
//! state directory (L9) and no zombie behind.

use std::io::BufRead;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;

use super::harness::ok;
#[allow(unused_imports)]
use super::harness::Rt;

both! {
    /// Ctrl+C on a terminal signals the whole foreground process group, not only airlock: the
    /// sandbox's own processes must not die of it before airlock forwards it to the command,
    /// or the stream closes early and `run` reports an internal error (70) instead of the
    /// command's 130. Driven several times, since the two orders raced.
    fn ctrl_c_on_the_terminal_during_run_exits_130_every_time(rt) {
        for attempt in 0..6 {
            let mut child = rt
                .command(&rt.project, &["run", "--", "sh", "-c", "echo up; exec sleep 100"])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn airlock");
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().expect("stdout pipe"))
                .read_line(&mut line)
                .expect("read the first line");
            assert_eq!(line, "up\n");
            // What the terminal does on Ctrl+C: SIGINT to every process of the group.
            let group = format!("-{}", child.id());
            let st = std::process::Command::new("kill")
                .args(["-INT", "--", &group])
                .status()
                .unwrap();
            assert!(st.success());
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(130),
                "attempt {attempt}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

both! {
    /// Ctrl+C while the sandbox is still starting (before CMD runs) must not kill airlock
    /// half-way: it reaches CMD as soon as CMD exists, so `run` still exits 130 after a full
    /// teardown and leaves no state behind.
    fn ctrl_c_while_the_sandbox_starts_still_exits_130_and_leaves_nothing(rt) {
        for attempt in 0..3 {
            // The debug hook holds `run` for 3 s before the sandbox starts, after saying so.
            let mut child = rt
                .command(&rt.project, &["run", "--", "sleep", "100"])
                .env("AIRLOCK_TEST_PAUSE_AT", "start")
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn airlock");
            let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr pipe"));
            let mut line = String::new();
            stderr.read_line(&mut line).expect("read the pause line");
            assert!(line.contains("pausing at start"), "{line}");
            let group = format!("-{}", child.id());
            let st = std::process::Command::new("kill")
                .args(["-INT", "--", &group])
                .status()
                .unwrap();
            assert!(st.success());
            let status = child.wait().unwrap();
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
            assert_eq!(status.code(), Some(130), "attempt {attempt}: {status:?} {rest}");
        }
        let runs = rt.env.state_home().join("airlock/runs");
        let left: Vec<_> = std::fs::read_dir(&runs)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "run state left behind: {left:?}");
    }
}

both! {
    /// L9: a finished run removes its own state directory (`<state>/runs/<id>`), whether the
    /// command succeeded or failed; nothing waits for `clean`.
    fn a_finished_run_removes_its_state_directory(rt) {
        ok(&rt.sh(&[], "true"));
        rt.sh(&[], "exit 5").assert_code(5);
        let runs = rt.env.state_home().join("airlock/runs");
        let left: Vec<_> = std::fs::read_dir(&runs)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "run state left behind: {left:?}");
    }
}

both! {
    /// A finished run reaps every process it started, the sandbox's PID 1 included. Killed
    /// together with the init stage (its parent), PID 1 used to be re-parented to the host's
    /// init as a zombie, which a container whose init never reaps keeps for good. This test
    /// process becomes a child subreaper, so anything the run orphaned would come here.
    fn a_finished_run_leaves_no_zombie_behind(rt) {
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
        ok(&rt.sh(&[], "true"));
        // `sh` reaped airlock itself: any child of this process now is an orphan of the run.
        let left = waitid(
            Id::All,
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        );
        assert!(
            matches!(left, Err(nix::errno::Errno::ECHILD)),
            "the run left a process behind: {left:?}"
        );
    }
}
