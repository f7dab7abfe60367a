//! The host side of an exec stream.
//!
//! Order of operations: [`ExecClient::connect`] runs the handshake on a freshly opened stream;
//! [`ExecClient::run`] sends `exec`, starts a thread that pumps host stdin into `stdin` frames
//! (then `stdin_closed`; without stdin, `stdin_closed` goes out with `exec` and no thread
//! starts), and copies `stdout`/`stderr` frames to the caller's writers in the order they
//! arrive until `exited`/`signaled` (or a typed `error`). [`ExecClient::request`] does the
//! same in one round trip fewer: the request goes out with the handshake's `host_hello`
//! (`handshake::host_handshake_then`), and [`ExecClient::finish`] collects the output and
//! status. Window-size changes and signals go in through an [`ExecController`], usable from
//! any thread.
//!
//! The stdin pump blocks in `read` on the caller's reader; it cannot be interrupted, so it is
//! detached and ends at its next read once the stream has been shut down.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread;

use crate::frame::{write_encoded, FrameError};
use crate::handshake::{host_handshake, host_handshake_then, HandshakeError, Key};
use crate::message::{
    encode_packet, read_packet, write_packet, ExecRequest, Message, Packet, PacketError,
    RemoteError, RequestError, WindowSize,
};
use crate::version::VersionRange;

/// How the process ended. The CLI maps `Signal(n)` to exit status `128 + n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exited normally with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl ExitStatus {
    /// The shell convention: the code, or `128 + signal`.
    pub fn shell_code(self) -> i32 {
        match self {
            Self::Code(code) => code,
            Self::Signal(signal) => 128 + signal,
        }
    }
}

