//! The handoff side of a relay (see [`crate::relay`]): each accepted connection goes to the
//! host's egress proxy as a descriptor over one long-lived channel
//! (`airlock_protocol::handoff`), and PID 1 keeps no copy.
//!
//! Everything is non-blocking and driven by PID 1's one event loop (no thread per listener:
//! an idle PID 1 is one thread). [`HandoffRelay`] is a small state machine:
//! - the listener is polled for connections; each accepted one waits in `pending` (at most
//!   [`MAX_PENDING`]; beyond that the kernel's backlog holds the rest) until a channel is open;
//! - with connections pending and no channel, PID 1 connects to the proxy's socket and writes
//!   `HELLO` (*opening*); the proxy's `+` makes the channel *open*. On a persistent sandbox
//!   this connection is also what makes the keeper start the proxy (socket activation): the
//!   answer then comes once the proxy runs, so an opening channel may wait up to
//!   [`ANSWER_TIMEOUT`];
//! - on an open channel each pending connection is sent (one `C` with one descriptor) and
//!   closed; a full channel (`EAGAIN`: the proxy is not reading) waits for it to drain;
//! - once nothing is pending, the listener itself is sent (one `L`, PID 1 keeps its copy) and
//!   PID 1 stops polling it: the proxy accepts the sandbox's connections itself, with no wake-up
//!   of PID 1 and no descriptor passing per connection. The proxy never writes on the channel,
//!   so the channel becoming readable means it closed (the proxy exited or dropped it): PID 1
//!   then polls the listener again and hands the next connection over on a new channel.
//!
//! Failure handling, as before: a channel that breaks (the proxy exited) is reopened once for
//! the connection at hand, which is closed when that fails too; no socket, no answer in time,
//! or a broken opening closes every pending connection (fail closed). When the proxy refuses
//! the channel (it could not check that PID 1 is its peer, e.g. `/proc` hides other processes),
//! every pending and later connection of this listener is byte-relayed instead
//! ([`crate::relay::byte_relay`]): slower, with the same policy.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_protocol::handoff::{self, ACCEPTED, HELLO};
use rustix::event::PollFlags;

/// How long PID 1 waits for the proxy to answer a new channel (a proxy started on demand
/// answers within milliseconds; its start is bounded by its owner's own timeout).
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepted connections waiting for a channel, per listener.
pub(crate) const MAX_PENDING: usize = 512;

/// One handoff listener and its channel; see the module docs.
pub(crate) struct HandoffRelay {
    listener: TcpListener,
    socket: PathBuf,
    channel: Channel,
    pending: VecDeque<Waiting>,
    /// Byte-relayed connections (after a refusal).
    relayed: Arc<AtomicUsize>,
}

/// An accepted connection not handed over yet.
struct Waiting {
    client: TcpStream,
    /// A send of it failed once already (a broken channel).
    retried: bool,
}

enum Channel {
    /// None open.
    Closed,
    /// `HELLO` written, waiting for the answer until `deadline`.
    Opening {
        stream: UnixStream,
        deadline: Instant,
    },
    /// Accepted; `full`: the last send met a full channel, wait until it is writable;
    /// `listening`: the proxy has the listener (PID 1 does not accept).
    Open {
        stream: UnixStream,
        full: bool,
        listening: bool,
    },
    /// The proxy does not take handoffs from us: byte-relay instead.
    Refused,
}

