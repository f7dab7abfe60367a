//! Serving file transfer and port forwarding streams (protocol v3).
//!
//! A transfer runs on the stream's own thread after that thread — and only that thread — took
//! the sandbox user's identity: `setgroups`, `setresgid`, `setresuid` and an empty capability
//! set are per-thread system calls (`rustix::thread`), so the rest of PID 1 keeps its
//! privileges while the transfer can read and write exactly what the sandbox user can (an
//! unreadable file stays unreadable; files it creates belong to that user). PID 1 stays
//! non-dumpable throughout, so no sandbox process can ptrace the thread. The transfer code
//! itself (`airlock_files::serve`) resolves no link and strips setuid/setgid bits from every
//! mode it applies.
//!
//! A forward connects to `127.0.0.1:PORT` in the sandbox's network namespace, answers
//! `forward_connected`, and then copies raw bytes both ways.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use airlock_files::{TransferError, Wire};
use airlock_protocol::{write_message, ErrorCode, ForwardRequest, Message, RemoteError};
use rustix::process::{Gid, Uid};
use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::exec::Shared;

/// How long a forward waits for the sandbox port to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Drops this thread to the sandbox user: groups, gid, uid, then every capability.
fn become_sandbox_user(shared: &Shared) -> Result<(), std::io::Error> {
    let user = &shared.opts.sandbox_user;
    let gid = Gid::from_raw(user.gid);
    let uid = Uid::from_raw(user.uid);
    if shared.setgroups_allowed {
        rustix::thread::set_thread_groups(&[gid])?;
    }
    rustix::thread::set_thread_res_gid(gid, gid, gid)?;
    rustix::thread::set_thread_res_uid(uid, uid, uid)?;
    // A uid change from 0 clears the capabilities; from a non-zero uid it does not (an
    // unprivileged map's PID 1 holds every capability of its namespace as a non-zero uid).
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

/// Serves a `push`, `pull` or `forward` that opened `stream`.
pub fn serve(mut stream: UnixStream, shared: &Shared, request: Message) {
    match request {
        Message::Forward(forward) => serve_forward(stream, &forward),
        Message::Push(_) | Message::Pull(_) => {
            if let Err(err) = become_sandbox_user(shared) {
                let message = format!("cannot take the sandbox user's identity: {err}");
                let _ = write_message(
                    &mut stream,
                    Message::Error(RemoteError::new(ErrorCode::Internal, message)),
                );
                return;
            }
            airlock_files::raise_open_files_limit();
            let Ok(mut wire) = Wire::new(stream) else {
                return;
            };
            serve_transfers(&mut wire, request);
            let _ = wire.stream().shutdown(std::net::Shutdown::Both);
        }
        other => {
            let message = format!("expected push, pull or forward, received {}", other.name());
            let _ = write_message(
                &mut stream,
                Message::Error(RemoteError::new(ErrorCode::UnexpectedMessage, message)),
            );
        }
    }
}

/// Serves `first` and, after each push that published its tree, the next push on the same
/// stream (`up` sends all its home files this way: one stream, one identity switch). A pull,
/// a failure, anything but a push, or the host closing the stream ends it.
fn serve_transfers(wire: &mut Wire, first: Message) {
    let mut request = first;
    loop {
        let published = match &request {
            Message::Push(push) => airlock_files::serve::serve_push(wire, push).is_ok(),
            Message::Pull(pull) => {
                let _result: Result<_, TransferError> =
                    airlock_files::serve::serve_pull(wire, pull);
                false
            }
            _ => false,
        };
        if !published {
            return;
        }
        match wire.recv_message("after a push") {
            Ok(next @ Message::Push(_)) => request = next,
            Ok(_) | Err(_) => return,
        }
    }
}

fn serve_forward(mut stream: UnixStream, request: &ForwardRequest) {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, request.port));
    let tcp = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(tcp) => tcp,
        Err(err) => {
            let message = format!("nothing accepts connections on {addr} in the sandbox: {err}");
            let _ = write_message(
                &mut stream,
                Message::Error(RemoteError::new(ErrorCode::ConnectionRefused, message)),
            );
            return;
        }
    };
    if write_message(&mut stream, Message::ForwardConnected).is_err() || stream.flush().is_err() {
        return;
    }
    crate::relay::join(tcp, stream);
}
