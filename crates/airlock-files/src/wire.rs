//! The transfer's view of a stream: buffered frames, no flush per frame.
//!
//! Control messages and `file_data` frames are queued in one write buffer and flushed when it
//! fills, when the sender waits for an answer, or at the end, so 20,000 small files do not cost
//! 60,000 system calls. Reads reuse one payload buffer whatever the file size: memory stays
//! bounded by the frame limit (`airlock_protocol::MAX_FRAME_LEN`).

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;

use airlock_protocol::frame::{self, FrameError, FrameKind};
use airlock_protocol::{Message, PacketError};

use crate::error::TransferError;

/// Size of the read and write buffers. Equal to the data chunk, so a full `file_data` payload
/// is written straight from the sender's buffer and read straight into the receiver's, without
/// passing through these buffers (control messages and headers still coalesce).
const BUFFER: usize = airlock_protocol::transfer::DATA_CHUNK;

/// What one frame carried.
#[derive(Debug)]
pub enum Incoming<'a> {
    /// A control message.
    Message(Message),
    /// File bytes, borrowed from the wire's buffer until the next read.
    Data(&'a [u8]),
}

/// A buffered transfer stream.
#[derive(Debug)]
pub struct Wire {
    reader: BufReader<UnixStream>,
    writer: BufWriter<UnixStream>,
    payload: Vec<u8>,
}

/// A peer that went away (killed, or closed with our bytes unread) is [`TransferError::Closed`],
/// not a protocol fault.
fn write_error(source: std::io::Error) -> TransferError {
    match source.kind() {
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
            TransferError::Closed
        }
        _ => TransferError::Stream(PacketError::Frame(FrameError::Io {
            op: "write",
            source,
        })),
    }
}

impl Wire {
    /// Wraps a connected (and already authenticated) stream.
    pub fn new(stream: UnixStream) -> Result<Self, TransferError> {
        let writer = stream.try_clone().map_err(write_error)?;
        Ok(Self {
            reader: BufReader::with_capacity(BUFFER, stream),
            writer: BufWriter::with_capacity(BUFFER, writer),
            payload: Vec::new(),
        })
    }

    /// Queues a control message.
    pub fn send(&mut self, message: &Message) -> Result<(), TransferError> {
        let json = serde_json::to_vec(message)
            .map_err(|source| TransferError::Stream(PacketError::Malformed { source }))?;
        self.frame(FrameKind::Control, &json)
    }

    /// Queues file bytes (at most the frame limit).
    pub fn send_data(&mut self, data: &[u8]) -> Result<(), TransferError> {
        self.frame(FrameKind::FileData, data)
    }

    fn frame(&mut self, kind: FrameKind, payload: &[u8]) -> Result<(), TransferError> {
        let header = frame::header(kind, payload.len()).map_err(PacketError::Frame)?;
        self.writer.write_all(&header).map_err(write_error)?;
        self.writer.write_all(payload).map_err(write_error)
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> Result<(), TransferError> {
        self.writer.flush().map_err(write_error)
    }

    /// Reads the next frame. A clean end of stream is [`TransferError::Closed`]; frames that are
    /// not control or file data are refused.
    pub fn recv(&mut self, when: &'static str) -> Result<Incoming<'_>, TransferError> {
        match read_frame(&mut self.reader, &mut self.payload) {
            Ok(None) => Err(TransferError::Closed),
            // A peer that closed with our bytes unread resets the stream, and one that died
            // mid-frame truncates it: either way it is gone.
            Err(FrameError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::ConnectionReset =>
            {
                Err(TransferError::Closed)
            }
            Err(FrameError::Truncated { .. }) => Err(TransferError::Closed),
            Err(err) => Err(PacketError::Frame(err).into()),
            Ok(Some(FrameKind::Control)) => serde_json::from_slice(&self.payload)
                .map(Incoming::Message)
                .map_err(|source| PacketError::Malformed { source }.into()),
            Ok(Some(FrameKind::FileData)) => Ok(Incoming::Data(&self.payload)),
            Ok(Some(kind @ (FrameKind::Stdin | FrameKind::Stdout | FrameKind::Stderr))) => {
                Err(TransferError::Unexpected {
                    got: kind.name(),
                    when,
                })
            }
        }
    }

    /// Reads the next frame, which must be a control message; a peer's `error` becomes
    /// [`TransferError::Remote`].
    pub fn recv_message(&mut self, when: &'static str) -> Result<Message, TransferError> {
        match self.recv(when)? {
            Incoming::Message(Message::Error(remote)) => Err(TransferError::Remote(remote)),
            Incoming::Message(message) => Ok(message),
            Incoming::Data(_) => Err(TransferError::Unexpected {
                got: "file data",
                when,
            }),
        }
    }

    /// Tells the peer why this side gives up (best effort: the peer may be gone).
    pub fn abort(&mut self, err: &TransferError) {
        if matches!(err, TransferError::Remote(_) | TransferError::Closed) {
            return;
        }
        let _ignored = self
            .send(&Message::Error(err.to_remote()))
            .and_then(|()| self.flush());
    }

    /// The underlying stream (e.g. to shut it down).
    pub fn stream(&self) -> &UnixStream {
        self.reader.get_ref()
    }
}

/// Reads one frame into `payload`: the header and whatever is already buffered come from the
/// buffer, the rest of a large payload straight from the socket (one copy less per byte).
fn read_frame(
    reader: &mut BufReader<UnixStream>,
    payload: &mut Vec<u8>,
) -> Result<Option<FrameKind>, FrameError> {
    let io = |source: std::io::Error| FrameError::Io { op: "read", source };
    let mut header = [0u8; frame::HEADER_LEN];
    let mut got = 0;
    while got < header.len() {
        match reader.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(FrameError::Truncated {
                    part: "header",
                    expected: header.len() - got,
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    let (kind, len) = frame::parse_header(&header)?;
    payload.resize(len, 0);
    let buffered = reader.buffer();
    let take = buffered.len().min(len);
    payload[..take].copy_from_slice(&buffered[..take]);
    reader.consume(take);
    let mut filled = take;
    while filled < len {
        match reader.get_mut().read(&mut payload[filled..]) {
            Ok(0) => {
                return Err(FrameError::Truncated {
                    part: "payload",
                    expected: len - filled,
                })
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    Ok(Some(kind))
}
