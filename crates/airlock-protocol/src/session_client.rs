//! The host side of session streams (protocol v2, see [`crate::session`]).
//!
//! Order of operations: [`SessionClient::connect`] runs the handshake and refuses a guest that
//! does not speak sessions; then exactly one request: [`SessionClient::list`],
//! [`SessionClient::kill`], [`SessionClient::ensure`], or [`SessionClient::attach`], which
//! returns an [`Attached`] once the guest answered `opened`. [`Attached::run`] then copies the
//! session's output to the caller's writer and, on a thread, the caller's input into `stdin`
//! frames, stopping at the detach key ([`DetachKey`]): the bytes before it are sent, the rest
//! of that read is dropped, and `detach` is sent (a partly typed key sequence is held back). Window-size changes go in through a
//! [`SessionController`] from any thread.
//!
//! The input thread blocks in `read` on the caller's reader; it cannot be interrupted, so it
//! is detached and ends at its next read once the stream is gone (the CLI exits anyway).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::detach_key::DetachKey;
use crate::frame::FrameError;
use crate::handshake::{host_handshake, HandshakeError, Key};
use crate::message::{read_packet, write_packet, Message, Packet, PacketError, RemoteError};
use crate::session::{
    validate_name, AttachRequest, EnsureRequest, NameError, Opened, SessionInfo, SessionMessage,
    SessionRefusal, SpecError, SESSIONS_SINCE,
};
use crate::version::VersionRange;
use crate::WindowSize;

/// Why a session request failed on the host side.
#[derive(Debug, thiserror::Error)]
pub enum SessionClientError {
    /// The handshake failed.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The guest speaks an older protocol without sessions.
    #[error("the sandbox speaks protocol version {version}, which has no sessions (version {SESSIONS_SINCE} or newer is needed)")]
    Unsupported {
        /// The negotiated version.
        version: u32,
    },
    /// The session name is not acceptable; nothing was sent.
    #[error(transparent)]
    Name(#[from] NameError),
    /// The session spec is not acceptable; nothing was sent.
    #[error("invalid session request: {0}")]
    Spec(#[from] SpecError),
    /// Reading or writing the stream failed.
    #[error(transparent)]
    Packet(#[from] PacketError),
    /// The guest refused the request.
    #[error("{0}")]
    Refused(SessionRefusal),
    /// The guest reported a generic protocol error.
    #[error("the sandbox refused the request: {0}")]
    Remote(RemoteError),
    /// The guest sent something not valid at this point.
    #[error("the sandbox sent {got} {when}")]
    Unexpected {
        /// What arrived.
        got: &'static str,
        /// Where in the stream.
        when: &'static str,
    },
    /// The stream closed before the answer (the sandbox stopped).
    #[error("the sandbox closed the session stream")]
    Closed,
    /// Writing the session's output to the caller's writer failed.
    #[error("writing the session's output failed: {0}")]
    Output(std::io::Error),
    /// Cloning the stream for the writer side failed.
    #[error("cannot duplicate the stream socket: {0}")]
    Clone(std::io::Error),
}

/// How an attachment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachEnd {
    /// The detach key (or the end of input) detached; the session runs on.
    Detached,
    /// The session's process ended while attached.
    Ended(SessionInfo),
}

/// How long a detaching client waits for the guest's `detached` before it leaves anyway.
pub const DETACH_WAIT: Duration = Duration::from_secs(2);

/// Sends window-size changes into an attachment, and detaches. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SessionController {
    writer: Arc<Mutex<UnixStream>>,
    /// The same socket, for what needs no lock (a half-close, a read timeout).
    socket: Arc<UnixStream>,
    detaching: Arc<AtomicBool>,
}

impl SessionController {
    fn send(&self, packet: &Packet) -> Result<(), PacketError> {
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        write_packet(&mut *writer, packet)
    }

    /// This client's window is now `size` (the session takes the smallest attached window).
    pub fn resize(&self, size: WindowSize) -> Result<(), PacketError> {
        self.send(&Packet::Control(Message::Resize(size)))
    }

