//! The transfer's view of a stream: buffered frames, no flush per frame.
//!
//! Control messages and `file_data` frames are queued in one write buffer and flushed when it
//! fills, when the sender waits for an answer, or at the end, so 20,000 small files do not cost
//! 60,000 system calls. Reads reuse one payload buffer whatever the file size: memory stays
//! bounded by the frame limit (`airlock_protocol::MAX_FRAME_LEN`).

use std::io::{BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;

use airlock_protocol::frame::{self, FrameError, FrameKind};
use airlock_protocol::{Message, PacketError};

use crate::error::TransferError;

/// Size of the read and write buffers.
const BUFFER: usize = 512 * 1024;

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
        match frame::read_frame_into(&mut self.reader, &mut self.payload) {
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
