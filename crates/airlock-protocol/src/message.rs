//! Versioned control messages and the packets that carry them.
//!
//! A [`Packet`] is what travels in one frame: a JSON [`Message`] in a control frame, or raw
//! stdio bytes in a data frame. Messages are an adjacently tagged enum
//! (`{"type": "...", "body": {...}}`) with `deny_unknown_fields` everywhere, so a malformed or
//! unknown message is a typed decode error, never a silently ignored one.
//!
//! Extending the protocol: a later version adds *new variants* (file transfer, sessions, port
//! forwarding) and records the version that introduced each in [`Message::since`]. A receiver
//! refuses a message newer than the negotiated version, and a sender never sends one, so an
//! old peer never sees a variant it cannot parse. Existing variants are never changed; the
//! schema snapshot test (`tests/schema.rs`) enforces that.
//!
//! The handshake messages (`guest_hello`, `host_hello`, `ready`) are frozen across all versions:
//! they must be readable by every build, because they carry the version ranges themselves.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::frame::{self, Frame, FrameError, FrameKind};
use crate::session::SessionMessage;
use crate::transfer::{Entry, FileEnd, ForwardRequest, PullRequest, PushRequest, TransferSummary};
use crate::version::VersionRange;

/// A control message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    content = "body",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum Message {
    /// Guest → host, first message of every stream: the versions the guest speaks and a fresh
    /// 32-byte random nonce (hex) the host must prove knowledge of the key against.
    GuestHello {
        /// Versions the guest speaks.
        versions: VersionRange,
        /// 32 random bytes, hex encoded.
        nonce: String,
    },
    /// Host → guest: the host's versions and `HMAC-SHA256(key, nonce || context)` (hex).
    HostHello {
        /// Versions the host speaks.
        versions: VersionRange,
        /// The proof, hex encoded.
        proof: String,
    },
    /// Guest → host: the proof verified; both sides now speak `version`.
    Ready {
        /// The negotiated version.
        version: u32,
    },
    /// Host → guest: run a process (v1).
    Exec(ExecRequest),
    /// Host → guest: the host's stdin reached EOF (v1).
    StdinClosed,
    /// Host → guest: the host terminal changed size (v1, PTY mode).
    Resize(WindowSize),
    /// Host → guest: deliver signal `signal` to the process group of the process (v1).
    Signal {
        /// The signal number.
        signal: i32,
    },
    /// Guest → host: the process runs (v1).
    Started {
        /// Its pid inside the sandbox (meaningful only within the epoch).
        pid: u32,
    },
    /// Guest → host: the process exited with `code`; nothing follows (v1).
    Exited {
        /// The exit code.
        code: i32,
    },
    /// Guest → host: the process died of `signal`; nothing follows (v1).
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// Either direction: a typed failure; the stream ends after it (v1).
    Error(RemoteError),
    /// Sessions (v2): every session request and reply, see [`crate::session`].
    Session(SessionMessage),
    /// Host → guest: receive a tree and write it (v3, [`crate::transfer`]).
    Push(PushRequest),
    /// Host → guest: send a tree (v3).
    Pull(PullRequest),
    /// Guest → host: the transfer request is accepted; `target` is where a pushed tree lands
    /// (the source, for a pull) (v3).
    TransferReady {
        /// The resolved path inside the sandbox.
        target: String,
    },
    /// Sender → receiver: one file of the tree (v3).
    Entry(Entry),
    /// Sender → receiver: the current regular file is complete (v3).
    FileEnd(FileEnd),
    /// Sender → receiver: the current directory is complete (v3).
    DirEnd,
    /// Sender → receiver: the tree is complete (v3).
    TransferEnd(TransferSummary),
    /// Guest → host: the pushed tree is published at its target (v3).
    TransferDone(TransferSummary),
    /// Host → guest: connect to a sandbox loopback port; raw bytes follow (v3).
    Forward(ForwardRequest),
    /// Guest → host: the forward is connected; the stream now carries raw bytes (v3).
    ForwardConnected,
}