impl HandoffRelay {
    /// `listener` must be non-blocking.
    pub(crate) fn new(listener: TcpListener, socket: PathBuf) -> HandoffRelay {
        HandoffRelay {
            listener,
            socket,
            channel: Channel::Closed,
            pending: VecDeque::new(),
            relayed: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The descriptors to poll and for what: the listener first (`IN`, or nothing while
    /// `pending` is full or the proxy has the listener), then the channel when it is opening
    /// (`IN`), full (`OUT`) or holds the listener (`IN`: it closed).
    pub(crate) fn wants(&self) -> Vec<(BorrowedFd<'_>, PollFlags)> {
        let proxy_accepts = matches!(
            self.channel,
            Channel::Open {
                listening: true,
                ..
            }
        );
        let accept = if self.pending.len() < MAX_PENDING && !proxy_accepts {
            PollFlags::IN
        } else {
            PollFlags::empty()
        };
        let mut out = vec![(self.listener.as_fd(), accept)];
        match &self.channel {
            Channel::Opening { stream, .. } => out.push((stream.as_fd(), PollFlags::IN)),
            Channel::Open {
                stream, full: true, ..
            } => out.push((stream.as_fd(), PollFlags::OUT)),
            Channel::Open {
                stream,
                listening: true,
                ..
            } => out.push((stream.as_fd(), PollFlags::IN)),
            Channel::Open { .. } | Channel::Closed | Channel::Refused => {}
        }
        out
    }

    /// How long until an opening channel times out.
    pub(crate) fn timeout(&self) -> Option<Duration> {
        match &self.channel {
            Channel::Opening { deadline, .. } => {
                Some(deadline.saturating_duration_since(Instant::now()))
            }
            _ => None,
        }
    }

    /// Acts on the poll results for what [`wants`](Self::wants) returned (same order), and
    /// on an expired opening.
    pub(crate) fn handle(&mut self, revents: &[PollFlags]) {
        let channel_ready = revents.get(1).is_some_and(|r| !r.is_empty());
        if channel_ready {
            self.channel_event();
        }
        if let Channel::Opening { deadline, .. } = &self.channel {
            if Instant::now() >= *deadline {
                self.unreachable();
            }
        }
        if revents.first().is_some_and(|r| !r.is_empty()) {
            self.accept_all();
        }
        self.flush();
    }

    fn accept_all(&mut self) {
        while self.pending.len() < MAX_PENDING {
            match self.listener.accept() {
                Ok((client, _)) => self.pending.push_back(Waiting {
                    client,
                    retried: false,
                }),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Nothing more waiting, or e.g. out of descriptors: the next poll retries.
                Err(_) => return,
            }
        }
    }

    /// The opening channel answered, or the full one drained.
    fn channel_event(&mut self) {
        match std::mem::replace(&mut self.channel, Channel::Closed) {
            Channel::Opening {
                mut stream,
                deadline,
            } => {
                let mut answer = [0u8; 1];
                self.channel = match stream.read(&mut answer) {
                    Ok(1) if answer[0] == ACCEPTED => Channel::Open {
                        stream,
                        full: false,
                        listening: false,
                    },
                    // Closed without accepting (or answered something else): this proxy does
                    // not take handoffs from us.
                    Ok(_) => Channel::Refused,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        Channel::Opening { stream, deadline }
                    }
                    Err(_) => {
                        self.unreachable();
                        Channel::Closed
                    }
                };
            }
            Channel::Open {
                stream,
                listening: true,
                ..
            } => {
                // The proxy never writes: readable means closed (or a protocol breach, which
                // ends the channel just as well). Dropping it makes PID 1 accept again.
                let mut byte = [0u8; 1];
                match (&stream).read(&mut byte) {
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        self.channel = Channel::Open {
                            stream,
                            full: false,
                            listening: true,
                        };
                    }
                    _ => self.drop_backlog(),
                }
            }
            Channel::Open {
                stream, listening, ..
            } => {
                self.channel = Channel::Open {
                    stream,
                    full: false,
                    listening,
                }
            }
            other => self.channel = other,
        }
    }

    /// The proxy that had the listener went away: the connections left in its backlog were
    /// queued for that proxy and are closed, as those sent on a channel it never read are.
    /// (Served instead, one of them would start a proxy for a client that may be long gone.)
    fn drop_backlog(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// No proxy to hand the pending connections to: close them (fail closed).
    fn unreachable(&mut self) {
        self.channel = Channel::Closed;
        self.pending.clear();
    }

    /// Hands over (or byte-relays) what is pending, as far as the channel allows; then, on an
    /// open channel, the listener.
    fn flush(&mut self) {
        self.flush_pending();
        if !self.pending.is_empty() {
            return;
        }
        let Channel::Open {
            stream,
            full: full @ false,
            listening: listening @ false,
        } = &mut self.channel
        else {
            return;
        };
        match handoff::send_listener(stream.as_fd(), self.listener.as_fd()) {
            Ok(()) => *listening = true,
            Err(e) if e.would_block() => *full = true,
            // A broken channel: the next connection opens a new one.
            Err(_) => self.channel = Channel::Closed,
        }
    }

    fn flush_pending(&mut self) {
        while let Some(front) = self.pending.front_mut() {
            match &self.channel {
                Channel::Refused => {
                    for w in self.pending.drain(..) {
                        crate::relay::byte_relay(w.client, &self.socket, &self.relayed);
                    }
                    return;
                }
                Channel::Opening { .. } | Channel::Open { full: true, .. } => return,
                Channel::Closed => match open_channel(&self.socket) {
                    Ok(stream) => {
                        self.channel = Channel::Opening {
                            stream,
                            deadline: Instant::now() + ANSWER_TIMEOUT,
                        }
                    }
                    Err(_) => return self.unreachable(),
                },
                Channel::Open {
                    stream,
                    full: false,
                    ..
                } => {
                    match handoff::send_connection(stream.as_fd(), front.client.as_fd()) {
                        // Dropping it closes PID 1's copy: the proxy holds the only one.
                        Ok(()) => drop(self.pending.pop_front()),
                        Err(e) if e.would_block() => {
                            if let Channel::Open { full, .. } = &mut self.channel {
                                *full = true;
                            }
                        }
                        // A broken channel (e.g. EPIPE: the proxy exited): a new one is
                        // opened for this connection, once.
                        Err(_) => {
                            self.channel = Channel::Closed;
                            if front.retried {
                                drop(self.pending.pop_front());
                            } else {
                                front.retried = true;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Connects to the proxy's socket without waiting and asks for a handoff channel (the
/// answer is read by the event loop).
fn open_channel(socket: &Path) -> io::Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd: OwnedFd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    // A Unix stream connect completes at once (or fails: no socket, no listener, a full
    // backlog), it never is in progress.
    rustix::net::connect(&fd, &SocketAddrUnix::new(socket)?)?;
    let mut stream = UnixStream::from(fd);
    // A fresh socket's buffer takes the few bytes whole.
    match stream.write(HELLO)? {
        n if n == HELLO.len() => Ok(stream),
        _ => Err(io::Error::other("short write of the handoff hello")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::{start, Relay};
    use airlock_protocol::handoff::Received;
    use std::net::{Ipv4Addr, Shutdown};
    use std::os::unix::net::UnixListener;
    use std::thread;

    fn free_port() -> u16 {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Accepts one channel on `host` as the proxy would and returns it.
    fn accept_channel(host: &UnixListener) -> UnixStream {
        let (mut channel, _) = host.accept().unwrap();
        let mut hello = vec![0u8; HELLO.len()];
        channel.read_exact(&mut hello).unwrap();
        assert_eq!(hello, HELLO);
        channel.write_all(&[ACCEPTED]).unwrap();
        channel
    }

    /// The next connection the proxy gets (waits for it): handed over on `channel`, or, once
    /// the listener was handed over (kept in `listener`), accepted from that.
    fn next_connection(
        channel: &UnixStream,
        listener: &mut Option<TcpListener>,
    ) -> Option<TcpStream> {
        loop {
            match handoff::recv_connection(channel.as_fd()) {
                Ok(Received::Connection(fd)) => return Some(TcpStream::from(fd)),
                Ok(Received::Listener(fd)) => {
                    assert!(listener.is_none(), "a second listener");
                    *listener = Some(TcpListener::from(fd));
                }
                Ok(Received::Closed) => return None,
                Err(e) if e.would_block() => {
                    if let Some(l) = listener {
                        match l.accept() {
                            Ok((s, _)) => return Some(s),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    thread::sleep(Duration::from_millis(2))
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn start_handoff(socket: &Path) -> u16 {
        let port = free_port();
        start(&[Relay {
            port,
            socket: socket.to_path_buf(),
            handoff: true,
        }])
        .unwrap()
        .serve_in_background();
        port
    }

    /// A proxy client: connects and speaks first, as HTTP clients do (the handoff listener
    /// defers a connection until its first bytes, `TCP_DEFER_ACCEPT`).
    fn connect_and_send(port: u16, first: &[u8]) -> TcpStream {
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        client.write_all(first).unwrap();
        client
    }

    #[test]
    fn the_proxy_gets_the_client_socket_itself_and_pid1_keeps_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let mut client = connect_and_send(port, b"ping");
        let channel = accept_channel(&host);
        let mut served = next_connection(&channel, &mut None).unwrap();
        // The proxy's end is the accepted TCP socket of the sandbox's listener.
        assert_eq!(served.local_addr().unwrap().port(), port);
        let mut buf = [0u8; 4];
        served.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        served.write_all(b"pong").unwrap();
        // Closing the proxy's copy ends the connection: PID 1 kept none.
        drop(served);
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"pong");
    }

    /// Once nothing is pending PID 1 hands over its listener and stops accepting: later
    /// connections wait in the listener's backlog for the proxy (PID 1 taking one would leave
    /// this test's accept waiting). When that channel closes, PID 1 accepts again.
    #[test]
    fn the_proxy_accepts_from_the_handed_over_listener_until_its_channel_closes() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let _first = connect_and_send(port, b"C");
        let channel = accept_channel(&host);
        let Ok(Received::Connection(_)) = recv_blocking(&channel) else {
            panic!("the first connection was not handed over")
        };
        let Ok(Received::Listener(fd)) = recv_blocking(&channel) else {
            panic!("the listener was not handed over")
        };
        let listener = TcpListener::from(fd);
        assert_eq!(listener.local_addr().unwrap().port(), port);
        // (Its file description is PID 1's too: it stays non-blocking.)
        for _ in 0..3 {
            let client = connect_and_send(port, b"direct");
            let mut served = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(2))
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            served.set_nonblocking(false).unwrap();
            assert_eq!(served.peer_addr().unwrap(), client.local_addr().unwrap());
            let mut buf = [0u8; 6];
            served.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"direct");
        }
        // The proxy drops the channel (and its listener copy): PID 1 accepts again and opens a
        // new channel. (A connection made before PID 1 saw the channel close is closed with
        // the rest of the dead proxy's backlog, so connect until one gets through.)
        drop(listener);
        drop(channel);
        let (_clients, channel) = connect_until_a_channel_opens(&host, port);
        let Ok(Received::Connection(_)) = recv_blocking(&channel) else {
            panic!("PID 1 did not accept again")
        };
    }

    /// After the proxy with the listener went away: connects to `port` until PID 1 opens a new
    /// channel on `host` (connections made before PID 1 saw the old channel close are closed
    /// with that proxy's backlog); returns the clients and the accepted channel.
    fn connect_until_a_channel_opens(
        host: &UnixListener,
        port: u16,
    ) -> (Vec<TcpStream>, UnixStream) {
        host.set_nonblocking(true).unwrap();
        let mut clients = Vec::new();
        loop {
            clients.push(connect_and_send(port, b"x"));
            thread::sleep(Duration::from_millis(20));
            if let Ok((channel, _)) = host.accept() {
                channel.set_nonblocking(false).unwrap();
                host.set_nonblocking(false).unwrap();
                let mut hello = vec![0u8; HELLO.len()];
                (&channel).read_exact(&mut hello).unwrap();
                assert_eq!(hello, HELLO);
                (&channel).write_all(&[ACCEPTED]).unwrap();
                return (clients, channel);
            }
        }
    }

    fn recv_blocking(channel: &UnixStream) -> Result<Received, handoff::HandoffError> {
        loop {
            match handoff::recv_connection(channel.as_fd()) {
                Err(e) if e.would_block() => thread::sleep(Duration::from_millis(2)),
                other => return other,
            }
        }
    }

    #[test]
    fn connections_share_one_channel_and_a_broken_one_is_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let _a = connect_and_send(port, b"a");
        let _b = connect_and_send(port, b"b");
        let channel = accept_channel(&host);
        let mut listener = None;
        assert!(next_connection(&channel, &mut listener).is_some());
        assert!(next_connection(&channel, &mut listener).is_some());
        // The proxy goes away; its successor listens on the same path.
        drop(channel);
        drop(listener);
        drop(host);
        std::fs::remove_file(&socket).unwrap();
        let host = UnixListener::bind(&socket).unwrap();
        let (clients, channel) = connect_until_a_channel_opens(&host, port);
        let mut served = next_connection(&channel, &mut None).unwrap();
        let peer = served.peer_addr().unwrap();
        // Its first byte, sent when it connected.
        assert!(clients.iter().any(|c| c.local_addr().unwrap() == peer));
        let mut buf = [0u8; 1];
        served.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"x");
    }

    #[test]
    fn a_proxy_refusing_the_channel_gets_the_bytes_relayed_instead() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let echo = thread::spawn(move || {
            // Refuse the channel: read the hello, close without answering.
            let (mut channel, _) = host.accept().unwrap();
            let mut hello = vec![0u8; HELLO.len()];
            channel.read_exact(&mut hello).unwrap();
            drop(channel);
            // Then serve the byte relay's own connection.
            let (mut conn, _) = host.accept().unwrap();
            let mut buf = Vec::new();
            conn.read_to_end(&mut buf).unwrap();
            conn.write_all(&buf).unwrap();
        });
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        client.write_all(b"relayed").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        echo.join().unwrap();
        assert_eq!(got, "relayed");
    }

    #[test]
    fn no_proxy_socket_closes_the_client_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let port = start_handoff(&dir.path().join("absent.sock"));
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = client.write_all(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n");
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).unwrap_or(0), 0);
    }

    /// PID 1 serves every relay from one loop: a handoff channel whose proxy has not answered
    /// yet (a proxy being started on demand) must not hold up another listener, and the
    /// connections that waited meanwhile are all handed over once it answers.
    #[test]
    fn one_loop_serves_other_relays_while_a_channel_waits_for_a_proxy_started_late() {
        let dir = tempfile::tempdir().unwrap();
        let proxy_socket = dir.path().join("proxy.sock");
        // Bound but not accepting yet: the owner starts the proxy later.
        let host = UnixListener::bind(&proxy_socket).unwrap();
        let port_socket = dir.path().join("port.sock");
        let echo_host = UnixListener::bind(&port_socket).unwrap();
        let (handoff_port, bytes_port) = (free_port(), free_port());
        start(&[
            Relay {
                port: handoff_port,
                socket: proxy_socket,
                handoff: true,
            },
            Relay {
                port: bytes_port,
                socket: port_socket,
                handoff: false,
            },
        ])
        .unwrap()
        .serve_in_background();
        let first = connect_and_send(handoff_port, b"C");
        let second = connect_and_send(handoff_port, b"C");

        // Meanwhile the byte relay answers.
        let echo = thread::spawn(move || {
            let (mut conn, _) = echo_host.accept().unwrap();
            let mut buf = [0u8; 4];
            conn.read_exact(&mut buf).unwrap();
            conn.write_all(&buf).unwrap();
        });
        let mut other = TcpStream::connect((Ipv4Addr::LOCALHOST, bytes_port)).unwrap();
        other
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        other.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        other.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        echo.join().unwrap();

        // The proxy comes up: both waiting connections arrive over one channel, in order.
        let channel = accept_channel(&host);
        let mut listener = None;
        let mut served: Vec<TcpStream> = (0..2)
            .map(|_| next_connection(&channel, &mut listener).unwrap())
            .collect();
        let peers: Vec<_> = served.iter().map(|s| s.peer_addr().unwrap()).collect();
        assert_eq!(
            peers,
            vec![first.local_addr().unwrap(), second.local_addr().unwrap()]
        );
        served[0].write_all(b"ok").unwrap();
        let mut first = first;
        first
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut got = [0u8; 2];
        first.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ok");
    }
}
