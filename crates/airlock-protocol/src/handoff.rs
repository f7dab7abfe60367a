//! Handing accepted TCP connections from the guest's PID 1 to the host's egress proxy
//! (`SCM_RIGHTS` over the proxy's Unix socket), so that the proxy reads and writes the sandbox
//! process's socket itself and no byte is copied through PID 1.
//!
//! A *handoff channel* is one connection to the proxy's stream socket:
//! 1. PID 1 writes [`HELLO`]. Its first byte is NUL, which no HTTP request starts with, so the
//!    proxy tells a channel from a plain proxy client by one peeked byte;
//! 2. the proxy answers the single byte [`ACCEPTED`] when it trusts the peer (it checks that
//!    the peer is the init process of a sandbox's PID namespace), or closes the connection;
//! 3. PID 1 then sends one message per accepted connection: the byte `C` with exactly one
//!    descriptor attached ([`send_connection`]); and, once nothing it accepted is left to send,
//!    its listening socket itself: the byte `L` with that one descriptor ([`send_listener`]).
//!    From then on the proxy accepts the sandbox's connections itself, for as long as the
//!    channel is open, and PID 1 stops accepting (no hop through PID 1 per connection); when
//!    the channel closes, PID 1 accepts again. The proxy never writes anything else.
//!
//! The receiver ([`recv_connection`]) reads one byte per message, so the descriptors of two
//! messages never mix; a message with another tag or another number of descriptors is an
//! error (whatever arrived is closed). Received descriptors are close-on-exec.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// What PID 1 writes first on a handoff channel (protocol version 2: version 1 had no
/// [`send_listener`]).
pub const HELLO: &[u8] = b"\0airlock-handoff 2\n";

/// The proxy's one-byte answer to [`HELLO`] when it accepts the channel.
pub const ACCEPTED: u8 = b'+';

/// The byte that accompanies each handed-over connection.
const CONNECTION: u8 = b'C';

/// The byte that accompanies the handed-over listening socket.
const LISTENER: u8 = b'L';

/// Why a connection could not be handed over or received.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// A socket syscall failed (`EAGAIN` from [`recv_connection`]: nothing queued yet).
    #[error("{syscall} failed on the handoff channel: {source}")]
    Syscall {
        /// The syscall.
        syscall: &'static str,
        /// The OS error.
        source: Errno,
    },
    /// A message carried another number of descriptors than one.
    #[error("a handoff message carried {count} descriptors, expected exactly one")]
    DescriptorCount {
        /// How many arrived (all closed).
        count: usize,
    },
    /// A message carried another tag byte.
    #[error("a handoff message has the unknown tag {tag:#04x}")]
    UnknownTag {
        /// The byte.
        tag: u8,
    },
}

impl HandoffError {
    /// Whether this only means "nothing queued yet" (a non-blocking receive).
    pub fn would_block(&self) -> bool {
        matches!(self, HandoffError::Syscall { source, .. } if *source == Errno::AGAIN)
    }
}

/// What [`recv_connection`] got.
#[derive(Debug)]
pub enum Received {
    /// One handed-over descriptor (not checked here: the receiver must treat it as hostile).
    Connection(OwnedFd),
    /// The handed-over listening socket (not checked here either).
    Listener(OwnedFd),
    /// The sender closed the channel.
    Closed,
}

/// Sends `connection` over `channel` (one message, one descriptor). The caller may close its
/// own copy as soon as this returns. Never raises `SIGPIPE`.
pub fn send_connection(
    channel: BorrowedFd<'_>,
    connection: BorrowedFd<'_>,
) -> Result<(), HandoffError> {
    send(channel, CONNECTION, connection)
}

/// Sends the listening socket `listener` over `channel` (one message, one descriptor); the
/// caller keeps its own copy. Never raises `SIGPIPE`.
pub fn send_listener(
    channel: BorrowedFd<'_>,
    listener: BorrowedFd<'_>,
) -> Result<(), HandoffError> {
    send(channel, LISTENER, listener)
}