impl Message {
    /// The protocol version that introduced this message. `0` marks the frozen handshake.
    pub fn since(&self) -> u32 {
        match self {
            Self::GuestHello { .. } | Self::HostHello { .. } | Self::Ready { .. } => 0,
            Self::Exec(_)
            | Self::StdinClosed
            | Self::Resize(_)
            | Self::Signal { .. }
            | Self::Started { .. }
            | Self::Exited { .. }
            | Self::Signaled { .. }
            | Self::Error(_) => 1,
            Self::Session(_) => crate::session::SESSIONS_SINCE,
            Self::Push(_)
            | Self::Pull(_)
            | Self::TransferReady { .. }
            | Self::Entry(_)
            | Self::FileEnd(_)
            | Self::DirEnd
            | Self::TransferEnd(_)
            | Self::TransferDone(_)
            | Self::Forward(_)
            | Self::ForwardConnected => crate::transfer::TRANSFER_SINCE,
        }
    }

    /// A short name for error messages (`"exec"`, `"stdin_closed"`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::GuestHello { .. } => "guest_hello",
            Self::HostHello { .. } => "host_hello",
            Self::Ready { .. } => "ready",
            Self::Exec(_) => "exec",
            Self::StdinClosed => "stdin_closed",
            Self::Resize(_) => "resize",
            Self::Signal { .. } => "signal",
            Self::Started { .. } => "started",
            Self::Exited { .. } => "exited",
            Self::Signaled { .. } => "signaled",
            Self::Error(_) => "error",
            Self::Session(message) => message.name(),
            Self::Push(_) => "push",
            Self::Pull(_) => "pull",
            Self::TransferReady { .. } => "transfer_ready",
            Self::Entry(_) => "entry",
            Self::FileEnd(_) => "file_end",
            Self::DirEnd => "dir_end",
            Self::TransferEnd(_) => "transfer_end",
            Self::TransferDone(_) => "transfer_done",
            Self::Forward(_) => "forward",
            Self::ForwardConnected => "forward_connected",
        }
    }
}

/// Who the process runs as inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecUser {
    /// The unprivileged sandbox user (the default).
    Sandbox,
    /// Root of the sandbox's user namespace (`exec --root`), never the host's root.
    Root,
}

/// A terminal request: the process gets a PTY as its controlling terminal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TtyRequest {
    /// Initial size.
    pub size: WindowSize,
    /// Value of `TERM` for the process (e.g. `xterm-256color`).
    pub term: String,
}

/// A terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowSize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// What to run. Strings only: arguments and values containing NUL are refused by
/// [`ExecRequest::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Program and arguments; `argv[0]` is looked up in the process's `PATH`.
    pub argv: Vec<String>,
    /// Variables added on top of the guest's base environment (these win).
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox; `None` is the user's home.
    pub cwd: Option<String>,
    /// Identity.
    pub user: ExecUser,
    /// PTY mode when present, pipes mode otherwise.
    pub tty: Option<TtyRequest>,
}

/// Why an [`ExecRequest`] is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// `argv` is empty.
    #[error("exec request has an empty argv")]
    EmptyArgv,
    /// A string contains a NUL byte and cannot be passed to `execve`.
    #[error("{field} contains a NUL byte")]
    Nul {
        /// Which field (`argv[2]`, `env[FOO]`, `cwd`, `term`).
        field: String,
    },
    /// An environment variable name is empty or contains `=`.
    #[error("invalid environment variable name {name:?}")]
    BadEnvName {
        /// The name.
        name: String,
    },
    /// The working directory is not absolute.
    #[error("working directory {cwd:?} is not an absolute path")]
    RelativeCwd {
        /// The path.
        cwd: String,
    },
}

impl ExecRequest {
    /// Checks everything `execve` would otherwise trip over.
    pub fn validate(&self) -> Result<(), RequestError> {
        if self.argv.is_empty() {
            return Err(RequestError::EmptyArgv);
        }
        let nul = |field: String, value: &str| {
            if value.contains('\0') {
                Err(RequestError::Nul { field })
            } else {
                Ok(())
            }
        };
        for (i, arg) in self.argv.iter().enumerate() {
            nul(format!("argv[{i}]"), arg)?;
        }
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') {
                return Err(RequestError::BadEnvName { name: name.clone() });
            }
            nul(format!("env[{name}]"), name)?;
            nul(format!("env[{name}]"), value)?;
        }
        if let Some(cwd) = &self.cwd {
            nul("cwd".into(), cwd)?;
            if !cwd.starts_with('/') {
                return Err(RequestError::RelativeCwd { cwd: cwd.clone() });
            }
        }
        if let Some(tty) = &self.tty {
            nul("term".into(), &tty.term)?;
        }
        Ok(())
    }
}

