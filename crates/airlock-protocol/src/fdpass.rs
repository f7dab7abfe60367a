//! Opening streams over the control socket by passing file descriptors (`SCM_RIGHTS`).
//!
//! The control socket is a `SOCK_SEQPACKET` pair ([`control_socketpair`]): the host keeps one
//! end, the guest's PID 1 the other. To open a stream the host creates a fresh stream
//! socketpair, sends one end across the control socket attached to a one-byte message, and
//! keeps the other ([`open_stream`]). Sequenced packets keep each byte and its descriptor
//! together, so concurrent openers never mix up descriptors. Every descriptor is created and
//! received close-on-exec, so none can leak into a process the guest spawns.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::io::Errno;
use rustix::net::{
    recvmsg, sendmsg, socketpair, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage,
    RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// The byte that accompanies a passed stream descriptor.
const OPEN_STREAM: u8 = b'S';

/// Why a stream could not be opened or received.
#[derive(Debug, thiserror::Error)]
pub enum FdPassError {
    /// A socket syscall failed.
    #[error("{syscall} failed: {source}")]
    Syscall {
        /// The syscall.
        syscall: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A message arrived on the control socket without exactly one descriptor.
    #[error("control message carried {count} descriptors, expected exactly one")]
    DescriptorCount {
        /// How many arrived.
        count: usize,
    },
    /// A message arrived with an unknown tag byte.
    #[error("control message has unknown tag {tag:#04x}")]
    UnknownTag {
        /// The byte.
        tag: u8,
    },
}

fn sys(syscall: &'static str) -> impl FnOnce(Errno) -> FdPassError {
    move |errno| FdPassError::Syscall {
        syscall,
        source: errno.into(),
    }
}

/// Creates the control socket pair (`AF_UNIX`, `SOCK_SEQPACKET`, close-on-exec).
pub fn control_socketpair() -> Result<(OwnedFd, OwnedFd), FdPassError> {
    socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(sys("socketpair"))
}

/// Opens a new stream to the guest: sends one end of a fresh stream socketpair over `control`
/// and returns the other.
pub fn open_stream(control: BorrowedFd<'_>) -> Result<UnixStream, FdPassError> {
    let (ours, theirs) = socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(sys("socketpair"))?;
    send_stream(control, theirs.as_fd())?;
    // `theirs` is closed here: the guest holds its own reference now.
    Ok(UnixStream::from(ours))
}

/// Hands an already connected stream (e.g. a client accepted on a host-side listening socket)
/// to the guest over `control`; the guest serves it exactly like one from [`open_stream`].
pub fn send_stream(control: BorrowedFd<'_>, stream: BorrowedFd<'_>) -> Result<(), FdPassError> {
    send_with(control, stream, SendFlags::NOSIGNAL).map_err(sys("sendmsg"))
}

/// [`send_stream`] without blocking: `Ok(false)` when the guest's queue is full (nothing was
/// sent; try again, e.g. with [`send_stream`] on a thread that may block).
pub fn try_send_stream(
    control: BorrowedFd<'_>,
    stream: BorrowedFd<'_>,
) -> Result<bool, FdPassError> {
    match send_with(control, stream, SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
        Ok(()) => Ok(true),
        Err(Errno::AGAIN) => Ok(false),
        Err(errno) => Err(sys("sendmsg")(errno)),
    }
}

fn send_with(
    control: BorrowedFd<'_>,
    stream: BorrowedFd<'_>,
    flags: SendFlags,
) -> Result<(), Errno> {
    let fds = [stream];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    let pushed = ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    debug_assert!(pushed, "buffer is sized for one descriptor");
    sendmsg(
        control,
        &[IoSlice::new(&[OPEN_STREAM])],
        &mut ancillary,
        flags,
    )?;
    Ok(())
}

/// Receives the next stream descriptor from `control`. `Ok(None)` means the peer closed the
/// control socket.
pub fn recv_stream(control: BorrowedFd<'_>) -> Result<Option<OwnedFd>, FdPassError> {
    loop {
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let received = match recvmsg(
            control,
            &mut [IoSliceMut::new(&mut byte)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(received) => received,
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(sys("recvmsg")(errno)),
        };
        let mut fds: Vec<OwnedFd> = Vec::new();
        for message in ancillary.drain() {
            // Credentials are not requested; anything but descriptors is ignored.
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        if received.bytes == 0 && fds.is_empty() {
            return Ok(None);
        }
        if byte[0] != OPEN_STREAM {
            return Err(FdPassError::UnknownTag { tag: byte[0] });
        }
        if fds.len() != 1 {
            // Dropping `fds` closes whatever arrived.
            return Err(FdPassError::DescriptorCount { count: fds.len() });
        }
        return Ok(fds.pop());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_passed_stream_connects_host_and_guest() {
        let (host, guest) = control_socketpair().unwrap();
        let mut ours = open_stream(host.as_fd()).unwrap();
        let theirs = recv_stream(guest.as_fd()).unwrap().unwrap();
        let mut theirs = UnixStream::from(theirs);
        ours.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        theirs.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        let flags = rustix::io::fcntl_getfd(&theirs).unwrap();
        assert!(
            flags.contains(rustix::io::FdFlags::CLOEXEC),
            "received fd must be close-on-exec"
        );
    }

    #[test]
    fn a_full_guest_queue_makes_the_non_blocking_send_say_so_instead_of_waiting() {
        let (host, guest) = control_socketpair().unwrap();
        let (stream, _peer) = UnixStream::pair().unwrap();
        // Nobody receives on `guest`: its queue fills up.
        let mut sent = 0;
        while try_send_stream(host.as_fd(), stream.as_fd()).unwrap() {
            sent += 1;
            assert!(sent < 100_000, "the queue never filled");
        }
        assert!(sent > 0);
        let first = recv_stream(guest.as_fd()).unwrap();
        assert!(first.is_some());
    }

    #[test]
    fn closing_the_control_socket_ends_the_stream_of_streams() {
        let (host, guest) = control_socketpair().unwrap();
        drop(host);
        assert!(recv_stream(guest.as_fd()).unwrap().is_none());
    }
}