    /// Leaves the session running and ends the attachment. Never blocks: keys still on their
    /// way to a session that does not read them must not hold the detach back. `detach` goes
    /// out when the stream is free, then the stream is half-closed (which the guest also takes
    /// as a detach), and the attachment waits at most [`DETACH_WAIT`] for the answer.
    pub fn detach(&self) {
        self.detaching.store(true, Ordering::SeqCst);
        if let Ok(mut writer) = self.writer.try_lock() {
            let detach = Packet::Control(Message::Session(SessionMessage::Detach));
            let _ = write_packet(&mut *writer, &detach);
        }
        // Also fails a write of keys blocked on a session that does not read them (EPIPE).
        let _ = self.socket.shutdown(std::net::Shutdown::Write);
        let socket = Arc::clone(&self.socket);
        thread::spawn(move || {
            thread::sleep(DETACH_WAIT);
            // Ends a read still waiting for the answer: the attachment returns `Detached`.
            let _ = socket.shutdown(std::net::Shutdown::Read);
        });
    }

    fn detaching(&self) -> bool {
        self.detaching.load(Ordering::SeqCst)
    }
}

/// An authenticated stream that speaks sessions, ready for one request.
#[derive(Debug)]
pub struct SessionClient {
    stream: UnixStream,
}

impl SessionClient {
    /// Runs the host side of the handshake on `stream` with this epoch's `key`.
    pub fn connect(mut stream: UnixStream, key: &Key) -> Result<Self, SessionClientError> {
        let version = host_handshake(&mut stream, key, VersionRange::CURRENT)?;
        if version < SESSIONS_SINCE {
            return Err(SessionClientError::Unsupported { version });
        }
        Ok(Self { stream })
    }

    fn request(&mut self, message: SessionMessage) -> Result<SessionMessage, SessionClientError> {
        write_packet(
            &mut self.stream,
            &Packet::Control(Message::Session(message)),
        )?;
        match self.next()? {
            Packet::Control(Message::Session(SessionMessage::Refused(refusal))) => {
                Err(SessionClientError::Refused(refusal))
            }
            Packet::Control(Message::Session(reply)) => Ok(reply),
            Packet::Control(Message::Error(err)) => Err(SessionClientError::Remote(err)),
            other => Err(unexpected(&other, "as the answer")),
        }
    }

    fn next(&mut self) -> Result<Packet, SessionClientError> {
        next_packet(&mut self.stream)
    }

    /// Every session, ordered by name.
    pub fn list(mut self) -> Result<Vec<SessionInfo>, SessionClientError> {
        match self.request(SessionMessage::List)? {
            SessionMessage::Listing { sessions } => Ok(sessions),
            other => Err(unexpected_session(&other)),
        }
    }

    /// Ends the session's processes and removes it; returns its final state.
    pub fn kill(mut self, name: &str) -> Result<SessionInfo, SessionClientError> {
        validate_name(name)?;
        match self.request(SessionMessage::Kill { name: name.into() })? {
            SessionMessage::Info(info) => Ok(info),
            other => Err(unexpected_session(&other)),
        }
    }

    /// Makes sure a running session named `request.name` exists.
    pub fn ensure(mut self, request: EnsureRequest) -> Result<Opened, SessionClientError> {
        validate_name(&request.name)?;
        request.spec.validate()?;
        match self.request(SessionMessage::Ensure(request))? {
            SessionMessage::Opened(opened) => Ok(opened),
            other => Err(unexpected_session(&other)),
        }
    }

    /// Attaches; returns once the guest answered `opened` (the redraw follows in `run`).
    pub fn attach(mut self, request: AttachRequest) -> Result<Attached, SessionClientError> {
        validate_name(&request.name)?;
        if let Some(spec) = &request.create {
            spec.validate()?;
        }
        let opened = match self.request(SessionMessage::Attach(request))? {
            SessionMessage::Opened(opened) => opened,
            other => return Err(unexpected_session(&other)),
        };
        let clone = || self.stream.try_clone().map_err(SessionClientError::Clone);
        let (writer, socket) = (clone()?, clone()?);
        Ok(Attached {
            reader: self.stream,
            controller: SessionController {
                writer: Arc::new(Mutex::new(writer)),
                socket: Arc::new(socket),
                detaching: Arc::new(AtomicBool::new(false)),
            },
            opened,
        })
    }
}

/// An attachment whose `opened` arrived.
#[derive(Debug)]
pub struct Attached {
    reader: UnixStream,
    controller: SessionController,
    opened: Opened,
}

impl Attached {
    /// The guest's answer: the session, and whether it was created or replaced.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// A handle for window-size changes (and a programmatic detach).
    pub fn controller(&self) -> SessionController {
        self.controller.clone()
    }

