//! airlock-protocol: how the host and the guest talk (PRODUCT.md R3).
//!
//! Layers, bottom up:
//! - [`frame`]: `kind u8 | length u32 BE | payload`, at most [`frame::MAX_FRAME_LEN`] bytes.
//! - [`message`]: versioned control messages (JSON in control frames) and raw stdio packets.
//! - [`version`]: range negotiation; the highest common version wins, none → typed error.
//! - [`handshake`]: every stream starts with a guest nonce and a host HMAC-SHA256 proof of the
//!   per-epoch key, verified in constant time before anything else is accepted.
//! - [`fdpass`]: the control socket and `SCM_RIGHTS` stream opening.
//! - [`client`]: the host side of one exec.
//! - [`session`], [`session_client`], [`detach_key`]: named persistent sessions (v2): the
//!   messages, the host side of attach/list/kill/ensure, and the detach key.
//! - [`transfer`]: file transfer and port forwarding messages (v3).
//!
//! This crate knows nothing about backends: it works over any connected Unix stream.

pub mod client;
pub mod detach_key;
pub mod fdpass;
pub mod frame;
pub mod handoff;
pub mod handshake;
pub mod host;
pub mod message;
pub mod session;
pub mod session_client;
pub mod transfer;
pub mod version;

pub use client::{ClientError, ExecClient, ExecController, ExitStatus};
pub use detach_key::{DetachKey, DetachKeyError, DetachScanner, Scan, DEFAULT_DETACH_KEY};
pub use fdpass::{
    control_socketpair, open_stream, recv_stream, send_stream, try_send_stream, FdPassError,
};
pub use frame::{FrameError, FrameKind, MAX_FRAME_LEN};
pub use handshake::{
    guest_handshake, guest_hello, host_handshake, host_handshake_then, GuestChallenge,
    HandshakeError, Key,
};
pub use message::{
    read_packet, write_message, write_packet, ErrorCode, ExecRequest, ExecUser, Message, Packet,
    PacketError, RemoteError, RequestError, TtyRequest, WindowSize,
};
pub use session::{
    AttachRequest, EnsureRequest, Opened, SessionCommand, SessionErrorCode, SessionInfo,
    SessionMessage, SessionRefusal, SessionSpec, SessionState, DEFAULT_SESSION,
};
pub use session_client::{
    AttachEnd, Attached, SessionClient, SessionClientError, SessionController,
};
pub use transfer::{
    Entry, EntryError, EntryKind, FileEnd, ForwardRequest, Mtime, PullRequest, PushRequest,
    TransferSummary,
};
pub use version::{negotiate, VersionError, VersionRange, MAX_VERSION, MIN_VERSION};
