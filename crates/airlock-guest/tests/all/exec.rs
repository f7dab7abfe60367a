//! Exec behaviour: output, exit status, signals, stdin, PTY, descriptors, identity.

use std::io::Read;

use airlock_protocol::{ClientError, ErrorCode, ExecUser, ExitStatus, TtyRequest, WindowSize};

use crate::fixture::{is_root, request, Guest, Trigger};

#[test]
fn exec_echo_streams_stdout() {
    let guest = Guest::start();
    let out = guest
        .run_with(&request(&["echo", "hello", "sandbox"]), None)
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0));
    assert_eq!(out.stdout, "hello sandbox\n");
    assert_eq!(out.stderr, "");
}

#[test]
fn exit_code_is_returned_exactly() {
    let guest = Guest::start();
    for code in [0, 1, 7, 255] {
        assert_eq!(
            guest.sh(&format!("exit {code}")).status,
            ExitStatus::Code(code)
        );
    }
}

#[test]
fn death_by_signal_is_reported_as_the_signal_not_a_code() {
    let guest = Guest::start();
    let out = guest.sh("kill -TERM $$");
    assert_eq!(out.status, ExitStatus::Signal(libc::SIGTERM));
    assert_eq!(out.status.shell_code(), 128 + libc::SIGTERM);
}

#[test]
fn host_signal_reaches_the_process_group() {
    let guest = Guest::start();
    let client = guest.client().unwrap();
    let controller = client.controller();
    // The signal goes to the group: the background sleep dies too, so the run ends.
    let mut out = Trigger {
        seen: Vec::new(),
        needle: b"ready",
        hook: Some(move || controller.signal(libc::SIGINT).unwrap()),
    };
    let status = client
        .run(
            &request(&["sh", "-c", "sleep 30 & echo ready; wait"]),
            None,
            &mut out,
            &mut std::io::sink(),
        )
        .unwrap();
    assert_eq!(status, ExitStatus::Signal(libc::SIGINT));
}

#[test]
fn stdin_is_streamed_and_its_end_reaches_the_process() {
    let guest = Guest::start();
    let data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    let out = guest
        .run_with(&request(&["wc", "-c"]), Some(&data))
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0));
    assert_eq!(out.stdout.trim(), data.len().to_string());
    // Without stdin, the process sees EOF at once instead of hanging.
    let out = guest.run_with(&request(&["cat"]), None).unwrap();
    assert_eq!((out.status, out.stdout.as_str()), (ExitStatus::Code(0), ""));
}

#[test]
fn stdout_and_stderr_stay_separate_and_in_order() {
    let guest = Guest::start();
    let out = guest.sh("for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done; exit 3");
    assert_eq!(out.status, ExitStatus::Code(3));
    assert_eq!(out.stdout, "out1\nout2\nout3\nout4\nout5\n");
    assert_eq!(out.stderr, "err1\nerr2\nerr3\nerr4\nerr5\n");
}

#[test]
fn large_output_arrives_complete() {
    let guest = Guest::start();
    let out = guest.sh("head -c 3000000 /dev/zero | tr '\\0' x");
    assert_eq!(out.status, ExitStatus::Code(0));
    assert_eq!(out.stdout.len(), 3_000_000);
}

fn tty(rows: u16, cols: u16) -> Option<TtyRequest> {
    Some(TtyRequest {
        size: WindowSize { rows, cols },
        term: "xterm-test".into(),
    })
}

#[test]
fn pty_mode_gives_a_controlling_terminal_of_the_requested_size() {
    let guest = Guest::start();
    let mut req = request(&[
        "sh",
        "-c",
        "stty size; tty; echo TERM=$TERM; test -t 0 && test -t 2 && echo tty-ok",
    ]);
    req.tty = tty(33, 101);
    let out = guest.run_with(&req, None).unwrap();
    assert_eq!(out.status, ExitStatus::Code(0));
    assert!(out.stdout.contains("33 101"), "{:?}", out.stdout);
    assert!(out.stdout.contains("/dev/pts/"), "{:?}", out.stdout);
    assert!(out.stdout.contains("TERM=xterm-test"), "{:?}", out.stdout);
    assert!(out.stdout.contains("tty-ok"), "{:?}", out.stdout);
    assert_eq!(out.stderr, "", "PTY mode has one output stream");
}

/// Host input that resizes the terminal, then sends a line.
struct ResizeThenLine {
    controller: airlock_protocol::ExecController,
    sent: bool,
}

