//! Connections the sandbox's PID 1 hands over (`airlock_protocol::handoff`): the proxy serves
//! the sandbox process's TCP socket itself, so no byte is copied through PID 1.
//!
//! A Unix connection whose first byte is NUL asks to be a *handoff channel*; any other is a
//! plain proxy client (as before: a sandbox process may talk to the socket directly, under the
//! same policy). A channel is accepted only when
//! - it begins with the exact `HELLO` within the header read timeout, and
//! - its peer (`SO_PERCRED`, then `/proc/<pid>/status`) is the init process of a PID
//!   namespace one level below the proxy's: the sandbox's PID 1. No other sandbox process can
//!   be that (a PID namespace made inside the sandbox is two levels down), and only PID 1
//!   sends descriptors it accepted itself from its own listener and then closed, so the proxy
//!   holds the only reference to each one: nobody inside can flip its flags (e.g. clear
//!   `O_NONBLOCK` to block the proxy's one thread), set options on it or read from it.
//!
//! Even so every received descriptor is hostile input ([`admit`]): it must be a connected
//! (not listening) TCP stream socket with loopback addresses at both ends, checked with
//! `getsockopt`/`getsockname`, which touch no file (a FUSE file or a FIFO would never reach a
//! `read`). Anything else is closed.
//!
//! Once PID 1 has nothing else to send it hands over its listener (`127.0.0.1:3128` in the
//! sandbox's network namespace) and the proxy accepts the sandbox's connections itself while
//! the channel is open: no wake-up of PID 1 and no descriptor passing per connection. The
//! listener must be a listening TCP socket bound to a loopback address ([`admit_listener`]),
//! one per channel. Nothing new becomes reachable by it: every connection on it comes from the
//! sandbox's loopback-only namespace and is served exactly as a handed-over one (same bound,
//! same setup, [`admit_accepted`]), so policy stays the only way out (N1, I9). PID 1 keeps its
//! copy of the listener (it accepts again when the channel closes), so the listener's flags
//! are PID 1's as well as ours — the same trust the proxy already puts in PID 1's handed-over
//! connections; every connection accepted from it is a new socket only the proxy holds. The
//! socket is then made non-blocking, `TCP_NODELAY`, its `SO_LINGER` switched off (a close
//! never waits) and given a congestion control that does not pace ([`LOOPBACK_CONGESTION`], set
//! on the listener so accepted sockets inherit it), and served exactly like any client: the
//! same policy snapshot per request, audit, substitution, interception. At most
//! [`MAX_HANDED_OVER`] handed-over connections are served at once (the bound PID 1 used to
//! enforce on its relay threads); beyond that new ones are closed until one ends.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use airlock_protocol::handoff::{self, Received, ACCEPTED, HELLO};
use rustix::net::{AddressFamily, SocketType};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;

use crate::shared::Shared;

/// Handed-over connections served at once.
pub const MAX_HANDED_OVER: usize = 512;

/// How a fresh Unix connection wants to be served.
pub(crate) enum Kind {
    /// A plain proxy client (nothing was consumed).
    Client,
    /// A handoff channel, accepted and answered.
    Channel,
    /// Neither: drop it.
    Refused,
}

/// Peeks at the first byte of `stream` and, for a handoff request, reads the hello, checks the
/// peer and answers.
pub(crate) async fn classify(stream: &mut UnixStream, shared: &Shared) -> Kind {
    let first = tokio::time::timeout(crate::shared::HEADER_READ_TIMEOUT, peek_first(stream)).await;
    match first {
        Ok(Ok(Some(0))) => {}
        Ok(Ok(Some(_))) => return Kind::Client,
        Ok(Ok(None) | Err(_)) | Err(_) => return Kind::Refused,
    }
    let mut hello = [0u8; HELLO.len()];
    let read = tokio::time::timeout(
        crate::shared::HEADER_READ_TIMEOUT,
        stream.read_exact(&mut hello),
    )
    .await;
    if !matches!(read, Ok(Ok(_))) || hello != HELLO || !shared.trusts_handoff_peer(stream) {
        tracing::warn!("refused a handoff channel that is not from the sandbox's PID 1");
        return Kind::Refused;
    }
    match stream.write_all(&[ACCEPTED]).await {
        Ok(()) => Kind::Channel,
        Err(_) => Kind::Refused,
    }
}

async fn peek_first(stream: &UnixStream) -> io::Result<Option<u8>> {
    let mut byte = [0u8; 1];
    let n = stream
        .async_io(Interest::READABLE, || {
            rustix::net::recv(
                stream,
                &mut byte,
                rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
            )
            .map(|(n, _)| n)
            .map_err(io::Error::from)
        })
        .await?;
    Ok((n == 1).then_some(byte[0]))
}

