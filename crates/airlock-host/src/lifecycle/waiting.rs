//! The keeper's clients until their mode byte arrived, served from the keeper's own event loop.
//!
//! Order of operations for each connection on the control socket:
//! 1. `accept`, then the peer-credentials check (same uid as the keeper, else dropped).
//! 2. The mode byte, read without blocking: if it is not there yet, the connection waits in
//!    [`Waiting`], polled with the keeper's other descriptors, for at most
//!    [`CLIENT_PREAMBLE`] (then it is dropped).
//! 3. `S` (an exec, session, transfer or forward stream): the connection itself goes to the
//!    guest's PID 1 over the control socket right there, without blocking (`try_send_stream`);
//!    PID 1 then runs the HMAC handshake with the client. Only when PID 1's queue is full, and
//!    for every other mode (which read a request and may wait on the guest), the caller serves
//!    the connection on a thread of its own ([`Accepted`]).
//!
//! So the common `exec` costs the keeper no thread and no extra wake-up.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::RecvFlags;

use crate::wire::MODE_STREAM;

/// How long a client has to send its mode byte (and request) before it is dropped.
pub(crate) const CLIENT_PREAMBLE: Duration = Duration::from_secs(5);

/// At most this many connections wait for their mode byte; more are dropped at once.
const MAX_WAITING: usize = 64;

/// A connection (of this uid) whose mode byte arrived and that needs a thread: its mode is
/// not `S`, or PID 1's queue was full.
pub(crate) struct Accepted {
    pub(crate) conn: UnixStream,
    pub(crate) mode: u8,
}

/// Connections accepted whose mode byte has not arrived yet, each with its deadline.
#[derive(Default)]
pub(crate) struct Waiting {
    conns: Vec<(UnixStream, Instant)>,
}

/// What became of one connection.
enum Step {
    /// Handed to PID 1, or dropped.
    Done,
    /// The mode byte is not there yet.
    Wait(UnixStream),
    /// For a thread.
    Serve(Accepted),
}

impl Waiting {
    /// Accepts every connection pending on `listener` (non-blocking) and moves each as far as it
    /// goes now; returns those that need a thread.
    pub(crate) fn accept_all(
        &mut self,
        listener: &UnixListener,
        control: BorrowedFd<'_>,
        now: Instant,
    ) -> Vec<Accepted> {
        let mut serve = Vec::new();
        loop {
            let conn = match listener.accept() {
                Ok((conn, _)) => conn,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return serve,
                Err(e) => {
                    // E.g. out of descriptors: the socket stays readable, so back off instead of
                    // spinning on poll.
                    eprintln!("airlock keeper: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    return serve;
                }
            };
            if let Err(e) = same_user(&conn) {
                eprintln!("airlock keeper: client dropped: {e}");
                continue;
            }
            match step(conn, control) {
                Step::Done => {}
                Step::Serve(accepted) => serve.push(accepted),
                Step::Wait(_) if self.conns.len() >= MAX_WAITING => {
                    eprintln!("airlock keeper: client dropped: {MAX_WAITING} clients are silent");
                }
                Step::Wait(conn) => self.conns.push((conn, now + CLIENT_PREAMBLE)),
            }
        }
    }

    /// The waiting connections, in order, to poll for input.
    pub(crate) fn poll_fds(&self) -> impl Iterator<Item = PollFd<'_>> {
        self.conns
            .iter()
            .map(|(conn, _)| PollFd::new(conn, PollFlags::IN))
    }

    /// The earliest deadline, to bound the keeper's poll.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.conns.iter().map(|(_, deadline)| *deadline).min()
    }

    /// Moves on the connections `ready` marks (in [`Self::poll_fds`] order) and drops those
    /// past their deadline; returns those that need a thread.
    pub(crate) fn serve_ready(
        &mut self,
        ready: &[bool],
        control: BorrowedFd<'_>,
        now: Instant,
    ) -> Vec<Accepted> {
        let mut serve = Vec::new();
        let mut kept = Vec::with_capacity(self.conns.len());
        for (index, (conn, deadline)) in std::mem::take(&mut self.conns).into_iter().enumerate() {
            if !ready.get(index).copied().unwrap_or(false) {
                if now < deadline {
                    kept.push((conn, deadline));
                }
                continue;
            }
            match step(conn, control) {
                Step::Done => {}
                Step::Serve(accepted) => serve.push(accepted),
                Step::Wait(conn) if now < deadline => kept.push((conn, deadline)),
                Step::Wait(_) => {}
            }
        }
        self.conns = kept;
        serve
    }
}

/// Only this user's processes may talk to the keeper.
fn same_user(conn: &UnixStream) -> std::io::Result<()> {
    let peer = rustix::net::sockopt::socket_peercred(conn)?;
    if peer.uid != rustix::process::geteuid() {
        return Err(std::io::Error::other(format!(
            "peer uid {} is not this user",
            peer.uid.as_raw()
        )));
    }
    Ok(())
}