/// Stable error codes carried by [`RemoteError`]; the CLI maps them to exit codes and hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// No common protocol version.
    VersionMismatch,
    /// The handshake proof did not verify.
    AuthFailed,
    /// The request was malformed ([`RequestError`]).
    BadRequest,
    /// `user = root` was asked for but this sandbox does not allow it.
    RootNotAllowed,
    /// The program was not found (`ENOENT`); the CLI returns 127.
    CommandNotFound,
    /// The program or working directory is not accessible (`EACCES`); the CLI returns 126.
    PermissionDenied,
    /// Any other failure to start the process, including a confinement step.
    SpawnFailed,
    /// A message arrived that is not valid at this point of the stream.
    UnexpectedMessage,
    /// The guest failed internally.
    Internal,
    /// A transfer's path does not exist (v3).
    NotFound,
    /// A transfer's target exists and `replace` was not asked for (v3).
    AlreadyExists,
    /// A transfer's path is refused: a link in it, a bad component, a special file (v3).
    BadPath,
    /// Reading or writing a transferred file failed (v3).
    Io,
    /// The transferred content does not match its size or hash (v3).
    Corrupt,
    /// A forward's port refused the connection (v3).
    ConnectionRefused,
}

/// A typed error travelling over the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[serde(deny_unknown_fields)]
#[error("{message} ({code:?})")]
pub struct RemoteError {
    /// What kind of failure.
    pub code: ErrorCode,
    /// One sentence for humans; untrusted text, escape before printing.
    pub message: String,
}

impl RemoteError {
    /// Builds an error value.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// What one frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// A control message.
    Control(Message),
    /// Standard input bytes (host → guest).
    Stdin(Vec<u8>),
    /// Standard output bytes (guest → host).
    Stdout(Vec<u8>),
    /// Standard error bytes (guest → host).
    Stderr(Vec<u8>),
    /// Bytes of the file being transferred (sender → receiver, v3).
    FileData(Vec<u8>),
}

/// Why a packet could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    /// Framing failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A control frame did not hold a valid message.
    #[error("malformed control message: {source}")]
    Malformed {
        /// The JSON error.
        source: serde_json::Error,
    },
}

impl Packet {
    /// Decodes a frame's payload according to its kind.
    pub fn from_frame(frame: Frame) -> Result<Self, PacketError> {
        Ok(match frame.kind {
            FrameKind::Control => Self::Control(
                serde_json::from_slice(&frame.payload)
                    .map_err(|source| PacketError::Malformed { source })?,
            ),
            FrameKind::Stdin => Self::Stdin(frame.payload),
            FrameKind::Stdout => Self::Stdout(frame.payload),
            FrameKind::Stderr => Self::Stderr(frame.payload),
            FrameKind::FileData => Self::FileData(frame.payload),
        })
    }

    /// A short name for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Control(message) => message.name(),
            Self::Stdin(_) => "stdin data",
            Self::Stdout(_) => "stdout data",
            Self::Stderr(_) => "stderr data",
            Self::FileData(_) => "file data",
        }
    }
}

/// Reads one packet; `Ok(None)` is a clean end of stream.
pub fn read_packet(reader: &mut impl Read) -> Result<Option<Packet>, PacketError> {
    match frame::read_frame(reader)? {
        Some(frame) => Packet::from_frame(frame).map(Some),
        None => Ok(None),
    }
}

/// Writes one packet as one frame.
pub fn write_packet(writer: &mut impl Write, packet: &Packet) -> Result<(), PacketError> {
    let mut buf = Vec::new();
    encode_packet(packet, &mut buf)?;
    frame::write_encoded(writer, &buf)?;
    Ok(())
}

