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
//!   closed; a full channel (`EAGAIN`: the proxy is not reading) waits for it to drain.
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
    /// Accepted; `full`: the last send met a full channel, wait until it is writable.
    Open { stream: UnixStream, full: bool },
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
    /// `pending` is full), then the channel when it is opening (`IN`) or full (`OUT`).
    pub(crate) fn wants(&self) -> Vec<(BorrowedFd<'_>, PollFlags)> {
        let accept = if self.pending.len() < MAX_PENDING {
            PollFlags::IN
        } else {
            PollFlags::empty()
        };
        let mut out = vec![(self.listener.as_fd(), accept)];
        match &self.channel {
            Channel::Opening { stream, .. } => out.push((stream.as_fd(), PollFlags::IN)),
            Channel::Open { stream, full: true } => out.push((stream.as_fd(), PollFlags::OUT)),
            Channel::Open { full: false, .. } | Channel::Closed | Channel::Refused => {}
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
            Channel::Open { stream, .. } => {
                self.channel = Channel::Open {
                    stream,
                    full: false,
                }
            }
            other => self.channel = other,
        }
    }

    /// No proxy to hand the pending connections to: close them (fail closed).
    fn unreachable(&mut self) {
        self.channel = Channel::Closed;
        self.pending.clear();
    }

    /// Hands over (or byte-relays) what is pending, as far as the channel allows.
    fn flush(&mut self) {
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

    /// The next handed-over connection on `channel` (waits for it).
    fn next_connection(channel: &UnixStream) -> Option<TcpStream> {
        loop {
            match handoff::recv_connection(channel.as_fd()) {
                Ok(Received::Connection(fd)) => return Some(TcpStream::from(fd)),
                Ok(Received::Closed) => return None,
                Err(e) if e.would_block() => thread::sleep(Duration::from_millis(2)),
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

    #[test]
    fn the_proxy_gets_the_client_socket_itself_and_pid1_keeps_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let channel = accept_channel(&host);
        let mut served = next_connection(&channel).unwrap();
        // The proxy's end is the accepted TCP socket of the sandbox's listener.
        assert_eq!(served.local_addr().unwrap().port(), port);
        client.write_all(b"ping").unwrap();
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

    #[test]
    fn connections_share_one_channel_and_a_broken_one_is_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let _a = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let _b = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let channel = accept_channel(&host);
        assert!(next_connection(&channel).is_some());
        assert!(next_connection(&channel).is_some());
        // The proxy goes away; its successor listens on the same path.
        drop(channel);
        drop(host);
        std::fs::remove_file(&socket).unwrap();
        let host = UnixListener::bind(&socket).unwrap();
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let channel = accept_channel(&host);
        let mut served = next_connection(&channel).unwrap();
        c.write_all(b"x").unwrap();
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
        let first = TcpStream::connect((Ipv4Addr::LOCALHOST, handoff_port)).unwrap();
        let second = TcpStream::connect((Ipv4Addr::LOCALHOST, handoff_port)).unwrap();

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
        let mut served: Vec<TcpStream> =
            (0..2).map(|_| next_connection(&channel).unwrap()).collect();
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
