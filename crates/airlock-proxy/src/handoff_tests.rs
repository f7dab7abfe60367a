//! Handed-over connections: the same policy, secrets and audit as any client; only a trusted
//! peer's channel is accepted; every descriptor that is not a loopback TCP connection is
//! closed; the number served at once is bounded.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use airlock_config::policy::{Action, HostPattern, Policy, Rule, RuleOrigin};
use airlock_config::raw::Preset;
use airlock_protocol::handoff::{send_connection, send_listener, ACCEPTED, HELLO};
use airlock_secrets::SecretBindings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use super::{admit, admit_listener, AdmitError, MAX_HANDED_OVER};
use crate::server::{Proxy, ProxyConfig, ProxyHandle, ProxyListener};

const ALLOWED: &str = "allowed.handoff.test";
const DENIED: &str = "denied.handoff.test";

/// A proxy on a Unix socket in a fresh directory, allowing `ALLOWED:port`, with the handoff
/// peer check off when `trust_any` (the test process is no sandbox's PID 1).
async fn start(port: u16, trust_any: bool) -> (tempfile::TempDir, ProxyHandle) {
    start_allowing(&format!("{ALLOWED}:{port}"), trust_any).await
}

/// [`start`] with one allow rule for `pattern`.
async fn start_allowing(pattern: &str, trust_any: bool) -> (tempfile::TempDir, ProxyHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let rule = Rule {
        action: Action::Allow,
        pattern: HostPattern::parse(pattern).unwrap(),
        origin: RuleOrigin::User,
    };
    let loopback = "127.0.0.1".parse().unwrap();
    let cfg = ProxyConfig {
        policy: Policy::new(Preset::None, vec![rule]),
        hosts: BTreeMap::from([
            (ALLOWED.to_owned(), loopback),
            (DENIED.to_owned(), loopback),
        ]),
        extra_roots: Vec::new(),
        bindings: SecretBindings::empty(),
        audit_path: tmp.path().join("audit.jsonl"),
        audit_rotation: crate::audit::Rotation::default(),
        ca_dir: tmp.path().join("ca"),
    };
    let listener = UnixListener::bind(tmp.path().join("proxy.sock")).unwrap();
    let proxy = Proxy::start(cfg, ProxyListener::Unix(listener)).unwrap();
    if trust_any {
        proxy.trust_any_handoff_peer();
    }
    (tmp, proxy)
}

/// An HTTP server on loopback answering every request with `upstream says hi`.
async fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = "upstream says hi";
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

/// Opens a handoff channel as PID 1 does; `None` when the proxy closed it instead of answering.
async fn channel(dir: &Path) -> Option<UnixStream> {
    let mut s = UnixStream::connect(dir.join("proxy.sock")).await.unwrap();
    s.write_all(HELLO).await.unwrap();
    let mut answer = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut answer)).await {
        Ok(Ok(1)) if answer[0] == ACCEPTED => Some(s),
        _ => None,
    }
}

/// A loopback TCP connection: (the sandbox process's end, the accepted end to hand over).
async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    (client, accepted)
}

/// Hands `accepted` over on `channel` and closes our copy, as PID 1 does.
async fn hand_over(channel: &UnixStream, accepted: TcpStream) {
    channel.writable().await.unwrap();
    send_connection(channel.as_fd(), accepted.as_fd()).unwrap();
    drop(accepted);
}

async fn request(client: &mut TcpStream, host: &str, port: u16) -> String {
    let head = format!(
        "GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
    );
    client.write_all(head.as_bytes()).await.unwrap();
    let mut got = String::new();
    tokio::time::timeout(Duration::from_secs(10), client.read_to_string(&mut got))
        .await
        .expect("no answer")
        .unwrap();
    got
}

async fn audit_text(proxy: ProxyHandle, dir: &Path) -> String {
    proxy.shutdown().await;
    std::fs::read_to_string(dir.join("audit.jsonl")).unwrap_or_default()
}

