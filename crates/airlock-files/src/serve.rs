//! The sandbox's end of a transfer stream (called by the guest on the thread that serves it,
//! after that thread took the sandbox user's identity).
//!
//! Sandbox paths are checked again here (F5) and resolved without following any link
//! ([`Resolver::strict`]); errors travel back as typed wire errors.

use airlock_protocol::transfer::check_name;
use airlock_protocol::{
    ErrorCode, Message, PullRequest, PushRequest, RemoteError, TransferSummary,
};

use crate::error::TransferError;
use crate::path::{sandbox_path, PathError};
use crate::progress::NoProgress;
use crate::receive::receive_tree;
use crate::resolve::{ResolveError, Resolver};
use crate::send::send_tree;
use crate::wire::Wire;

fn path_error(err: &PathError) -> TransferError {
    TransferError::Remote(RemoteError::new(ErrorCode::BadPath, err.to_string()))
}

fn resolve_error(err: &ResolveError) -> TransferError {
    let code = match err {
        ResolveError::NotFound { .. } => ErrorCode::NotFound,
        ResolveError::Exists { .. } => ErrorCode::AlreadyExists,
        ResolveError::NotDirectory { .. }
        | ResolveError::LinkInWritable { .. }
        | ResolveError::TooManyLinks { .. }
        | ResolveError::Forbidden { .. } => ErrorCode::BadPath,
        ResolveError::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            _ => ErrorCode::Io,
        },
    };
    let message = match err {
        ResolveError::LinkInWritable { path } => {
            format!("{path} is a symbolic link; transfers follow no link inside the sandbox")
        }
        other => other.to_string(),
    };
    TransferError::Remote(RemoteError::new(code, message))
}

/// Tells the host why, when `result` failed, and hands the result back.
fn reported<T>(wire: &mut Wire, result: Result<T, TransferError>) -> Result<T, TransferError> {
    if let Err(err) = &result {
        match err {
            TransferError::Remote(remote) if remote.code != ErrorCode::UnexpectedMessage => {
                let _ignored = wire
                    .send(&Message::Error(remote.clone()))
                    .and_then(|()| wire.flush());
            }
            other => wire.abort(other),
        }
    }
    result
}

/// Receives a pushed tree and publishes it; answers `transfer_done`.
pub fn serve_push(
    wire: &mut Wire,
    request: &PushRequest,
) -> Result<TransferSummary, TransferError> {
    let result = (|| {
        let path = sandbox_path(&request.dest).map_err(|e| path_error(&e))?;
        check_name(&request.source_name).map_err(|e| {
            TransferError::Remote(RemoteError::new(ErrorCode::BadRequest, e.to_string()))
        })?;
        let target = Resolver::strict()
            .target(&path, &request.source_name, request.replace)
            .map_err(|e| resolve_error(&e))?;
        wire.send(&Message::TransferReady {
            target: target.display.clone(),
        })?;
        wire.flush()?;
        let summary = receive_tree(wire, &target, &NoProgress)?;
        wire.send(&Message::TransferDone(summary))?;
        wire.flush()?;
        Ok(summary)
    })();
    reported(wire, result)
}

/// Sends the tree a pull names.
pub fn serve_pull(
    wire: &mut Wire,
    request: &PullRequest,
) -> Result<TransferSummary, TransferError> {
    let result = (|| {
        let path = sandbox_path(&request.source).map_err(|e| path_error(&e))?;
        if path.is_root() {
            return Err(path_error(&PathError::Root));
        }
        let source = Resolver::strict()
            .source(&path)
            .map_err(|e| resolve_error(&e))?;
        wire.send(&Message::TransferReady {
            target: path.as_path().display().to_string(),
        })?;
        send_tree(wire, &source, &NoProgress)
    })();
    reported(wire, result)
}