    /// Streams until a detach or the session's end (see the module docs).
    pub fn run(
        mut self,
        input: Box<dyn Read + Send>,
        output: &mut dyn Write,
        detach: DetachKey,
    ) -> Result<AttachEnd, SessionClientError> {
        let controller = self.controller.clone();
        thread::spawn(move || pump_input(input, &controller, detach));
        let result = self.receive(output);
        let _ignored = self.reader.shutdown(std::net::Shutdown::Both);
        result
    }

    fn receive(&mut self, output: &mut dyn Write) -> Result<AttachEnd, SessionClientError> {
        loop {
            let packet = match next_packet(&mut self.reader) {
                Ok(packet) => packet,
                // Detaching: a guest that closes, or does not answer in time, changes nothing.
                Err(SessionClientError::Closed) if self.controller.detaching() => {
                    return Ok(AttachEnd::Detached)
                }
                Err(err) => return Err(err),
            };
            match packet {
                Packet::Stdout(data) => output
                    .write_all(&data)
                    .and_then(|()| output.flush())
                    .map_err(SessionClientError::Output)?,
                Packet::Control(Message::Session(SessionMessage::Detached)) => {
                    return Ok(AttachEnd::Detached)
                }
                Packet::Control(Message::Session(SessionMessage::Ended(info))) => {
                    return Ok(AttachEnd::Ended(info))
                }
                Packet::Control(Message::Error(err)) => {
                    return Err(SessionClientError::Remote(err))
                }
                other => return Err(unexpected(&other, "while attached")),
            }
        }
    }
}

fn next_packet(stream: &mut UnixStream) -> Result<Packet, SessionClientError> {
    match read_packet(stream) {
        Ok(Some(packet)) => Ok(packet),
        Ok(None) => Err(SessionClientError::Closed),
        // A peer that closes with our unread bytes in its queue resets the stream.
        Err(PacketError::Frame(FrameError::Io { op: "read", source }))
            if source.kind() == std::io::ErrorKind::ConnectionReset =>
        {
            Err(SessionClientError::Closed)
        }
        Err(err) => Err(err.into()),
    }
}

fn unexpected(packet: &Packet, when: &'static str) -> SessionClientError {
    SessionClientError::Unexpected {
        got: packet.name(),
        when,
    }
}

fn unexpected_session(message: &SessionMessage) -> SessionClientError {
    SessionClientError::Unexpected {
        got: message.name(),
        when: "as the answer",
    }
}

/// Reads input up to the detach key (the end of input detaches too). Keys go to the stream
/// through a sender thread, so reading (and so seeing the detach key) never waits for a
/// session that does not read its input; what waits is held in memory until the detach.
fn pump_input(mut input: Box<dyn Read + Send>, controller: &SessionController, key: DetachKey) {
    let (keys, pending) = mpsc::channel::<Vec<u8>>();
    let (sent, all_sent) = mpsc::channel::<()>();
    let sender = controller.clone();
    thread::spawn(move || {
        for chunk in pending {
            if sender.send(&Packet::Stdin(chunk)).is_err() {
                return;
            }
        }
        let _ = sent.send(());
    });
    let mut buf = vec![0u8; 16 * 1024];
    let mut scanner = key.scanner();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let scan = scanner.feed(&buf[..n]);
        if !scan.forward.is_empty() && keys.send(scan.forward).is_err() {
            return;
        }
        if scan.detach {
            break;
        }
    }
    // The keys typed before the detach key go first, unless the session does not take them.
    drop(keys);
    let _ = all_sent.recv_timeout(DETACH_WAIT);
    controller.detach();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::guest_handshake;
    use crate::session::{SessionErrorCode, SessionState};

    fn info() -> SessionInfo {
        SessionInfo {
            name: "main".into(),
            command: vec!["sh".into()],
            state: SessionState::Running,
            clients: 1,
            started: 0,
            pid: 2,
            size: WindowSize { rows: 24, cols: 80 },
        }
    }