#[tokio::test]
async fn a_handed_over_connection_is_decided_by_the_policy_and_audited() {
    let port = upstream().await;
    let (tmp, proxy) = start(port, true).await;
    let channel = channel(tmp.path()).await.expect("channel refused");
    let (mut allowed, accepted) = tcp_pair().await;
    hand_over(&channel, accepted).await;
    let (mut denied, accepted) = tcp_pair().await;
    hand_over(&channel, accepted).await;
    let ok = request(&mut allowed, ALLOWED, port).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.ends_with("upstream says hi"), "{ok}");
    let refused = request(&mut denied, DENIED, port).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("x-airlock-policy"),
        "{refused}"
    );
    let audit = audit_text(proxy, tmp.path()).await;
    assert!(audit.contains(ALLOWED) && audit.contains(DENIED), "{audit}");
}

/// PID 1's listener handed over: the proxy accepts from it and serves every connection like
/// a handed-over one (policy, audit), and keeps taking handed-over connections too.
#[tokio::test]
async fn connections_on_a_handed_over_listener_are_decided_by_the_policy_and_audited() {
    let port = upstream().await;
    let (tmp, proxy) = start(port, true).await;
    let channel = channel(tmp.path()).await.expect("channel refused");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let at = listener.local_addr().unwrap();
    channel.writable().await.unwrap();
    send_listener(channel.as_fd(), listener.as_fd()).unwrap();
    for _ in 0..3 {
        let mut allowed = TcpStream::connect(at).await.unwrap();
        let ok = request(&mut allowed, ALLOWED, port).await;
        assert!(ok.ends_with("upstream says hi"), "{ok}");
    }
    let mut denied = TcpStream::connect(at).await.unwrap();
    let refused = request(&mut denied, DENIED, port).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let (mut handed, accepted) = tcp_pair().await;
    hand_over(&channel, accepted).await;
    let ok = request(&mut handed, ALLOWED, port).await;
    assert!(ok.ends_with("upstream says hi"), "{ok}");
    let audit = audit_text(proxy, tmp.path()).await;
    let host = format!("\"host\":\"{ALLOWED}\"");
    assert_eq!(audit.matches(&host).count(), 4, "{audit}");
    assert!(audit.contains(DENIED), "{audit}");
}

#[tokio::test]
async fn a_handed_over_listener_that_is_not_a_loopback_tcp_listener_is_refused() {
    let refused = |fd: OwnedFd| match admit_listener(fd) {
        Ok(_) => panic!("admitted"),
        Err(e) => e,
    };
    let (pipe_r, _pipe_w) = rustix::pipe::pipe().unwrap();
    assert!(matches!(refused(pipe_r), AdmitError::NotASocket(_)));
    let unix =
        std::os::unix::net::UnixListener::bind(tempfile::tempdir().unwrap().path().join("l.sock"))
            .unwrap();
    assert!(matches!(refused(unix.into()), AdmitError::NotTcp { .. }));
    let (_client, accepted) = tcp_pair().await;
    let connected: OwnedFd = accepted.into_std().unwrap().into();
    assert!(matches!(refused(connected), AdmitError::NotListening));
    let any = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    assert!(matches!(
        refused(any.into()),
        AdmitError::NotLoopback { .. }
    ));
    let ok = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    assert!(admit_listener(ok.into()).is_ok());
}

/// Whether this process may set the congestion control `name` on a socket of its own.
fn settable_congestion(name: &str) -> bool {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    rustix::net::sockopt::set_tcp_congestion(&probe, name).is_ok()
}

#[tokio::test]
async fn connections_from_a_handed_over_listener_use_a_loss_based_congestion_control() {
    // What the proxy can choose here (an unprivileged user may be limited to Reno), and
    // another control to start from (as a pacing system default such as BBR would be).
    let Some(expected) = super::LOOPBACK_CONGESTION
        .into_iter()
        .find(|c| settable_congestion(c))
    else {
        // Nothing to choose from: the system default stays.
        airlock_testkit::host_lacks("a settable cubic or reno congestion control");
        return;
    };
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default();
    let Some(other) = available
        .split_whitespace()
        .find(|c| *c != expected && settable_congestion(c))
    else {
        // Only one control to be had: nothing to tell apart.
        airlock_testkit::host_lacks("a second settable TCP congestion control");
        return;
    };
    let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    rustix::net::sockopt::set_tcp_congestion(&std, other).unwrap();
    let addr = std.local_addr().unwrap();
    let listener = admit_listener(std.into()).unwrap();
    let _client = TcpStream::connect(addr).await.unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    assert_eq!(
        rustix::net::sockopt::tcp_congestion(&accepted).unwrap(),
        expected
    );
}

