//! The in-sandbox side of the egress path (PRODUCT N1, N10): loopback listeners whose
//! connections go to host sockets.
//!
//! The sandbox's network namespace has loopback only (I9). PID 1 binds `127.0.0.1:PORT` for
//! every [`Relay`] *before* it serves a single exec stream, so no sandbox process can take the
//! port first. The listeners are non-blocking and polled by PID 1's one event loop
//! ([`Relays`]): an idle PID 1 holds no thread for them. Then, per listener:
//! - **handoff** (the egress proxy, [`Relay::handoff`]): each accepted connection is passed to
//!   the proxy over one long-lived *handoff channel* to its socket (`SCM_RIGHTS`,
//!   `airlock_protocol::handoff`, driven without blocking by [`crate::handoff`]) and PID 1
//!   closes its copy at once: the proxy reads and writes the sandbox process's TCP socket
//!   itself, and PID 1 copies no byte and holds no thread per connection. A broken channel (the proxy restarted) is reopened once per connection; a
//!   proxy that refuses the channel gets the connection's bytes relayed instead (below);
//! - **byte relay** (host ports, N10, and a refused handoff): each connection is copied both
//!   ways to a fresh connection to the host socket, on its own threads.
//!
//! Invariants:
//! - fail closed: when the host socket cannot be reached the client connection is closed at
//!   once, nothing else is tried (there is nothing else to reach);
//! - bounded: at most [`MAX_CONNECTIONS`] byte-relayed connections per listener at a time
//!   (beyond that new connections are closed until one ends); handed-over connections are
//!   bounded by the proxy, which holds them;
//! - the relay never interprets a byte: policy is the host side's business.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rustix::event::PollFlags;

/// Concurrent relayed connections per listener.
pub const MAX_CONNECTIONS: usize = 512;

/// How long a connection to a handoff listener may stay silent before it is accepted anyway
/// (`TCP_DEFER_ACCEPT`); then the proxy's header read timeout applies as to any client.
const HANDOFF_DEFER_ACCEPT_SECS: u32 = 5;

/// One loopback port relayed to a host socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// Port on `127.0.0.1` inside the sandbox.
    pub port: u16,
    /// The socket's path inside the sandbox.
    pub socket: PathBuf,
    /// Hand each connection over to the socket's server (the egress proxy) instead of relaying
    /// its bytes.
    pub handoff: bool,
}

/// Why a relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The loopback port cannot be bound.
    #[error("cannot listen on 127.0.0.1:{port} inside the sandbox: {source}")]
    Bind {
        /// The port.
        port: u16,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Binds every listener (non-blocking); PID 1's event loop then serves them through the
/// returned [`Relays`].
pub fn start(relays: &[Relay]) -> Result<Relays, RelayError> {
    let mut entries = Vec::with_capacity(relays.len());
    for relay in relays {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, relay.port));
        let bind_error = |source| RelayError::Bind {
            port: relay.port,
            source,
        };
        let listener = TcpListener::bind(addr).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        if relay.handoff {
            // The egress proxy's clients speak first (a request or `CONNECT`): whoever accepts
            // (PID 1, or the proxy once it holds the listener) is woken once per connection,
            // with its first bytes already there, not once for the handshake and again for
            // the bytes (B5). Only an optimisation: without it nothing changes but that.
            let _ = airlock_linux::sys::net::set_tcp_defer_accept(
                listener.as_fd(),
                HANDOFF_DEFER_ACCEPT_SECS,
            );
        }
        let socket = relay.socket.clone();
        entries.push(if relay.handoff {
            Entry::Handoff(crate::handoff::HandoffRelay::new(listener, socket))
        } else {
            Entry::Bytes {
                listener,
                socket,
                active: Arc::new(AtomicUsize::new(0)),
            }
        });
    }
    Ok(Relays { entries })
}

