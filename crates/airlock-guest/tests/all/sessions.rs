//! Persistent sessions (PRODUCT S1): owned by the guest, outliving every client, redrawn on
//! attach, several clients with the smallest window winning, exit status kept until removal.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use airlock_protocol::session::EnsureRequest;
use airlock_protocol::{
    host_handshake, read_packet, write_packet, AttachEnd, AttachRequest, DetachKey, Message,
    Opened, Packet, SessionClient, SessionClientError, SessionCommand, SessionController,
    SessionErrorCode, SessionInfo, SessionMessage, SessionSpec, SessionState, VersionRange,
    WindowSize,
};

use crate::fixture::Guest;

const LIMIT: Duration = Duration::from_secs(10);

fn size(rows: u16, cols: u16) -> WindowSize {
    WindowSize { rows, cols }
}

fn spec(argv: &[&str]) -> SessionSpec {
    SessionSpec {
        command: SessionCommand::Argv {
            argv: argv.iter().map(|s| s.to_string()).collect(),
        },
        env: BTreeMap::from([("PS1".to_string(), "$ ".to_string())]),
        cwd: Some("/".into()),
        term: "xterm-256color".into(),
    }
}

fn session_client(guest: &Guest) -> SessionClient {
    SessionClient::connect(guest.stream(), &guest.key).unwrap()
}

fn list(guest: &Guest) -> Vec<SessionInfo> {
    session_client(guest).list().unwrap()
}