#[tokio::test]
async fn a_channel_from_a_peer_that_is_not_the_sandbox_init_is_refused_and_its_descriptors_unserved(
) {
    let port = upstream().await;
    let (tmp, proxy) = start(port, false).await;
    // Asking for a channel as this (non-init) process: closed without an answer.
    assert!(channel(tmp.path()).await.is_none());
    // Sending a descriptor right after the hello without waiting: never served either.
    let s = UnixStream::connect(tmp.path().join("proxy.sock"))
        .await
        .unwrap();
    let (mut client, accepted) = tcp_pair().await;
    let mut raw = s.into_std().unwrap();
    raw.set_nonblocking(false).unwrap();
    std::io::Write::write_all(&mut raw, HELLO).unwrap();
    send_connection(raw.as_fd(), accepted.as_fd()).unwrap();
    drop(accepted);
    client
        .write_all(
            format!("GET http://{ALLOWED}:{port}/ HTTP/1.1\r\nHost: {ALLOWED}:{port}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut got)).await;
    // Closed (EOF, or a reset since our request was never read), not left hanging.
    assert!(read.is_ok(), "the refused connection stays open");
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    drop(raw);
    let audit = audit_text(proxy, tmp.path()).await;
    assert!(audit.is_empty(), "{audit}");
}

#[tokio::test]
async fn descriptors_a_plain_client_sends_are_dropped_unserved() {
    let port = upstream().await;
    let (tmp, proxy) = start(port, false).await;
    let s = UnixStream::connect(tmp.path().join("proxy.sock"))
        .await
        .unwrap();
    let mut raw = s.into_std().unwrap();
    raw.set_nonblocking(false).unwrap();
    // A plain client (first byte not NUL) with a descriptor riding along its request.
    std::io::Write::write_all(
        &mut raw,
        format!("GET http://{ALLOWED}:{port}/ HTTP/1.1\r\n").as_bytes(),
    )
    .unwrap();
    let (mut client, accepted) = tcp_pair().await;
    send_connection(raw.as_fd(), accepted.as_fd()).unwrap();
    drop(accepted);
    raw.shutdown(std::net::Shutdown::Write).unwrap();
    // The descriptor was never installed in the proxy, let alone served: with our copy gone,
    // its peer sees the end of the stream at once.
    let mut rest = Vec::new();
    let eof = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest)).await;
    assert!(
        matches!(eof, Ok(Ok(0))),
        "the passed socket is still open: {eof:?}"
    );
    drop(raw);
    let audit = audit_text(proxy, tmp.path()).await;
    assert!(!audit.contains("\"status\":200"), "{audit}");
}