impl Read for ResizeThenLine {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.sent {
            // Keep stdin open: a terminal has no end of input.
            std::thread::sleep(std::time::Duration::from_secs(30));
            return Ok(0);
        }
        self.sent = true;
        self.controller
            .resize(WindowSize {
                rows: 50,
                cols: 132,
            })
            .unwrap();
        buf[..3].copy_from_slice(b"go\n");
        Ok(3)
    }
}

#[test]
fn pty_resize_reaches_the_terminal() {
    let guest = Guest::start();
    let client = guest.client().unwrap();
    let stdin = ResizeThenLine {
        controller: client.controller(),
        sent: false,
    };
    let mut req = request(&["sh", "-c", "read line; stty size"]);
    req.tty = tty(10, 20);
    let mut out = Vec::new();
    let status = client
        .run(&req, Some(Box::new(stdin)), &mut out, &mut std::io::sink())
        .unwrap();
    assert_eq!(status, ExitStatus::Code(0));
    assert!(
        String::from_utf8_lossy(&out).contains("50 132"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
}

#[test]
fn child_inherits_no_descriptor_beyond_stdio() {
    let guest = Guest::start();
    let out = guest
        .run_with(&request(&["ls", "/proc/self/fd"]), None)
        .unwrap();
    // 3 is the directory ls opened itself to list /proc/self/fd.
    let fds: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "{out:?}");
    let mut req = request(&["ls", "/proc/self/fd"]);
    req.tty = tty(24, 80);
    let out = guest.run_with(&req, None).unwrap();
    let fds: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "{out:?}");
}

#[test]
fn environment_is_base_plus_request_and_nothing_from_the_guest() {
    let guest = Guest::start();
    let mut req = request(&["env"]);
    req.env.insert("FROM_REQUEST".into(), "1".into());
    req.env.insert("AIRLOCK_BASE".into(), "overridden".into());
    let out = guest.run_with(&req, None).unwrap();
    assert!(out.stdout.contains("FROM_REQUEST=1\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains("AIRLOCK_BASE=overridden\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("USER=sandbox\n"), "{}", out.stdout);
    assert!(
        !out.stdout.contains("AIRLOCK_TEST_GUEST_KEY"),
        "the key must not reach processes"
    );
    assert!(
        !out.stdout.contains("AIRLOCK_TEST_GUEST_PRIVATE"),
        "guest env leaked: {}",
        out.stdout
    );
}

#[test]
fn missing_command_is_a_typed_not_found_error() {
    let guest = Guest::start();
    match guest.run_with(&request(&["airlock-no-such-command"]), None) {
        Err(ClientError::Remote(err)) => assert_eq!(err.code, ErrorCode::CommandNotFound),
        other => panic!("{other:?}"),
    }
}

#[test]
fn root_is_refused_unless_the_sandbox_allows_it() {
    let guest = Guest::start();
    let mut req = request(&["id", "-u"]);
    req.user = ExecUser::Root;
    match guest.run_with(&req, None) {
        Err(ClientError::Remote(err)) => assert_eq!(err.code, ErrorCode::RootNotAllowed),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sandbox_user_runs_unprivileged_with_no_capabilities() {
    if !airlock_testkit::needs_root("identity switching needs a guest started as root") {
        return;
    }
    let guest = Guest::start();
    let out =
        guest.sh("id -u; id -g; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status");
    assert_eq!(out.status, ExitStatus::Code(0));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(&lines[..2], ["65534", "65534"]);
    for line in &lines[2..] {
        let value = line.split(':').nth(1).unwrap().trim();
        assert!(value == "0000000000000000" || value == "1", "{line}");
    }
}

/// A process with the guest's own uid must not read its memory-backed `/proc` files. As
/// root, the test uses a root exec (capabilities dropped); unprivileged, the sandbox user *is*
/// the guest's uid with no capabilities on either side, so only `PR_SET_DUMPABLE = 0` stands
/// in the way.
#[test]
fn same_uid_process_cannot_read_the_guests_environ_or_fds() {
    let guest = Guest::start_with(true);
    // The test guest's environment holds the channel key; its fds hold the control socket.
    let pid = guest.pid();
    let script =
        format!("cat /proc/{pid}/environ && echo LEAKED; readlink /proc/{pid}/fd/0 && echo LEAKED");
    let mut req = request(&["sh", "-c", &script]);
    if is_root() {
        req.user = ExecUser::Root;
    }
    let out = guest.run_with(&req, None).unwrap();
    assert!(
        !out.stdout.contains("LEAKED"),
        "same-uid process read the guest's environ or fds: {out:?}"
    );
    assert!(!out.stdout.contains("AIRLOCK_TEST_GUEST_KEY"), "{out:?}");
    assert_ne!(out.status, ExitStatus::Code(0));
}

#[test]
fn concurrent_execs_are_served_independently() {
    let guest = Guest::start();
    // A blocks on stdin that never ends while B runs to completion.
    let blocked = guest.client().unwrap();
    let controller = blocked.controller();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let stdin: Box<dyn Read + Send> = Box::new(Blocking(rx));
        blocked.run(
            &request(&["cat"]),
            Some(stdin),
            &mut std::io::sink(),
            &mut std::io::sink(),
        )
    });
    let out = guest.sh("echo second");
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (ExitStatus::Code(0), "second\n")
    );
    controller.signal(libc::SIGKILL).unwrap();
    assert_eq!(
        waiter.join().unwrap().unwrap(),
        ExitStatus::Signal(libc::SIGKILL)
    );
    drop(tx);
}