    /// A scripted guest: answers the first request with `replies`, then records what it reads.
    fn fake_guest(replies: Vec<Packet>) -> (SessionClient, thread::JoinHandle<Vec<Packet>>) {
        let key = Key::generate().unwrap();
        let (mut guest, host) = UnixStream::pair().unwrap();
        let guest_key = key.clone();
        let fake = thread::spawn(move || {
            guest_handshake(&mut guest, &guest_key, VersionRange::CURRENT).unwrap();
            let Ok(Some(first)) = read_packet(&mut guest) else {
                return Vec::new();
            };
            let mut seen = vec![first];
            for reply in replies {
                write_packet(&mut guest, &reply).unwrap();
            }
            while let Ok(Some(packet)) = read_packet(&mut guest) {
                let detach = matches!(
                    packet,
                    Packet::Control(Message::Session(SessionMessage::Detach))
                );
                seen.push(packet);
                if detach {
                    let reply = Packet::Control(Message::Session(SessionMessage::Detached));
                    let _ = write_packet(&mut guest, &reply);
                    break;
                }
            }
            seen
        });
        (SessionClient::connect(host, &key).unwrap(), fake)
    }

    fn session(message: SessionMessage) -> Packet {
        Packet::Control(Message::Session(message))
    }

    fn opened() -> Packet {
        session(SessionMessage::Opened(Opened {
            session: info(),
            created: false,
            replaced: None,
        }))
    }

    fn attach_request() -> AttachRequest {
        AttachRequest {
            name: "main".into(),
            size: WindowSize { rows: 24, cols: 80 },
            create: None,
        }
    }

    #[test]
    fn input_stops_at_the_detach_key_and_the_rest_of_that_read_is_dropped() {
        let (client, fake) = fake_guest(vec![opened(), Packet::Stdout(b"screen".to_vec())]);
        let attached = client.attach(attach_request()).unwrap();
        let mut out = Vec::new();
        let input = Box::new(std::io::Cursor::new(b"ls\r\x1dSECRET".to_vec()));
        let end = attached.run(input, &mut out, DetachKey::default()).unwrap();
        assert_eq!(end, AttachEnd::Detached);
        assert_eq!(out, b"screen");
        let seen = fake.join().unwrap();
        assert_eq!(
            seen[1..],
            [
                Packet::Stdin(b"ls\r".to_vec()),
                session(SessionMessage::Detach)
            ]
        );
    }

    #[test]
    fn a_refusal_reaches_the_caller_typed() {
        let refusal = SessionRefusal::new(SessionErrorCode::NoSuchSession, "no session x");
        let (client, fake) = fake_guest(vec![session(SessionMessage::Refused(refusal.clone()))]);
        let err = client.attach(attach_request()).unwrap_err();
        assert!(matches!(err, SessionClientError::Refused(r) if r == refusal));
        drop(fake);
    }

    #[test]
    fn a_stream_closed_while_attached_is_an_error_not_a_detach() {
        let key = Key::generate().unwrap();
        let (mut guest, host) = UnixStream::pair().unwrap();
        let guest_key = key.clone();
        // The guest answers, then goes away without `detached` or `ended`: the sandbox stopped.
        let fake = thread::spawn(move || {
            guest_handshake(&mut guest, &guest_key, VersionRange::CURRENT).unwrap();
            read_packet(&mut guest).unwrap();
            write_packet(&mut guest, &opened()).unwrap();
        });
        let client = SessionClient::connect(host, &key).unwrap();
        let attached = client.attach(attach_request()).unwrap();
        fake.join().unwrap();
        let (blocker, _keep) = UnixStream::pair().unwrap();
        let err = attached
            .run(Box::new(blocker), &mut Vec::new(), DetachKey::default())
            .unwrap_err();
        assert!(matches!(err, SessionClientError::Closed), "{err}");
    }

    #[test]
    fn invalid_names_are_refused_before_anything_is_sent() {
        let (client, fake) = fake_guest(vec![]);
        let err = client.kill("-rf").unwrap_err();
        assert!(matches!(err, SessionClientError::Name(_)));
        drop(fake);
    }
}