/// The bound relay listeners, served by the caller's event loop: poll what
/// [`wants`](Relays::wants) returns, then pass the results to [`handle`](Relays::handle).
pub struct Relays {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Relays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relays")
            .field("listeners", &self.entries.len())
            .finish()
    }
}

enum Entry {
    Handoff(crate::handoff::HandoffRelay),
    Bytes {
        listener: TcpListener,
        socket: PathBuf,
        active: Arc<AtomicUsize>,
    },
}

impl Entry {
    fn wants(&self) -> Vec<(BorrowedFd<'_>, PollFlags)> {
        match self {
            Entry::Handoff(h) => h.wants(),
            Entry::Bytes { listener, .. } => vec![(listener.as_fd(), PollFlags::IN)],
        }
    }
}

impl Relays {
    /// What to poll, per listener (each inner list in order).
    pub fn wants(&self) -> Vec<Vec<(BorrowedFd<'_>, PollFlags)>> {
        self.entries.iter().map(Entry::wants).collect()
    }

    /// The longest the caller may wait before calling [`handle`](Relays::handle) again (a
    /// handoff channel's answer has a deadline).
    pub fn timeout(&self) -> Option<Duration> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Handoff(h) => h.timeout(),
                Entry::Bytes { .. } => None,
            })
            .min()
    }

    /// Acts on `revents`: the poll results of everything [`wants`](Relays::wants) returned,
    /// flattened in order, and `counts` the length of each inner list.
    pub fn handle(&mut self, counts: &[usize], revents: &[PollFlags]) {
        let mut at = 0;
        for (entry, &n) in self.entries.iter_mut().zip(counts) {
            let mine = revents.get(at..at + n).unwrap_or_default();
            at += n;
            match entry {
                Entry::Handoff(h) => h.handle(mine),
                Entry::Bytes {
                    listener,
                    socket,
                    active,
                } => {
                    if mine.iter().any(|r| !r.is_empty()) {
                        accept_all(listener, socket, active);
                    }
                }
            }
        }
    }

    /// Serves the relays alone, forever (tests: PID 1 runs them in its own loop).
    #[cfg(test)]
    pub(crate) fn serve_in_background(mut self) {
        thread::spawn(move || loop {
            let wants = self.wants();
            let counts: Vec<usize> = wants.iter().map(Vec::len).collect();
            let mut fds: Vec<rustix::event::PollFd<'_>> = wants
                .iter()
                .flatten()
                .map(|(fd, flags)| rustix::event::PollFd::new(fd, *flags))
                .collect();
            let timeout = self.timeout().map(|t| rustix::event::Timespec {
                tv_sec: t.as_secs() as i64,
                tv_nsec: i64::from(t.subsec_nanos()),
            });
            let _ = rustix::event::poll(&mut fds, timeout.as_ref());
            let revents: Vec<PollFlags> = fds.iter().map(|f| f.revents()).collect();
            drop(fds);
            drop(wants);
            self.handle(&counts, &revents);
        });
    }
}

/// Byte-relays every connection waiting on `listener`.
fn accept_all(listener: &TcpListener, socket: &Path, active: &Arc<AtomicUsize>) {
    loop {
        match listener.accept() {
            Ok((client, _)) => byte_relay(client, socket, active),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Nothing more waiting, or e.g. out of descriptors: the next poll retries.
            Err(_) => return,
        }
    }
}