/// What arrived on an accepted channel.
pub(crate) enum Handed {
    /// One connection PID 1 accepted.
    Connection(OwnedFd),
    /// PID 1's listening socket: accept the sandbox's connections from it while the channel
    /// is open.
    Listener(OwnedFd),
}

/// The next descriptor on an accepted channel; `None` when the channel closed or broke.
pub(crate) async fn next(channel: &UnixStream) -> Option<Handed> {
    let got = channel
        .async_io(Interest::READABLE, || {
            match handoff::recv_connection(channel.as_fd()) {
                Err(e) if e.would_block() => Err(io::ErrorKind::WouldBlock.into()),
                other => Ok(other),
            }
        })
        .await;
    match got {
        Ok(Ok(Received::Connection(fd))) => Some(Handed::Connection(fd)),
        Ok(Ok(Received::Listener(fd))) => Some(Handed::Listener(fd)),
        Ok(Ok(Received::Closed)) => None,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "handoff channel closed");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "handoff channel broke");
            None
        }
    }
}

/// Whether the peer of `stream` is the init process of a PID namespace directly below ours.
pub(crate) fn peer_is_sandbox_init(stream: &UnixStream) -> bool {
    let Ok(cred) = rustix::net::sockopt::socket_peercred(stream) else {
        return false;
    };
    // Hold the process while reading its status, so a reused pid cannot answer for it.
    let Ok(pidfd) = rustix::process::pidfd_open(cred.pid, rustix::process::PidfdFlags::empty())
    else {
        return false;
    };
    let (Some(ours), Some(theirs)) = (
        nspid("/proc/self/status".as_ref()),
        nspid(format!("/proc/{}/status", cred.pid.as_raw_nonzero()).as_ref()),
    ) else {
        return false;
    };
    let init_one_level_down = theirs.len() == ours.len() + 1 && theirs.last() == Some(&1);
    init_one_level_down && still_running(&pidfd)
}

/// The `NSpid` line of a status file: the pid in each namespace, outermost first.
fn nspid(path: &std::path::Path) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().map(|f| f.parse().ok()).collect()
}

fn still_running(pidfd: &OwnedFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        pidfd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
}

/// Why a handed-over descriptor was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// It is not a socket (or its kind cannot be read).
    #[error("the handed-over descriptor is not a socket: {0}")]
    NotASocket(io::Error),
    /// A socket of another kind than a TCP stream.
    #[error("the handed-over socket is not a TCP stream ({what})")]
    NotTcp {
        /// What it is instead.
        what: String,
    },
    /// A listening socket where a connection was expected.
    #[error("the handed-over socket is a listening socket")]
    Listening,
    /// Not a listening socket where one was expected.
    #[error("the handed-over listener is not a listening socket")]
    NotListening,
    /// A second listener on one channel.
    #[error("a handoff channel handed over a second listener")]
    SecondListener,
    /// Not connected, or an address is not loopback.
    #[error("the handed-over socket is not a loopback connection ({what})")]
    NotLoopback {
        /// Its addresses, or why they cannot be read.
        what: String,
    },
    /// All handed-over connections allowed at once are open.
    #[error("{MAX_HANDED_OVER} handed-over connections are open already")]
    TooMany,
    /// It could not be set up for serving.
    #[error("cannot set up the handed-over socket: {0}")]
    Setup(io::Error),
}

/// One handed-over connection being served; dropping it frees its place.
pub(crate) struct Admitted {
    pub(crate) stream: tokio::net::TcpStream,
    pub(crate) _slot: Slot,
}

/// A place among the [`MAX_HANDED_OVER`]; freed on drop.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Checks a handed-over descriptor (see the module docs) and takes one of the `open` places.
/// Must be called inside the tokio runtime.
pub(crate) fn admit(fd: OwnedFd, open: &Arc<AtomicUsize>) -> Result<Admitted, AdmitError> {
    check_tcp(&fd)?;
    if rustix::net::sockopt::socket_acceptconn(&fd).map_err(|e| AdmitError::NotASocket(e.into()))? {
        return Err(AdmitError::Listening);
    }
    let local = loopback(rustix::net::getsockname(&fd).ok());
    let peer = loopback(rustix::net::getpeername(&fd).ok().flatten());
    if local.is_none() || peer.is_none() {
        return Err(AdmitError::NotLoopback {
            what: format!("local {local:?}, peer {peer:?}"),
        });
    }
    let slot = take_slot(open)?;
    set_up(&fd)?;
    loopback_congestion(&fd);
    let std = std::net::TcpStream::from(fd);
    std.set_nonblocking(true).map_err(AdmitError::Setup)?;
    let stream = tokio::net::TcpStream::from_std(std).map_err(AdmitError::Setup)?;
    Ok(Admitted {
        stream,
        _slot: slot,
    })
}

