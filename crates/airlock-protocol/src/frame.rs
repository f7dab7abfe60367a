//! Framing over a byte stream.
//!
//! A frame is a 5-byte header followed by its payload:
//!
//! ```text
//! +--------+----------------------+-----------------+
//! | kind u8| length u32 big-endian| payload (length)|
//! +--------+----------------------+-----------------+
//! ```
//!
//! Invariants:
//! - `length <= MAX_FRAME_LEN`; a larger length is refused *from the header alone*, before any
//!   payload is read or allocated, so a hostile peer cannot make the reader allocate more than
//!   [`MAX_FRAME_LEN`] bytes.
//! - An unknown `kind` byte is refused (it is not skipped): a peer that sends frames we do not
//!   understand is speaking another version and must have been refused during negotiation.
//! - EOF exactly on a frame boundary is a clean end of stream (`Ok(None)`); EOF inside a header
//!   or payload is [`FrameError::Truncated`].

use std::io::{self, Read, Write};

/// The largest payload a frame may carry (1 MiB).
pub const MAX_FRAME_LEN: u32 = 1 << 20;
/// Size of the frame header: one kind byte and a big-endian u32 length.
pub const HEADER_LEN: usize = 5;

/// What a frame's payload is. Control payloads are JSON [`crate::Message`]s; the stdio kinds
/// carry raw bytes, never JSON. New kinds may be added by later protocol versions; they are
/// only sent once both sides negotiated a version that knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// A JSON-encoded control message.
    Control = 1,
    /// Bytes for the process's standard input (host → guest).
    Stdin = 2,
    /// Bytes the process wrote to its standard output (guest → host); in PTY mode, everything
    /// the terminal produced.
    Stdout = 3,
    /// Bytes the process wrote to its standard error (guest → host); never used in PTY mode.
    Stderr = 4,
    /// Bytes of a transferred file (sender → receiver, protocol v3; `crate::transfer`).
    FileData = 8,
}

impl FrameKind {
    /// Every kind this version knows, in wire order.
    pub const ALL: [FrameKind; 5] = [
        Self::Control,
        Self::Stdin,
        Self::Stdout,
        Self::Stderr,
        Self::FileData,
    ];

    /// Parses the header's kind byte.
    pub fn from_byte(byte: u8) -> Result<Self, FrameError> {
        match byte {
            1 => Ok(Self::Control),
            2 => Ok(Self::Stdin),
            3 => Ok(Self::Stdout),
            4 => Ok(Self::Stderr),
            8 => Ok(Self::FileData),
            kind => Err(FrameError::UnknownKind { kind }),
        }
    }

    /// The lowercase name used in the schema snapshot and in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Control => "control",
            Self::Stdin => "stdin",
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::FileData => "file_data",
        }
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What the payload is.
    pub kind: FrameKind,
    /// The payload, at most [`MAX_FRAME_LEN`] bytes.
    pub payload: Vec<u8>,
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The header announced (or the caller tried to send) more than [`MAX_FRAME_LEN`] bytes.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    Oversized {
        /// The announced or attempted payload length.
        len: u64,
        /// The limit, [`MAX_FRAME_LEN`].
        max: u32,
    },
    /// The header's kind byte names no frame kind of this protocol.
    #[error("unknown frame kind {kind:#04x}")]
    UnknownKind {
        /// The kind byte received.
        kind: u8,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame: expected {expected} more bytes of {part}")]
    Truncated {
        /// `"header"` or `"payload"`.
        part: &'static str,
        /// How many bytes were still missing.
        expected: usize,
    },
    /// The underlying stream failed.
    #[error("{op} failed on the control stream: {source}")]
    Io {
        /// `"read"` or `"write"`.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

/// Parses the header, refusing unknown kinds and oversized lengths (before any payload is read).
pub fn parse_header(header: &[u8; HEADER_LEN]) -> Result<(FrameKind, usize), FrameError> {
    let kind = FrameKind::from_byte(header[0])?;
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    if len > MAX_FRAME_LEN {
        return Err(FrameError::Oversized {
            len: u64::from(len),
            max: MAX_FRAME_LEN,
        });
    }
    Ok((kind, len as usize))
}

/// Decodes one frame from the front of `buf`. `Ok(None)` means more bytes are needed; on
/// success returns the frame and how many bytes it used.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        // An unknown kind is refused as soon as its byte arrives.
        if let Some(&first) = buf.first() {
            FrameKind::from_byte(first)?;
        }
        return Ok(None);
    };
    let header: &[u8; HEADER_LEN] = header.try_into().expect("slice has HEADER_LEN bytes");
    let (kind, len) = parse_header(header)?;
    let Some(payload) = buf.get(HEADER_LEN..HEADER_LEN + len) else {
        return Ok(None);
    };
    let frame = Frame {
        kind,
        payload: payload.to_vec(),
    };
    Ok(Some((frame, HEADER_LEN + len)))
}