/// Why an exec failed on the host side.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The handshake failed.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The request is malformed; nothing was sent.
    #[error("invalid exec request: {0}")]
    Request(#[from] RequestError),
    /// Reading or writing the stream failed.
    #[error(transparent)]
    Packet(#[from] PacketError),
    /// The guest reported a typed error.
    #[error("the sandbox refused the command: {0}")]
    Remote(RemoteError),
    /// The guest sent something not valid at this point of the stream.
    #[error("the sandbox sent {got} {when}")]
    Unexpected {
        /// What arrived.
        got: &'static str,
        /// Where in the stream (`"before started"`, …).
        when: &'static str,
    },
    /// The stream closed before the process's status arrived.
    #[error("the sandbox closed the stream before reporting the exit status")]
    Closed,
    /// Writing the process's output to the caller's writer failed.
    #[error("writing the command's {stream} failed: {source}")]
    Output {
        /// `"stdout"` or `"stderr"`.
        stream: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// Cloning the stream for the writer side failed.
    #[error("cannot duplicate the stream socket: {0}")]
    Clone(std::io::Error),
}

/// Sends control input (window size, signals) into a running exec. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ExecController {
    writer: Arc<Mutex<UnixStream>>,
}

impl ExecController {
    fn send(&self, packet: &Packet) -> Result<(), PacketError> {
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        write_packet(&mut *writer, packet)
    }

    fn send_encoded(&self, frames: &[u8]) -> Result<(), PacketError> {
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        write_encoded(&mut *writer, frames).map_err(PacketError::Frame)
    }

    /// Tells the guest the terminal is now `size` (PTY mode; ignored in pipes mode).
    pub fn resize(&self, size: WindowSize) -> Result<(), PacketError> {
        self.send(&Packet::Control(Message::Resize(size)))
    }

    /// Delivers `signal` to the process group of the process.
    pub fn signal(&self, signal: i32) -> Result<(), PacketError> {
        self.send(&Packet::Control(Message::Signal { signal }))
    }
}

/// An authenticated exec stream, ready to run one command.
#[derive(Debug)]
pub struct ExecClient {
    reader: UnixStream,
    controller: ExecController,
    version: u32,
}

impl ExecClient {
    /// Runs the host side of the handshake on `stream` with this epoch's `key`.
    pub fn connect(mut stream: UnixStream, key: &Key) -> Result<Self, ClientError> {
        let version = host_handshake(&mut stream, key, VersionRange::CURRENT)?;
        Self::with_stream(stream, version)
    }

    /// The negotiated protocol version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// A handle for window-size changes and signals while [`run`](Self::run) runs.
    pub fn controller(&self) -> ExecController {
        self.controller.clone()
    }

    /// Runs `request`, streaming `stdin` in (none: stdin is closed at once) and the process's
    /// output out, and returns how it ended.
    pub fn run(
        self,
        request: &ExecRequest,
        stdin: Option<Box<dyn Read + Send>>,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<ExitStatus, ClientError> {
        request.validate()?;
        let mut frames = Vec::new();
        encode_request(request, stdin.is_none(), &mut frames)?;
        self.controller.send_encoded(&frames)?;
        if let Some(reader) = stdin {
            self.pump(reader);
        }
        self.finish(stdout, stderr)
    }

    /// Handshake and request in one round trip: `host_hello`, `exec` and (without `stdin`)
    /// `stdin_closed` go out in one write, before the guest's `ready`
    /// ([`host_handshake_then`]). Then `stdin` is pumped in as by [`run`](Self::run); call
    /// [`finish`](Self::finish) for the output and the status.
    pub fn request(
        mut stream: UnixStream,
        key: &Key,
        request: &ExecRequest,
        stdin: Option<Box<dyn Read + Send>>,
    ) -> Result<Self, ClientError> {
        request.validate()?;
        let mut frames = Vec::new();
        encode_request(request, stdin.is_none(), &mut frames)?;
        let version = host_handshake_then(&mut stream, key, VersionRange::CURRENT, &frames)?;
        let client = Self::with_stream(stream, version)?;
        if let Some(reader) = stdin {
            client.pump(reader);
        }
        Ok(client)
    }

    fn with_stream(stream: UnixStream, version: u32) -> Result<Self, ClientError> {
        let writer = stream.try_clone().map_err(ClientError::Clone)?;
        Ok(Self {
            reader: stream,
            controller: ExecController {
                writer: Arc::new(Mutex::new(writer)),
            },
            version,
        })
    }

    /// Copies `reader` into `stdin` frames on a thread of its own, then `stdin_closed`.
    fn pump(&self, reader: Box<dyn Read + Send>) {
        let controller = self.controller.clone();
        thread::spawn(move || pump_stdin(reader, &controller));
    }

    /// Copies the process's output to `stdout`/`stderr` until its status arrives, and returns
    /// it (after [`request`](Self::request)).
    pub fn finish(
        mut self,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<ExitStatus, ClientError> {
        let result = self.receive(stdout, stderr);
        // Wakes the stdin pump's next write and tells the guest we are gone.
        let _ignored = self.reader.shutdown(std::net::Shutdown::Both);
        result
    }

    fn receive(
        &mut self,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<ExitStatus, ClientError> {
        let mut started = false;
        loop {
            let packet = match read_packet(&mut self.reader) {
                Ok(Some(packet)) => packet,
                Ok(None) => return Err(ClientError::Closed),
                // A peer that closes with our unread bytes in its queue resets the stream:
                // still "closed before the status", not a transport fault.
                Err(PacketError::Frame(FrameError::Io { op: "read", source }))
                    if source.kind() == std::io::ErrorKind::ConnectionReset =>
                {
                    return Err(ClientError::Closed)
                }
                Err(err) => return Err(err.into()),
            };
            match packet {
                Packet::Control(Message::Started { .. }) if !started => started = true,
                Packet::Control(Message::Error(err)) => return Err(ClientError::Remote(err)),
                Packet::Stdout(data) if started => copy_out(stdout, &data, "stdout")?,
                Packet::Stderr(data) if started => copy_out(stderr, &data, "stderr")?,
                Packet::Control(Message::Exited { code }) if started => {
                    return Ok(ExitStatus::Code(code))
                }
                Packet::Control(Message::Signaled { signal }) if started => {
                    return Ok(ExitStatus::Signal(signal))
                }
                other => {
                    let when = if started {
                        "after started"
                    } else {
                        "before started"
                    };
                    return Err(ClientError::Unexpected {
                        got: other.name(),
                        when,
                    });
                }
            }
        }
    }
}

/// `exec`, and `stdin_closed` after it when the command gets no input, framed into `out`.
fn encode_request(
    request: &ExecRequest,
    close_stdin: bool,
    out: &mut Vec<u8>,
) -> Result<(), PacketError> {
    encode_packet(&Packet::Control(Message::Exec(request.clone())), out)?;
    if close_stdin {
        encode_packet(&Packet::Control(Message::StdinClosed), out)?;
    }
    Ok(())
}

fn copy_out(writer: &mut dyn Write, data: &[u8], stream: &'static str) -> Result<(), ClientError> {
    writer
        .write_all(data)
        .and_then(|()| writer.flush())
        .map_err(|source| ClientError::Output { stream, source })
}

/// Copies the host's stdin into `stdin` frames, then sends `stdin_closed`.
fn pump_stdin(mut reader: Box<dyn Read + Send>, controller: &ExecController) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if controller.send(&Packet::Stdin(buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A failing host stdin is treated as EOF: the process sees its input end.
            Err(_) => break,
        }
    }
    let _ignored = controller.send(&Packet::Control(Message::StdinClosed));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::guest_handshake;
    use crate::message::ExecUser;

    fn request() -> ExecRequest {
        ExecRequest {
            argv: vec!["true".into()],
            env: Default::default(),
            cwd: None,
            user: ExecUser::Sandbox,
            tty: None,
        }
    }

    /// Runs a client against a scripted guest that answers the exec with `replies`.
    fn against(replies: Vec<Packet>) -> Result<ExitStatus, ClientError> {
        let key = Key::generate().unwrap();
        let (mut guest, host) = UnixStream::pair().unwrap();
        let guest_key = key.clone();
        let fake = thread::spawn(move || {
            guest_handshake(&mut guest, &guest_key, VersionRange::CURRENT).unwrap();
            let _exec = read_packet(&mut guest).unwrap();
            for reply in replies {
                write_packet(&mut guest, &reply).unwrap();
            }
            // The stream closes here; what was written stays readable.
        });
        let client = ExecClient::connect(host, &key)?;
        let result = client.run(&request(), None, &mut std::io::sink(), &mut std::io::sink());
        fake.join().unwrap();
        result
    }

    #[test]
    fn output_before_started_is_refused_as_out_of_order() {
        let err = against(vec![Packet::Stdout(b"early".to_vec())]).unwrap_err();
        assert!(matches!(
            err,
            ClientError::Unexpected {
                got: "stdout data",
                when: "before started"
            }
        ));
    }

    #[test]
    fn a_second_started_or_a_host_bound_message_is_refused() {
        let started = Packet::Control(Message::Started { pid: 1 });
        let err = against(vec![started.clone(), started]).unwrap_err();
        assert!(matches!(
            err,
            ClientError::Unexpected { got: "started", .. }
        ));
        let err = against(vec![Packet::Stdin(b"x".to_vec())]).unwrap_err();
        assert!(matches!(
            err,
            ClientError::Unexpected {
                got: "stdin data",
                ..
            }
        ));
    }

    #[test]
    fn stream_closed_before_the_status_is_an_error_not_success() {
        let err = against(vec![Packet::Control(Message::Started { pid: 1 })]).unwrap_err();
        assert!(matches!(err, ClientError::Closed));
    }

    #[test]
    fn typed_guest_error_reaches_the_caller() {
        let refusal = RemoteError::new(crate::ErrorCode::CommandNotFound, "no such command");
        let err = against(vec![Packet::Control(Message::Error(refusal.clone()))]).unwrap_err();
        assert!(matches!(err, ClientError::Remote(e) if e == refusal));
    }

    #[test]
    fn the_request_goes_out_with_the_handshake_before_the_guest_says_ready() {
        use crate::handshake::{context, verify, KEY_LEN};
        use std::time::Duration;
        let key = Key::generate().unwrap();
        let (mut guest, host) = UnixStream::pair().unwrap();
        let guest_key = key.clone();
        let fake = thread::spawn(move || {
            let nonce = [7u8; KEY_LEN];
            let versions = VersionRange::CURRENT;
            let hello = Message::GuestHello {
                versions,
                nonce: hex::encode(nonce),
            };
            write_packet(&mut guest, &Packet::Control(hello)).unwrap();
            let Some(Packet::Control(Message::HostHello {
                versions: theirs,
                proof,
            })) = read_packet(&mut guest).unwrap()
            else {
                panic!("expected host_hello");
            };
            let proof = hex::decode(proof).unwrap();
            assert!(verify(
                &guest_key,
                &nonce,
                &context(versions, theirs),
                &proof
            ));
            // No `ready` yet: the request must already be here.
            guest
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let exec = read_packet(&mut guest).expect("the exec arrives without waiting for ready");
            assert!(matches!(exec, Some(Packet::Control(Message::Exec(_)))));
            let closed = read_packet(&mut guest).unwrap();
            assert!(matches!(
                closed,
                Some(Packet::Control(Message::StdinClosed))
            ));
            let version = crate::version::negotiate(versions, theirs).unwrap();
            for reply in [
                Message::Ready { version },
                Message::Started { pid: 4 },
                Message::Exited { code: 3 },
            ] {
                write_packet(&mut guest, &Packet::Control(reply)).unwrap();
            }
        });
        let client = ExecClient::request(host, &key, &request(), None).unwrap();
        let status = client
            .finish(&mut std::io::sink(), &mut std::io::sink())
            .unwrap();
        fake.join().unwrap();
        assert_eq!(status, ExitStatus::Code(3));
    }

    #[test]
    fn a_pipelined_request_without_the_key_is_refused_and_never_read() {
        let (mut guest, host) = UnixStream::pair().unwrap();
        let guest_key = Key::generate().unwrap();
        let fake = thread::spawn(move || {
            let refused = guest_handshake(&mut guest, &guest_key, VersionRange::CURRENT);
            assert!(matches!(refused, Err(HandshakeError::BadProof)));
            // The exec the impostor pipelined is still unread in the guest's queue.
            let next = read_packet(&mut guest).unwrap();
            assert!(matches!(next, Some(Packet::Control(Message::Exec(_)))));
        });
        let wrong = Key::generate().unwrap();
        let err = ExecClient::request(host, &wrong, &request(), None).unwrap_err();
        fake.join().unwrap();
        assert!(
            matches!(&err, ClientError::Handshake(HandshakeError::Refused(e)) if e.code == crate::ErrorCode::AuthFailed),
            "{err:?}"
        );
    }

    #[test]
    fn exit_status_maps_signals_to_128_plus_n() {
        let replies = vec![
            Packet::Control(Message::Started { pid: 1 }),
            Packet::Control(Message::Signaled { signal: 9 }),
        ];
        let status = against(replies).unwrap();
        assert_eq!((status, status.shell_code()), (ExitStatus::Signal(9), 137));
    }
}