fn info(guest: &Guest, name: &str) -> Option<SessionInfo> {
    list(guest).into_iter().find(|s| s.name == name)
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < LIMIT {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Collects what a client receives.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<Vec<u8>>>);

impl Output {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, needle: &str) -> bool {
        wait_until(|| self.text().contains(needle))
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An attached client running on its own thread; keys go in through a socket pair.
struct Client {
    keys: UnixStream,
    output: Output,
    opened: Opened,
    controller: SessionController,
    run: JoinHandle<Result<AttachEnd, SessionClientError>>,
}

impl Client {
    fn attach(guest: &Guest, name: &str, create: Option<SessionSpec>, window: WindowSize) -> Self {
        let attached = session_client(guest)
            .attach(AttachRequest {
                name: name.into(),
                size: window,
                create,
            })
            .unwrap();
        let (keys, input) = UnixStream::pair().unwrap();
        let output = Output::default();
        let mut sink = output.clone();
        let opened = attached.opened().clone();
        let controller = attached.controller();
        let run =
            thread::spawn(move || attached.run(Box::new(input), &mut sink, DetachKey::default()));
        Client {
            keys,
            output,
            opened,
            controller,
            run,
        }
    }

    fn type_keys(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
    }

    fn end(self) -> AttachEnd {
        let end = self.run.join().unwrap().unwrap();
        drop(self.keys);
        end
    }
}

/// Attaches at the protocol level and vanishes without a word, as a SIGKILLed client does.
fn attach_and_vanish(guest: &Guest, name: &str) {
    let mut stream = guest.stream();
    host_handshake(&mut stream, &guest.key, VersionRange::CURRENT).unwrap();
    let attach = SessionMessage::Attach(AttachRequest {
        name: name.into(),
        size: size(24, 80),
        create: None,
    });
    write_packet(&mut stream, &Packet::Control(Message::Session(attach))).unwrap();
    let opened = read_packet(&mut stream).unwrap().unwrap();
    assert!(matches!(
        opened,
        Packet::Control(Message::Session(SessionMessage::Opened(_)))
    ));
    drop(stream);
}

#[test]
fn a_session_outlives_a_vanished_client_and_reattaching_redraws_its_screen() {
    let guest = Guest::start();
    let mut first = Client::attach(&guest, "main", Some(spec(&["sh"])), size(24, 80));
    assert!(first.opened.created);
    first.type_keys("echo marker-$((6*7))\r");
    assert!(
        first.output.wait_for("marker-42"),
        "{}",
        first.output.text()
    );
    // The client disappears without detaching (its stream just closes).
    drop(first.keys);
    let _ = first.run.join();
    attach_and_vanish(&guest, "main");
    assert!(wait_until(|| info(&guest, "main").is_some_and(|s| s.state
        == SessionState::Running
        && s.clients == 0)));

    let mut again = Client::attach(&guest, "main", None, size(24, 80));
    assert!(!again.opened.created);
    // The redraw alone (no key typed) shows the earlier output.
    assert!(
        again.output.wait_for("marker-42"),
        "{}",
        again.output.text()
    );
    again.type_keys("\x1d");
    assert_eq!(again.end(), AttachEnd::Detached);
}

#[test]
fn the_detach_key_leaves_the_session_running_and_is_not_typed_into_it() {
    let guest = Guest::start();
    let mut client = Client::attach(&guest, "main", Some(spec(&["cat", "-v"])), size(24, 80));
    client.type_keys("before\x1dafter\r");
    assert_eq!(client.end(), AttachEnd::Detached);
    let session = info(&guest, "main").unwrap();
    assert_eq!((session.state, session.clients), (SessionState::Running, 0));
    let mut again = Client::attach(&guest, "main", None, size(24, 80));
    again.type_keys("\r");
    assert!(again.output.wait_for("before"));
    again.type_keys("\x1d");
    let output = again.output.clone();
    again.end();
    let shown = output.text();
    assert!(
        !shown.contains("after") && !shown.contains("^]"),
        "{shown:?}"
    );
}

#[test]
fn the_exit_status_is_kept_until_the_session_is_removed() {
    let guest = Guest::start();
    let opened = session_client(&guest)
        .ensure(EnsureRequest {
            name: "job".into(),
            size: size(24, 80),
            spec: spec(&["sh", "-c", "echo last words; exit 7"]),
        })
        .unwrap();
    assert!(opened.created);
    let exited = SessionState::Exited { code: 7 };
    assert!(wait_until(
        || info(&guest, "job").is_some_and(|s| s.state == exited)
    ));
    // Attaching shows the last screen, then the end.
    let client = Client::attach(&guest, "job", None, size(24, 80));
    let end = client.run.join().unwrap().unwrap();
    assert!(
        matches!(end, AttachEnd::Ended(ref s) if s.state == exited),
        "{end:?}"
    );
    assert!(client.output.text().contains("last words"));
    assert_eq!(info(&guest, "job").unwrap().state, exited);
    let removed = session_client(&guest).kill("job").unwrap();
    assert_eq!(removed.state, exited);
    assert_eq!(info(&guest, "job"), None);
}

#[test]
fn an_attached_client_is_told_when_the_session_ends() {
    let guest = Guest::start();
    let mut client = Client::attach(&guest, "main", Some(spec(&["sh"])), size(24, 80));
    client.type_keys("exit 3\r");
    let end = client.end();
    assert!(
        matches!(end, AttachEnd::Ended(ref s) if s.state == SessionState::Exited { code: 3 }),
        "{end:?}"
    );
}

#[test]
fn the_smallest_attached_window_wins_and_detaching_it_restores_the_larger() {
    let guest = Guest::start();
    let mut big = Client::attach(&guest, "main", Some(spec(&["sh"])), size(40, 120));
    let mut small = Client::attach(&guest, "main", None, size(20, 100));
    small.controller.resize(size(30, 60)).unwrap();
    let wanted = size(30, 60);
    assert!(wait_until(
        || info(&guest, "main").is_some_and(|s| s.size == wanted && s.clients == 2)
    ));
    big.type_keys("stty size\r");
    // Both clients see what one typed.
    assert!(big.output.wait_for("30 60"), "{}", big.output.text());
    assert!(small.output.wait_for("30 60"), "{}", small.output.text());
    small.type_keys("\x1d");
    small.end();
    assert!(wait_until(
        || info(&guest, "main").is_some_and(|s| s.size == size(40, 120))
    ));
    big.type_keys("stty size\r");
    assert!(big.output.wait_for("40 120"), "{}", big.output.text());
    big.type_keys("\x1d");
    big.end();
}

#[test]
fn ensure_keeps_a_running_session_and_replaces_an_exited_one() {
    let guest = Guest::start();
    let ensure = |argv: &[&str]| {
        session_client(&guest)
            .ensure(EnsureRequest {
                name: "main".into(),
                size: size(24, 80),
                spec: spec(argv),
            })
            .unwrap()
    };
    let first = ensure(&["sh", "-c", "read line; exit 4"]);
    let second = ensure(&["sh", "-c", "exit 0"]);
    assert!(first.created && !second.created);
    assert_eq!(first.session.pid, second.session.pid);
    let mut client = Client::attach(&guest, "main", None, size(24, 80));
    client.type_keys("\r");
    client.end();
    let third = ensure(&["sleep", "60"]);
    assert!(third.created);
    assert_eq!(third.replaced, Some(SessionState::Exited { code: 4 }));
    assert_eq!(third.session.command, ["sleep", "60"]);
}

#[test]
fn kill_ends_a_session_that_ignores_hangup() {
    let guest = Guest::start();
    session_client(&guest)
        .ensure(EnsureRequest {
            name: "stubborn".into(),
            size: size(24, 80),
            spec: spec(&[
                "sh",
                "-c",
                "trap '' HUP; echo ready; while :; do sleep 1; done",
            ]),
        })
        .unwrap();
    // Only once the trap is set: a hangup before it would end the shell at once.
    let mut watcher = Client::attach(&guest, "stubborn", None, size(24, 80));
    assert!(watcher.output.wait_for("ready"));
    watcher.type_keys("\x1d");
    watcher.end();
    let final_state = session_client(&guest).kill("stubborn").unwrap().state;
    assert_eq!(final_state, SessionState::Signaled { signal: 9 });
    assert_eq!(list(&guest), Vec::new());
}

/// The refusal's code; anything else fails the test.
fn refusal<T: std::fmt::Debug>(result: Result<T, SessionClientError>) -> SessionErrorCode {
    match result {
        Err(SessionClientError::Refused(r)) => r.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn requests_for_missing_sessions_or_commands_are_refused_typed() {
    let guest = Guest::start();
    let attach = session_client(&guest).attach(AttachRequest {
        name: "nope".into(),
        size: size(24, 80),
        create: None,
    });
    assert_eq!(refusal(attach), SessionErrorCode::NoSuchSession);
    let kill = session_client(&guest).kill("nope");
    assert_eq!(refusal(kill), SessionErrorCode::NoSuchSession);
    let missing = session_client(&guest).ensure(EnsureRequest {
        name: "x".into(),
        size: size(24, 80),
        spec: spec(&["/nonexistent/agent"]),
    });
    assert_eq!(refusal(missing), SessionErrorCode::CommandNotFound);
    assert_eq!(list(&guest), Vec::new());
}

#[test]
fn a_version_1_peer_cannot_send_session_requests() {
    let guest = Guest::start();
    let mut stream = guest.stream();
    let v1 = VersionRange { min: 1, max: 1 };
    assert_eq!(host_handshake(&mut stream, &guest.key, v1).unwrap(), 1);
    let list = Packet::Control(Message::Session(SessionMessage::List));
    write_packet(&mut stream, &list).unwrap();
    match read_packet(&mut stream).unwrap() {
        Some(Packet::Control(Message::Error(err))) => {
            assert_eq!(err.code, airlock_protocol::ErrorCode::UnexpectedMessage)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_detach_key_works_while_the_session_does_not_read_its_input() {
    let guest = Guest::start();
    let stalled = spec(&["sh", "-c", "stty raw -echo; echo stalled; exec sleep 60"]);
    let client = Client::attach(&guest, "main", Some(stalled), size(24, 80));
    assert!(client.output.wait_for("stalled"));
    // Far more than the PTY and every queue on the way hold: the pipeline to the session stalls.
    let flood = "x".repeat(4 << 20);
    let keys = client.keys.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let mut keys = keys;
        let _ = keys.write_all(flood.as_bytes());
        let _ = keys.write_all(b"\x1d");
    });
    let (done, ended) = std::sync::mpsc::channel();
    let run = client.run;
    thread::spawn(move || done.send(run.join().unwrap()));
    let end = ended
        .recv_timeout(Duration::from_secs(30))
        .expect("ctrl-] did not detach while the session's input was stalled");
    assert_eq!(end.unwrap(), AttachEnd::Detached);
    let _ = writer.join();
    assert_eq!(info(&guest, "main").unwrap().state, SessionState::Running);
}

#[test]
fn a_client_that_stops_reading_is_cut_off_and_the_session_goes_on_for_the_others() {
    let guest = Guest::start();
    let chatty = spec(&[
        "sh",
        "-c",
        "while :; do echo 0123456789abcdefghijklmnopqrstuvwxyz; done",
    ]);
    let reader = Client::attach(&guest, "main", Some(chatty), size(24, 80));
    // A client that attaches and then never reads a byte.
    let mut stuck = guest.stream();
    host_handshake(&mut stuck, &guest.key, VersionRange::CURRENT).unwrap();
    let attach = SessionMessage::Attach(AttachRequest {
        name: "main".into(),
        size: size(24, 80),
        create: None,
    });
    write_packet(&mut stuck, &Packet::Control(Message::Session(attach))).unwrap();
    assert!(wait_until(
        || info(&guest, "main").is_some_and(|s| s.clients == 2)
    ));
    // Cut off once it held the output back too long (5 s) or a write to it blocked (10 s).
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if info(&guest, "main").is_some_and(|s| s.clients == 1) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        info(&guest, "main").unwrap().clients,
        1,
        "the stuck client is still attached"
    );
    // The reading client still gets fresh output.
    let before = reader.output.0.lock().unwrap().len();
    assert!(wait_until(
        || reader.output.0.lock().unwrap().len() > before + 4096
    ));
    drop(stuck);
}
