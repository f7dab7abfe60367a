//! What can go wrong while a tree is sent, received or published.

use std::io;

use airlock_protocol::{EntryError, ErrorCode, HandshakeError, PacketError, RemoteError};

/// Why a transfer failed. Paths are relative to the tree's root (`.` is the root) or, for
/// publication, the destination as the user named it; they are untrusted text (a guest chose
/// the names): escape them before printing to a terminal.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// A system call on a file of the tree failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`"read"`, `"create"`, `"rename"`, …).
        op: &'static str,
        /// Which file.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The stream broke or carried a malformed frame.
    #[error("the transfer stream failed: {0}")]
    Stream(#[from] PacketError),
    /// The handshake failed.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The guest's protocol version predates file transfer.
    #[error("the sandbox speaks protocol version {version}, which has no file transfer; recreate it with this airlock (`airlock down`, `airlock up`)")]
    GuestTooOld {
        /// The negotiated version.
        version: u32,
    },
    /// The peer reported a typed failure.
    #[error("{}", .0.message)]
    Remote(RemoteError),
    /// The peer sent something not valid at this point of the stream.
    #[error("the peer sent {got} {when}")]
    Unexpected {
        /// What arrived.
        got: &'static str,
        /// Where in the stream.
        when: &'static str,
    },
    /// The stream ended before the transfer did.
    #[error("the peer closed the stream before the transfer was complete")]
    Closed,
    /// An entry the peer sent is malformed.
    #[error("{path}: {source}")]
    Entry {
        /// Where in the tree.
        path: String,
        /// What is wrong.
        source: EntryError,
    },
    /// The tree is deeper than the protocol allows.
    #[error("{path}: the tree is nested deeper than {max} directories")]
    TooDeep {
        /// Where in the tree.
        path: String,
        /// The limit.
        max: usize,
    },
    /// A received file does not match what the sender says it sent (F6).
    #[error("{path}: received {what} differs from what was sent")]
    Corrupt {
        /// Which file.
        path: String,
        /// `"size"`, `"sha256"` or `"entry count"`.
        what: &'static str,
    },
    /// The target exists and replacing it was not asked for.
    #[error("{path} already exists")]
    Exists {
        /// The target.
        path: String,
    },
    /// A name or link target is not UTF-8 (the wire carries UTF-8 names only).
    #[error("{path}: the name or link target is not valid UTF-8 and cannot be transferred")]
    NotUtf8 {
        /// Where in the tree (lossily decoded).
        path: String,
    },
    /// The source is a device node, FIFO or socket.
    #[error("{path} is not a regular file, directory or symbolic link")]
    Special {
        /// The source.
        path: String,
    },
    /// Something replaced the staged tree before it was published.
    #[error("{path}: the staged copy was changed by someone else before it was published")]
    Tampered {
        /// The destination.
        path: String,
    },
}

impl TransferError {
    /// The wire code a guest reports this failure with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Io { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => ErrorCode::NotFound,
                io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
                io::ErrorKind::AlreadyExists => ErrorCode::AlreadyExists,
                _ => ErrorCode::Io,
            },
            Self::Stream(_) | Self::Unexpected { .. } | Self::Closed => {
                ErrorCode::UnexpectedMessage
            }
            Self::Handshake(_) => ErrorCode::AuthFailed,
            Self::GuestTooOld { .. } => ErrorCode::VersionMismatch,
            Self::Remote(remote) => remote.code,
            Self::Entry { .. } | Self::TooDeep { .. } | Self::NotUtf8 { .. } => {
                ErrorCode::BadRequest
            }
            Self::Special { .. } => ErrorCode::BadPath,
            Self::Corrupt { .. } | Self::Tampered { .. } => ErrorCode::Corrupt,
            Self::Exists { .. } => ErrorCode::AlreadyExists,
        }
    }

    /// This failure as a wire error.
    pub fn to_remote(&self) -> RemoteError {
        RemoteError::new(self.code(), self.to_string())
    }

    pub(crate) fn io<'a>(
        op: &'static str,
        path: &'a str,
    ) -> impl FnOnce(rustix::io::Errno) -> Self + 'a {
        move |errno| Self::Io {
            op,
            path: path.to_owned(),
            source: errno.into(),
        }
    }
}