/// Checks a handed-over listening socket: a TCP listener bound to a loopback address (PID 1's
/// `127.0.0.1:3128`). Must be called inside the tokio runtime.
///
/// Every connection accepted from it is a new socket only the proxy holds (PID 1 keeps a copy
/// of the listener, never of what the proxy accepts), made by the kernel from this listener:
/// a connected TCP stream whose local end is the listener's loopback address;
/// [`admit_accepted`] checks its peer and sets it up like a handed-over connection.
pub(crate) fn admit_listener(fd: OwnedFd) -> Result<tokio::net::TcpListener, AdmitError> {
    check_tcp(&fd)?;
    if !rustix::net::sockopt::socket_acceptconn(&fd)
        .map_err(|e| AdmitError::NotASocket(e.into()))?
    {
        return Err(AdmitError::NotListening);
    }
    let Some(_) = loopback(rustix::net::getsockname(&fd).ok()) else {
        return Err(AdmitError::NotLoopback {
            what: "the listener is not bound to a loopback address".to_owned(),
        });
    };
    // Every connection accepted from it inherits this (a socket option the listener keeps).
    loopback_congestion(&fd);
    let std = std::net::TcpListener::from(fd);
    std.set_nonblocking(true).map_err(AdmitError::Setup)?;
    tokio::net::TcpListener::from_std(std).map_err(AdmitError::Setup)
}

/// Congestion controls for the sandbox's loopback leg, preferred first: loss-based ones that
/// send as fast as the receiver takes. The system default may pace (BBR does, with a timer per
/// burst, even on loopback, where no queue is there to avoid): on this leg pacing only costs
/// CPU and throughput (B5: a loopback transfer with BBR ran at about half the rate of CUBIC or
/// Reno). Only this leg, which never leaves the machine; upstream connections keep the system's
/// choice.
pub(crate) const LOOPBACK_CONGESTION: [&str; 2] = ["cubic", "reno"];

/// Sets the first available of [`LOOPBACK_CONGESTION`] on a sandbox-side socket; without
/// either (or without the right to choose) the system default stays, which is only slower.
fn loopback_congestion(fd: impl AsFd) {
    for name in LOOPBACK_CONGESTION {
        if rustix::net::sockopt::set_tcp_congestion(&fd, name).is_ok() {
            return;
        }
    }
}

/// Takes a connection accepted from an admitted listener (its peer, from `accept`, must be
/// loopback) and one of the `open` places.
pub(crate) fn admit_accepted(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    open: &Arc<AtomicUsize>,
) -> Result<Admitted, AdmitError> {
    if !peer.ip().is_loopback() {
        return Err(AdmitError::NotLoopback {
            what: format!("peer {peer}"),
        });
    }
    let slot = take_slot(open)?;
    // Options are inherited from the listener, which PID 1 holds too: set them anyway.
    set_up(&stream)?;
    Ok(Admitted {
        stream,
        _slot: slot,
    })
}

fn take_slot(open: &Arc<AtomicUsize>) -> Result<Slot, AdmitError> {
    if open.fetch_add(1, Ordering::SeqCst) >= MAX_HANDED_OVER {
        open.fetch_sub(1, Ordering::SeqCst);
        return Err(AdmitError::TooMany);
    }
    Ok(Slot(open.clone()))
}

/// No lingering close, `TCP_NODELAY`.
fn set_up(fd: impl AsFd) -> Result<(), AdmitError> {
    rustix::net::sockopt::set_socket_linger(&fd, None).map_err(setup)?;
    rustix::net::sockopt::set_tcp_nodelay(&fd, true).map_err(setup)
}

fn setup(e: rustix::io::Errno) -> AdmitError {
    AdmitError::Setup(e.into())
}

fn loopback(addr: Option<rustix::net::SocketAddrAny>) -> Option<std::net::SocketAddr> {
    addr.and_then(|a| std::net::SocketAddr::try_from(a).ok())
        .filter(|a| a.ip().is_loopback())
}

/// That `fd` is a TCP socket; only `getsockopt`.
fn check_tcp(fd: &OwnedFd) -> Result<(), AdmitError> {
    let kind =
        rustix::net::sockopt::socket_type(fd).map_err(|e| AdmitError::NotASocket(e.into()))?;
    let family =
        rustix::net::sockopt::socket_domain(fd).map_err(|e| AdmitError::NotASocket(e.into()))?;
    let protocol =
        rustix::net::sockopt::socket_protocol(fd).map_err(|e| AdmitError::NotASocket(e.into()))?;
    let inet = family == AddressFamily::INET || family == AddressFamily::INET6;
    if kind != SocketType::STREAM || !inet || protocol != Some(rustix::net::ipproto::TCP) {
        return Err(AdmitError::NotTcp {
            what: format!("{family:?} {kind:?} {protocol:?}"),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod tests;