/// A reader that blocks until its channel closes.
struct Blocking(std::sync::mpsc::Receiver<()>);

impl Read for Blocking {
    fn read(&mut self, _buf: &mut [u8]) -> std::io::Result<usize> {
        let _ = self.0.recv();
        Ok(0)
    }
}

#[test]
fn working_directory_is_honoured_and_a_missing_one_is_a_typed_error() {
    let guest = Guest::start();
    let mut req = request(&["pwd"]);
    req.cwd = Some("/tmp".into());
    let out = guest.run_with(&req, None).unwrap();
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (ExitStatus::Code(0), "/tmp\n")
    );
    req.cwd = Some("/nonexistent/airlock-cwd".into());
    match guest.run_with(&req, None) {
        Err(ClientError::Remote(err)) => {
            assert_eq!(err.code, ErrorCode::SpawnFailed);
            assert!(err.message.contains("chdir"), "{}", err.message);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_command_whose_stdin_is_closed_at_once_costs_the_guest_no_stdin_thread() {
    let guest = Guest::start();
    let threads = || {
        std::fs::read_dir(format!("/proc/{}/task", guest.pid()))
            .unwrap()
            .count()
    };
    let mut during = None;
    let client = airlock_protocol::ExecClient::request(
        guest.stream(),
        &guest.key,
        &request(&["sh", "-c", "echo up; sleep 1"]),
        None,
    )
    .unwrap();
    let mut out = Trigger {
        seen: Vec::new(),
        needle: b"up",
        hook: Some(|| during = Some(threads())),
    };
    let status = client.finish(&mut out, &mut std::io::sink()).unwrap();
    assert_eq!(status, ExitStatus::Code(0));
    let during = during.expect("the command printed");
    // While it ran: the stream's thread and its output thread, no stdin writer. Both end
    // soon after the status went out.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while threads() > during - 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(threads(), during - 2, "threads while it ran: {during}");
}

#[test]
fn stdin_bytes_still_reach_a_command_whose_writer_starts_late() {
    let guest = Guest::start();
    let out = guest
        .run_with(
            &request(&["sh", "-c", "sleep 0.2; cat"]),
            Some(b"late input"),
        )
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0));
    assert_eq!(out.stdout, "late input");
}

/// Whether process `pid` exists and has not exited (a zombie has).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// `exec -- sh -c 'cmd &'`: the command's background processes outlive it. The guest learns of
/// the exit from the process's pidfd before its reaper runs, so the host can close the stream
/// while the leader is still unreaped; that close must not hang up the group of a process that
/// already ended (it did, in about one run in several under load). Repeated, since the window
/// is a race.
#[test]
fn background_processes_outlive_a_command_whose_stream_closes_right_after_its_exit() {
    let guest = Guest::start();
    let mut started = Vec::new();
    let mut killed = Vec::new();
    for _ in 0..60 {
        let out = guest.sh("sleep 300 >/dev/null 2>&1 & echo $!");
        assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
        started.push(out.stdout.trim().parse::<i32>().unwrap());
    }
    // Give a hang-up sent at the stream's close time to land.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for &pid in &started {
        if !alive(pid) {
            killed.push(pid);
        }
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    assert!(
        killed.is_empty(),
        "{} of {} background processes were killed when their command's stream closed",
        killed.len(),
        started.len()
    );
}