/// Appends the encoding of one frame to `out`, refusing payloads over [`MAX_FRAME_LEN`].
pub fn encode(kind: FrameKind, payload: &[u8], out: &mut Vec<u8>) -> Result<(), FrameError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&len| len <= MAX_FRAME_LEN)
        .ok_or(FrameError::Oversized {
            len: payload.len() as u64,
            max: MAX_FRAME_LEN,
        })?;
    out.reserve(HEADER_LEN + payload.len());
    out.push(kind as u8);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// Reads exactly `buf.len()` bytes; returns how many were read before EOF.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(FrameError::Io { op: "read", source }),
        }
    }
    Ok(filled)
}

/// Reads one frame. `Ok(None)` is a clean end of stream on a frame boundary.
pub fn read_frame(reader: &mut impl Read) -> Result<Option<Frame>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(reader, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(FrameError::Truncated {
            part: "header",
            expected: HEADER_LEN - got,
        });
    }
    let (kind, len) = parse_header(&header)?;
    let mut payload = vec![0u8; len];
    let got = read_full(reader, &mut payload)?;
    if got < len {
        return Err(FrameError::Truncated {
            part: "payload",
            expected: len - got,
        });
    }
    Ok(Some(Frame { kind, payload }))
}

/// The header of a frame of `len` payload bytes, for writers that send the payload from
/// their own buffer (no copy) and flush when they choose.
pub fn header(kind: FrameKind, len: usize) -> Result<[u8; HEADER_LEN], FrameError> {
    let len = u32::try_from(len)
        .ok()
        .filter(|&len| len <= MAX_FRAME_LEN)
        .ok_or(FrameError::Oversized {
            len: len as u64,
            max: MAX_FRAME_LEN,
        })?;
    let mut out = [0u8; HEADER_LEN];
    out[0] = kind as u8;
    out[1..].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}

/// Writes one frame with a single `write_all` so concurrent writers holding a lock never
/// interleave partial frames.
pub fn write_frame(
    writer: &mut impl Write,
    kind: FrameKind,
    payload: &[u8],
) -> Result<(), FrameError> {
    let mut buf = Vec::new();
    encode(kind, payload, &mut buf)?;
    write_encoded(writer, &buf)
}

/// Writes frames already encoded with [`encode`] (one or several) in one write, and flushes.
pub fn write_encoded(writer: &mut impl Write, frames: &[u8]) -> Result<(), FrameError> {
    writer
        .write_all(frames)
        .and_then(|()| writer.flush())
        .map_err(|source| FrameError::Io {
            op: "write",
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trips_through_encode_and_read() {
        let mut buf = Vec::new();
        encode(FrameKind::Stdout, b"hello", &mut buf).unwrap();
        encode(FrameKind::Stderr, b"", &mut buf).unwrap();
        let mut cursor = io::Cursor::new(buf);
        let a = read_frame(&mut cursor).unwrap().unwrap();
        let b = read_frame(&mut cursor).unwrap().unwrap();
        assert_eq!(
            (a.kind, a.payload.as_slice()),
            (FrameKind::Stdout, &b"hello"[..])
        );
        assert_eq!((b.kind, b.payload.len()), (FrameKind::Stderr, 0));
        assert!(read_frame(&mut cursor).unwrap().is_none());
    }

    #[test]
    fn oversized_header_is_refused_before_reading_payload() {
        let mut buf = vec![FrameKind::Stdin as u8];
        buf.extend_from_slice(&(MAX_FRAME_LEN + 1).to_be_bytes());
        // No payload follows: the reader must refuse from the header alone.
        let err = read_frame(&mut io::Cursor::new(&buf)).unwrap_err();
        assert!(
            matches!(err, FrameError::Oversized { len, .. } if len == u64::from(MAX_FRAME_LEN) + 1)
        );
        assert!(matches!(decode(&buf), Err(FrameError::Oversized { .. })));
    }

    #[test]
    fn sending_an_oversized_payload_is_refused() {
        let payload = vec![0u8; MAX_FRAME_LEN as usize + 1];
        let err = encode(FrameKind::Stdin, &payload, &mut Vec::new()).unwrap_err();
        assert!(matches!(err, FrameError::Oversized { .. }));
        let max = vec![0u8; MAX_FRAME_LEN as usize];
        assert!(encode(FrameKind::Stdin, &max, &mut Vec::new()).is_ok());
    }

    #[test]
    fn unknown_frame_kind_is_refused() {
        for kind in [0u8, 5, 7, 9, 0xff] {
            let buf = [kind, 0, 0, 0, 0];
            assert!(matches!(
                read_frame(&mut io::Cursor::new(&buf)),
                Err(FrameError::UnknownKind { kind: k }) if k == kind
            ));
            assert!(matches!(
                decode(&buf[..1]),
                Err(FrameError::UnknownKind { .. })
            ));
        }
    }

    #[test]
    fn eof_inside_a_frame_is_truncation_not_clean_end() {
        let mut buf = Vec::new();
        encode(FrameKind::Control, b"{}", &mut buf).unwrap();
        for cut in 1..buf.len() {
            let err = read_frame(&mut io::Cursor::new(&buf[..cut])).unwrap_err();
            assert!(matches!(err, FrameError::Truncated { .. }), "cut at {cut}");
            assert!(decode(&buf[..cut]).unwrap().is_none());
        }
    }
}
