//! PID 1 duties: reaping, signal forwarding, dying with the host.

use std::time::Duration;

use airlock_protocol::ExitStatus;

use crate::fixture::{request, Guest, Trigger};

/// Children of `pid` that are zombies, from `/proc`.
fn zombie_children(pid: u32) -> Vec<u32> {
    let mut zombies = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{child}/status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        if field("PPid:") == pid.to_string() && field("State:").starts_with('Z') {
            zombies.push(child);
        }
    }
    zombies
}

#[test]
fn orphaned_grandchildren_are_reaped_not_left_as_zombies() {
    let guest = Guest::start();
    // The subshell exits at once, orphaning `true`s, which are re-parented to the guest.
    let out = guest.sh("for i in 1 2 3 4 5; do (true &); done; sleep 0.3; echo done");
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (ExitStatus::Code(0), "done\n")
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(zombie_children(guest.pid()), Vec::<u32>::new());
}

#[test]
fn closing_the_control_socket_ends_the_guest_and_its_processes() {
    let mut guest = Guest::start();
    let client = guest.client().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        let mut out = Trigger {
            seen: Vec::new(),
            needle: b"\n",
            hook: Some(move || tx.send(()).unwrap()),
        };
        // The run ends with the guest, as an error or not: only the process's fate matters.
        let _ = client.run(
            &request(&["sh", "-c", "echo $$; exec sleep 60"]),
            None,
            &mut out,
            &mut std::io::sink(),
        );
        out.seen
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("process started");
    drop(guest.control.take());
    let status = guest
        .wait_exit(Duration::from_secs(10))
        .expect("guest exits when the host is gone");
    assert_eq!(status.code(), Some(0));
    let seen = runner.join().unwrap();
    let pid: u32 = String::from_utf8_lossy(&seen)
        .trim()
        .parse()
        .expect("the process printed its pid");
    std::thread::sleep(Duration::from_millis(100));
    let alive = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(false);
    assert!(!alive, "process {pid} survived its guest");
}

#[test]
fn sigterm_to_the_guest_is_forwarded_to_process_groups() {
    let guest = Guest::start();
    let client = guest.client().unwrap();
    let guest_pid = rustix::process::Pid::from_raw(guest.pid() as i32).unwrap();
    let mut out = Trigger {
        seen: Vec::new(),
        needle: b"armed",
        hook: Some(move || {
            rustix::process::kill_process(guest_pid, rustix::process::Signal::TERM).unwrap()
        }),
    };
    let script = "trap 'echo got-term; exit 3' TERM; echo armed; sleep 30 & wait";
    let status = client
        .run(
            &request(&["sh", "-c", script]),
            None,
            &mut out,
            &mut std::io::sink(),
        )
        .unwrap();
    assert_eq!(status, ExitStatus::Code(3));
    assert!(String::from_utf8_lossy(&out.seen).contains("got-term"));
    // The guest itself survives SIGTERM and keeps serving.
    assert_eq!(guest.sh("echo alive").stdout, "alive\n");
}