fn send(channel: BorrowedFd<'_>, tag: u8, fd: BorrowedFd<'_>) -> Result<(), HandoffError> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    let pushed = ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    debug_assert!(pushed, "buffer is sized for one descriptor");
    loop {
        match sendmsg(
            channel,
            &[IoSlice::new(&[tag])],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        ) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(source) => {
                return Err(HandoffError::Syscall {
                    syscall: "sendmsg",
                    source,
                })
            }
        }
    }
}

/// Receives the next handed-over descriptor from `channel` without waiting: when nothing is
/// queued it fails with `EAGAIN` ([`HandoffError::would_block`]).
pub fn recv_connection(channel: BorrowedFd<'_>) -> Result<Received, HandoffError> {
    loop {
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let received = match recvmsg(
            channel,
            &mut [IoSliceMut::new(&mut byte)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        ) {
            Ok(received) => received,
            Err(Errno::INTR) => continue,
            Err(source) => {
                return Err(HandoffError::Syscall {
                    syscall: "recvmsg",
                    source,
                })
            }
        };
        let mut fds: Vec<OwnedFd> = Vec::new();
        for message in ancillary.drain() {
            // Credentials are not requested; anything but descriptors is ignored.
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        if received.bytes == 0 && fds.is_empty() {
            return Ok(Received::Closed);
        }
        let wrap = match byte[0] {
            CONNECTION => Received::Connection,
            LISTENER => Received::Listener,
            tag => return Err(HandoffError::UnknownTag { tag }),
        };
        match fds.pop() {
            // Dropping `fds` closes whatever else arrived.
            Some(fd) if fds.is_empty() => return Ok(wrap(fd)),
            Some(_) => {
                return Err(HandoffError::DescriptorCount {
                    count: fds.len() + 1,
                })
            }
            None => return Err(HandoffError::DescriptorCount { count: 0 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_sent_descriptor_arrives_as_the_same_open_socket() {
        let (pid1, proxy) = UnixStream::pair().unwrap();
        let (mut conn, mut peer) = UnixStream::pair().unwrap();
        send_connection(pid1.as_fd(), conn.as_fd()).unwrap();
        drop(conn.shutdown(std::net::Shutdown::Write));
        let Received::Connection(fd) = recv_connection(proxy.as_fd()).unwrap() else {
            panic!("nothing received")
        };
        let mut got = UnixStream::from(fd);
        peer.write_all(b"hi").unwrap();
        let mut buf = [0u8; 2];
        got.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
        conn.flush().unwrap();
    }

    #[test]
    fn a_sent_listener_arrives_tagged_as_one() {
        let (pid1, proxy) = UnixStream::pair().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        send_listener(pid1.as_fd(), listener.as_fd()).unwrap();
        let Received::Listener(fd) = recv_connection(proxy.as_fd()).unwrap() else {
            panic!("not received as a listener")
        };
        let got = std::net::TcpListener::from(fd);
        assert_eq!(got.local_addr().unwrap(), listener.local_addr().unwrap());
    }

    #[test]
    fn nothing_queued_is_would_block_and_a_closed_channel_is_closed() {
        let (pid1, proxy) = UnixStream::pair().unwrap();
        let err = recv_connection(proxy.as_fd()).unwrap_err();
        assert!(err.would_block(), "{err}");
        drop(pid1);
        assert!(matches!(
            recv_connection(proxy.as_fd()).unwrap(),
            Received::Closed
        ));
    }

    #[test]
    fn a_message_without_a_descriptor_or_with_another_tag_is_refused() {
        let (mut pid1, proxy) = UnixStream::pair().unwrap();
        pid1.write_all(b"C").unwrap();
        assert!(matches!(
            recv_connection(proxy.as_fd()),
            Err(HandoffError::DescriptorCount { count: 0 })
        ));
        pid1.write_all(b"X").unwrap();
        assert!(matches!(
            recv_connection(proxy.as_fd()),
            Err(HandoffError::UnknownTag { tag: b'X' })
        ));
    }
}