/// Reads the mode byte if it is there and hands an `S` stream to PID 1 when that does not block.
fn step(conn: UnixStream, control: BorrowedFd<'_>) -> Step {
    let mut mode = [0u8; 1];
    match rustix::net::recv(&conn, &mut mode, RecvFlags::DONTWAIT) {
        Ok((1, _)) => {}
        Err(Errno::AGAIN) => return Step::Wait(conn),
        Err(Errno::INTR) => return Step::Wait(conn),
        // Closed before saying anything, or broken.
        Ok(_) | Err(_) => return Step::Done,
    }
    let accepted = Accepted {
        conn,
        mode: mode[0],
    };
    if accepted.mode != MODE_STREAM {
        return Step::Serve(accepted);
    }
    match airlock_protocol::try_send_stream(control, accepted.conn.as_fd()) {
        // PID 1 holds the connection now; ours closes here.
        Ok(true) => Step::Done,
        Ok(false) => Step::Serve(accepted),
        Err(e) => {
            eprintln!("airlock keeper: client dropped: {e}");
            Step::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_protocol::{control_socketpair, recv_stream};
    use std::io::{Read, Write};
    use std::os::fd::OwnedFd;

    struct Setup {
        _dir: tempfile::TempDir,
        listener: UnixListener,
        socket: std::path::PathBuf,
        host: OwnedFd,
        guest: OwnedFd,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("control.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (host, guest) = control_socketpair().unwrap();
        Setup {
            _dir: dir,
            listener,
            socket,
            host,
            guest,
        }
    }

    /// The next stream on the guest's end of the control socket, if one is there now.
    fn handed(guest: &OwnedFd) -> Option<UnixStream> {
        rustix::io::ioctl_fionbio(guest, true).unwrap();
        let got = recv_stream(guest.as_fd()).ok().flatten();
        rustix::io::ioctl_fionbio(guest, false).unwrap();
        got.map(UnixStream::from)
    }

    #[test]
    fn a_stream_client_goes_to_pid1_from_the_loop_itself_without_a_thread() {
        let s = setup();
        let mut client = UnixStream::connect(&s.socket).unwrap();
        client.write_all(&[MODE_STREAM]).unwrap();
        let mut waiting = Waiting::default();
        let serve = waiting.accept_all(&s.listener, s.host.as_fd(), Instant::now());
        assert!(serve.is_empty(), "no connection is left for a thread");
        assert_eq!(waiting.conns.len(), 0);
        // Already with PID 1 when accept_all returned: nothing ran elsewhere.
        let mut theirs = handed(&s.guest).expect("the connection reached PID 1");
        client.write_all(b"hello").unwrap();
        let mut buf = [0u8; 5];
        theirs.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        // The stream PID 1 got is blocking, as its handshake expects.
        let flags = rustix::fs::fcntl_getfl(&theirs).unwrap();
        assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK));
    }

    #[test]
    fn a_client_whose_mode_byte_comes_late_waits_in_the_loop_then_is_handed_over() {
        let s = setup();
        let mut client = UnixStream::connect(&s.socket).unwrap();
        let mut waiting = Waiting::default();
        let now = Instant::now();
        assert!(waiting
            .accept_all(&s.listener, s.host.as_fd(), now)
            .is_empty());
        assert_eq!(waiting.conns.len(), 1);
        assert_eq!(waiting.next_deadline(), Some(now + CLIENT_PREAMBLE));
        assert!(handed(&s.guest).is_none());
        client.write_all(&[MODE_STREAM]).unwrap();
        let mut fds: Vec<PollFd<'_>> = waiting.poll_fds().collect();
        rustix::event::poll(&mut fds, None).unwrap();
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        assert!(waiting.serve_ready(&ready, s.host.as_fd(), now).is_empty());
        assert_eq!(waiting.conns.len(), 0);
        assert!(handed(&s.guest).is_some());
    }

    #[test]
    fn a_client_that_says_nothing_is_dropped_after_the_preamble_time() {
        let s = setup();
        let mut client = UnixStream::connect(&s.socket).unwrap();
        let mut waiting = Waiting::default();
        let now = Instant::now();
        waiting.accept_all(&s.listener, s.host.as_fd(), now);
        waiting.serve_ready(&[false], s.host.as_fd(), now + CLIENT_PREAMBLE / 2);
        assert_eq!(waiting.conns.len(), 1, "still within its time");
        waiting.serve_ready(&[false], s.host.as_fd(), now + CLIENT_PREAMBLE);
        assert_eq!(waiting.conns.len(), 0);
        let mut buf = [0u8; 1];
        assert_eq!(client.read(&mut buf).unwrap(), 0, "the keeper hung up");
        assert!(handed(&s.guest).is_none());
    }

    #[test]
    fn other_modes_and_a_full_pid1_queue_are_left_for_a_thread_with_their_mode() {
        let s = setup();
        let mut detached = UnixStream::connect(&s.socket).unwrap();
        detached.write_all(b"D{}\n").unwrap();
        let mut waiting = Waiting::default();
        let serve = waiting.accept_all(&s.listener, s.host.as_fd(), Instant::now());
        assert_eq!(serve.len(), 1);
        assert_eq!(serve[0].mode, b'D');
        // The request after the mode byte is still there for the thread to read.
        let mut rest = [0u8; 3];
        (&serve[0].conn).read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"{}\n");
        // PID 1 not reading: its queue fills; the next stream waits for a thread.
        let (filler, _peer) = UnixStream::pair().unwrap();
        while airlock_protocol::try_send_stream(s.host.as_fd(), filler.as_fd()).unwrap() {}
        let mut stream = UnixStream::connect(&s.socket).unwrap();
        stream.write_all(&[MODE_STREAM]).unwrap();
        let serve = waiting.accept_all(&s.listener, s.host.as_fd(), Instant::now());
        assert_eq!(serve.len(), 1);
        assert_eq!(serve[0].mode, MODE_STREAM);
    }
}