fn refusal(fd: OwnedFd) -> AdmitError {
    match admit(fd, &Arc::new(AtomicUsize::new(0))) {
        Ok(_) => panic!("admitted"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn descriptors_that_are_not_connected_loopback_tcp_sockets_are_refused() {
    let (pipe_r, _pipe_w) = rustix::pipe::pipe().unwrap();
    assert!(matches!(refusal(pipe_r), AdmitError::NotASocket(_)));
    let file = std::fs::File::open("/proc/self/status").unwrap();
    assert!(matches!(refusal(file.into()), AdmitError::NotASocket(_)));
    let (unix, _other) = std::os::unix::net::UnixStream::pair().unwrap();
    assert!(matches!(refusal(unix.into()), AdmitError::NotTcp { .. }));
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect("127.0.0.1:9").unwrap();
    assert!(matches!(refusal(udp.into()), AdmitError::NotTcp { .. }));
    let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    assert!(matches!(refusal(listening.into()), AdmitError::Listening));
    let unconnected = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    assert!(matches!(
        refusal(unconnected),
        AdmitError::NotLoopback { .. }
    ));
    let (_client, accepted) = tcp_pair().await;
    let fd: OwnedFd = accepted.into_std().unwrap().into();
    assert!(admit(fd, &Arc::new(AtomicUsize::new(0))).is_ok());
}

#[tokio::test]
async fn handed_over_connections_beyond_the_bound_are_closed_until_one_ends() {
    // All places but one taken (as by MAX_HANDED_OVER - 1 connections being served, without
    // holding that many descriptors in the test).
    let open = Arc::new(AtomicUsize::new(MAX_HANDED_OVER - 1));
    let (_a, accepted) = tcp_pair().await;
    let last = admit(accepted.into_std().unwrap().into(), &open).unwrap();
    let (mut over_client, accepted) = tcp_pair().await;
    let over = admit(accepted.into_std().unwrap().into(), &open);
    assert!(matches!(over, Err(AdmitError::TooMany)));
    assert_eq!(open.load(Ordering::SeqCst), MAX_HANDED_OVER);
    // The refused one is closed: its peer sees the end of the stream.
    let mut rest = Vec::new();
    let eof = tokio::time::timeout(Duration::from_secs(10), over_client.read_to_end(&mut rest));
    assert!(matches!(eof.await, Ok(Ok(0))));
    drop(last);
    assert_eq!(open.load(Ordering::SeqCst), MAX_HANDED_OVER - 1);
    let (_d, accepted) = tcp_pair().await;
    assert!(admit(accepted.into_std().unwrap().into(), &open).is_ok());
}

#[tokio::test]
async fn many_concurrent_handed_over_connections_are_all_served() {
    let port = upstream().await;
    let (tmp, proxy) = start(port, true).await;
    let channel = channel(tmp.path()).await.expect("channel refused");
    let mut clients = Vec::new();
    for _ in 0..200 {
        let (client, accepted) = tcp_pair().await;
        hand_over(&channel, accepted).await;
        clients.push(client);
    }
    let mut tasks = Vec::new();
    for mut client in clients {
        tasks.push(tokio::spawn(async move {
            request(&mut client, ALLOWED, port).await
        }));
    }
    for task in tasks {
        let got = task.await.unwrap();
        assert!(got.ends_with("upstream says hi"), "{got}");
    }
    proxy.shutdown().await;
}

/// Deterministic bytes that differ at every offset modulo a prime, so a lost, repeated or
/// reordered chunk shows.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// A raw TCP upstream: reads everything the client sends until its half-close, checks it is
/// `expect_up`, then sends `down` and closes.
async fn bulk_upstream(expect_up: Vec<u8>, down: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert!(
            got == expect_up,
            "the upstream got {} bytes, not the ones sent",
            got.len()
        );
        s.write_all(&down).await.unwrap();
        s.shutdown().await.unwrap();
    });
    port
}

/// The first audit line of `method`, waiting for it to be written (a tunnel's line is written
/// once both directions ended, which may be just after the client saw the end).
async fn audit_line(dir: &Path, method: &str) -> crate::audit::AuditEntry {
    for _ in 0..500 {
        let text = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<crate::audit::AuditEntry>(l).ok())
            .find(|e| e.method == method);
        if let Some(entry) = found {
            return entry;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no {method} line in the audit log");
}

#[tokio::test]
async fn a_large_tunnel_through_a_handed_over_connection_is_byte_exact_half_closes_and_is_audited_to_the_byte(
) {
    const UP: usize = 3 << 20;
    const DOWN: usize = 24 << 20;
    let (up, down) = (pattern(UP, 0x5a), pattern(DOWN, 0xa5));
    let port = bulk_upstream(up.clone(), down.clone()).await;
    let (tmp, proxy) = start_allowing(&format!("127.0.0.1:{port}"), true).await;
    let channel = channel(tmp.path()).await.expect("channel refused");
    let (client, accepted) = tcp_pair().await;
    hand_over(&channel, accepted).await;
    let (mut rd, mut wr) = client.into_split();
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    wr.write_all(connect.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(
            rd.read(&mut byte).await.unwrap(),
            1,
            "closed before the answer"
        );
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // The upstream answers only after the client's half-close reached it through the tunnel.
    let writer = tokio::spawn(async move {
        wr.write_all(&up).await.unwrap();
        wr.shutdown().await.unwrap();
        wr
    });
    let mut got = Vec::with_capacity(DOWN);
    tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut got))
        .await
        .expect("the download did not end")
        .unwrap();
    let _wr = writer.await.unwrap();
    assert_eq!(got.len(), DOWN);
    assert!(
        got == down,
        "the downloaded bytes differ from the upstream's"
    );
    let entry = audit_line(tmp.path(), "CONNECT").await;
    assert_eq!((entry.bytes_up, entry.bytes_down), (UP as u64, DOWN as u64));
    assert_eq!(entry.status, 200);
    proxy.shutdown().await;
}
