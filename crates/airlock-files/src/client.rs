//! The host's end of a transfer stream: push a host tree in, pull a sandbox tree out.
//!
//! Order of operations: [`connect`] authenticates the stream (protocol version 3 or later);
//! the host sends `push` or `pull`; the guest answers `transfer_ready` (or an error, before any
//! byte moves); then the tree flows; a push ends with the guest's `transfer_done` once it
//! published the tree, a pull once the host published it. A failure on either side removes
//! that side's staged copy and publishes nothing. After a `transfer_done` the host may send
//! the next `push` on the same stream (a guest from before this closes the stream instead:
//! the next push then reads [`TransferError::Closed`] and goes over a new stream); any failure
//! ends the stream.

use std::os::unix::net::UnixStream;

use airlock_protocol::{
    host_handshake, Key, Message, PullRequest, PushRequest, TransferSummary, VersionRange,
};

use crate::error::TransferError;
use crate::progress::Progress;
use crate::receive::{receive_tree, Target};
use crate::send::{send_tree, Source};
use crate::wire::Wire;

/// The first protocol version with file transfer.
pub const TRANSFER_VERSION: u32 = airlock_protocol::transfer::TRANSFER_SINCE;

/// What a finished transfer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The sandbox path the guest resolved (where a push landed; what a pull read).
    pub sandbox_path: String,
    /// Counts.
    pub summary: TransferSummary,
}

/// Authenticates `stream` with the epoch `key` and checks the guest can transfer files.
pub fn connect(mut stream: UnixStream, key: &Key) -> Result<Wire, TransferError> {
    let version = host_handshake(&mut stream, key, VersionRange::CURRENT)?;
    if version < TRANSFER_VERSION {
        return Err(TransferError::GuestTooOld { version });
    }
    Wire::new(stream)
}

fn ready(wire: &mut Wire) -> Result<String, TransferError> {
    match wire.recv_message("in answer to the request")? {
        Message::TransferReady { target } => Ok(target),
        other => Err(TransferError::Unexpected {
            got: other.name(),
            when: "in answer to the request",
        }),
    }
}

/// Sends the host tree `source` to `dest` in the sandbox.
pub fn push(
    wire: &mut Wire,
    source: &Source,
    dest: &str,
    replace: bool,
    progress: &dyn Progress,
) -> Result<Outcome, TransferError> {
    wire.send(&Message::Push(PushRequest {
        dest: dest.to_owned(),
        source_name: source.name.clone(),
        replace,
    }))?;
    wire.flush()?;
    let sandbox_path = ready(wire)?;
    if let Err(err) = send_tree(wire, source, progress) {
        // The guest may have given up first (its disk is full…): its reason is the better one.
        if matches!(err, TransferError::Stream(_) | TransferError::Closed) {
            if let Err(remote @ TransferError::Remote(_)) =
                wire.recv_message("after a failed write")
            {
                return Err(remote);
            }
        }
        wire.abort(&err);
        return Err(err);
    }
    match wire.recv_message("after the tree")? {
        Message::TransferDone(summary) => Ok(Outcome {
            sandbox_path,
            summary,
        }),
        other => Err(TransferError::Unexpected {
            got: other.name(),
            when: "after the tree",
        }),
    }
}

/// Receives the sandbox tree at `source` and publishes it at `target` on the host.
pub fn pull(
    wire: &mut Wire,
    source: &str,
    target: &Target,
    progress: &dyn Progress,
) -> Result<Outcome, TransferError> {
    wire.send(&Message::Pull(PullRequest {
        source: source.to_owned(),
    }))?;
    wire.flush()?;
    let sandbox_path = ready(wire)?;
    match receive_tree(wire, target, progress) {
        Ok(summary) => Ok(Outcome {
            sandbox_path,
            summary,
        }),
        Err(err) => {
            wire.abort(&err);
            Err(err)
        }
    }
}