/// Relays `client` to a fresh connection to `socket` on its own thread, at most
/// [`MAX_CONNECTIONS`] at a time (counted in `active`); beyond that `client` is closed.
pub(crate) fn byte_relay(client: TcpStream, socket: &Path, active: &Arc<AtomicUsize>) {
    if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        active.fetch_sub(1, Ordering::SeqCst);
        drop(client);
        return;
    }
    let socket = socket.to_path_buf();
    let counter = Arc::clone(active);
    // Threads count against the sandbox's pids limit: when none can be made (a fork bomb
    // inside), this connection is dropped and the listener keeps serving.
    let spawned = thread::Builder::new().spawn(move || {
        relay_one(client, &socket);
        counter.fetch_sub(1, Ordering::SeqCst);
    });
    if spawned.is_err() {
        active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Relays one connection both ways until both directions are closed. A host socket that cannot
/// be reached closes the client (fail closed).
fn relay_one(client: TcpStream, socket: &Path) {
    let Ok(host) = UnixStream::connect(socket) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    join(client, host);
}

/// Copies between a TCP connection and a Unix stream, both ways, until both directions are
/// closed (also used by port forwarding, `crate::forward`).
pub(crate) fn join(client: TcpStream, host: UnixStream) {
    let _ = client.set_nodelay(true);
    let (Ok(client_rd), Ok(host_wr)) = (client.try_clone(), host.try_clone()) else {
        return;
    };
    let Ok(upstream) = thread::Builder::new().spawn(move || copy_then_close(client_rd, host_wr))
    else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    copy_then_close(host, client);
    let _ = upstream.join();
}

/// Copies until EOF or an error, then closes the writing direction (half-close keeps the other
/// direction flowing) and, on error, the reading one too.
fn copy_then_close<R, W>(mut from: R, mut to: W)
where
    R: io::Read + Closable,
    W: io::Write + Closable,
{
    let failed = io::copy(&mut from, &mut to).is_err();
    to.close(Shutdown::Write);
    if failed {
        from.close(Shutdown::Both);
        to.close(Shutdown::Both);
    }
}

/// A socket that can be shut down in one direction.
trait Closable {
    fn close(&self, how: Shutdown);
}

impl Closable for TcpStream {
    fn close(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
}

impl Closable for UnixStream {
    fn close(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    fn free_port() -> u16 {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn relays_bytes_both_ways_to_the_host_socket() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = free_port();
        start(&[Relay {
            port,
            socket,
            handoff: false,
        }])
        .unwrap()
        .serve_in_background();
        let echo = thread::spawn(move || {
            let (mut conn, _) = host.accept().unwrap();
            let mut buf = Vec::new();
            conn.read_to_end(&mut buf).unwrap();
            conn.write_all(&buf).unwrap();
            conn.write_all(b" back").unwrap();
        });
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        client.write_all(b"hello").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        echo.join().unwrap();
        assert_eq!(got, "hello back");
    }

    #[test]
    fn a_handoff_listener_is_readable_only_once_a_client_sent_its_first_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let relays = start(&[Relay {
            port,
            socket: dir.path().join("proxy.sock"),
            handoff: true,
        }])
        .unwrap();
        let wants = relays.wants();
        let (listener, _) = wants[0][0];
        let readable = |ms: i64| {
            let mut fds = [rustix::event::PollFd::new(&listener, PollFlags::IN)];
            let timeout = rustix::event::Timespec {
                tv_sec: ms / 1000,
                tv_nsec: (ms % 1000) * 1_000_000,
            };
            rustix::event::poll(&mut fds, Some(&timeout)).unwrap() == 1
        };
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        assert!(
            !readable(200),
            "a connection without bytes is not yet acceptable"
        );
        client.write_all(b"CONNECT").unwrap();
        assert!(readable(10_000), "its first bytes make it acceptable");
    }

    #[test]
    fn a_missing_host_socket_closes_the_client_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        start(&[Relay {
            port,
            socket: dir.path().join("absent.sock"),
            handoff: false,
        }])
        .unwrap()
        .serve_in_background();
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = client.write_all(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n");
        let mut buf = [0u8; 16];
        let n = client.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "the relay answered without a host socket");
    }

    #[test]
    fn a_taken_port_refuses_to_start() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = start(&[Relay {
            port,
            socket: PathBuf::from("/nonexistent"),
            handoff: true,
        }])
        .unwrap_err();
        assert!(err.to_string().contains(&port.to_string()));
    }
}