/// Appends one packet, framed, to `out` (to send several packets with one write).
pub fn encode_packet(packet: &Packet, out: &mut Vec<u8>) -> Result<(), PacketError> {
    match packet {
        Packet::Control(message) => {
            let json =
                serde_json::to_vec(message).map_err(|source| PacketError::Malformed { source })?;
            frame::encode(FrameKind::Control, &json, out)?;
        }
        Packet::Stdin(data) => frame::encode(FrameKind::Stdin, data, out)?,
        Packet::Stdout(data) => frame::encode(FrameKind::Stdout, data, out)?,
        Packet::Stderr(data) => frame::encode(FrameKind::Stderr, data, out)?,
        Packet::FileData(data) => frame::encode(FrameKind::FileData, data, out)?,
    }
    Ok(())
}

/// Writes one control message.
pub fn write_message(writer: &mut impl Write, message: Message) -> Result<(), PacketError> {
    write_packet(writer, &Packet::Control(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ExecRequest {
        ExecRequest {
            argv: vec!["echo".into(), "hi".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
            cwd: Some("/work".into()),
            user: ExecUser::Sandbox,
            tty: Some(TtyRequest {
                size: WindowSize { rows: 24, cols: 80 },
                term: "xterm".into(),
            }),
        }
    }

    #[test]
    fn every_message_round_trips_through_a_frame() {
        let messages = [
            Message::Exec(request()),
            Message::StdinClosed,
            Message::Resize(WindowSize { rows: 1, cols: 2 }),
            Message::Signal { signal: 15 },
            Message::Started { pid: 7 },
            Message::Exited { code: 3 },
            Message::Signaled { signal: 9 },
            Message::Error(RemoteError::new(ErrorCode::AuthFailed, "no")),
            Message::Ready { version: 1 },
            Message::Session(crate::session::SessionMessage::List),
            Message::Session(crate::session::SessionMessage::Kill {
                name: "main".into(),
            }),
            Message::Session(crate::session::SessionMessage::Ensure(
                crate::session::EnsureRequest {
                    name: "main".into(),
                    size: WindowSize { rows: 2, cols: 3 },
                    spec: crate::session::SessionSpec {
                        command: crate::session::SessionCommand::LoginShell { preferred: None },
                        env: BTreeMap::new(),
                        cwd: None,
                        term: "xterm".into(),
                    },
                },
            )),
        ];
        for message in messages {
            let mut buf = Vec::new();
            write_message(&mut buf, message.clone()).unwrap();
            let back = read_packet(&mut std::io::Cursor::new(buf))
                .unwrap()
                .unwrap();
            assert_eq!(back, Packet::Control(message));
        }
    }

    #[test]
    fn stdio_data_frames_carry_raw_bytes_not_json() {
        let mut buf = Vec::new();
        write_packet(&mut buf, &Packet::Stdout(vec![0xff, 0, b'x'])).unwrap();
        assert_eq!(buf, [FrameKind::Stdout as u8, 0, 0, 0, 3, 0xff, 0, b'x']);
    }

    #[test]
    fn unknown_message_type_and_unknown_fields_are_refused() {
        for json in [
            r#"{"type":"launch_missiles"}"#,
            r#"{"type":"started","body":{"pid":1,"extra":2}}"#,
            r#"{"type":"exited","body":{"code":"zero"}}"#,
            r#"not json"#,
        ] {
            let frame = Frame {
                kind: FrameKind::Control,
                payload: json.as_bytes().to_vec(),
            };
            assert!(
                matches!(
                    Packet::from_frame(frame),
                    Err(PacketError::Malformed { .. })
                ),
                "{json}"
            );
        }
    }

    #[test]
    fn requests_that_execve_cannot_take_are_refused() {
        let mut r = request();
        r.argv.clear();
        assert_eq!(r.validate(), Err(RequestError::EmptyArgv));
        let mut r = request();
        r.argv.push("a\0b".into());
        assert!(matches!(r.validate(), Err(RequestError::Nul { .. })));
        let mut r = request();
        r.env.insert("A=B".into(), "x".into());
        assert!(matches!(r.validate(), Err(RequestError::BadEnvName { .. })));
        let mut r = request();
        r.cwd = Some("relative".into());
        assert!(matches!(
            r.validate(),
            Err(RequestError::RelativeCwd { .. })
        ));
        assert_eq!(request().validate(), Ok(()));
    }
}
