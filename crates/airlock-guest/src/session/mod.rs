//! Persistent sessions (PRODUCT S1): named PTYs owned by PID 1, so they outlive every client.
//!
//! A stream whose first message after the handshake is a session request is served here
//! (the messages are described in `airlock_protocol::session`):
//! - `attach`: find the session (or create it, or replace an exited one, when the request
//!   carries a spec), queue its redraw, register the client, answer `opened`; then this thread
//!   reads the client's keys, window sizes and `detach`, while a writer thread sends the
//!   client's queue (the redraw, live output, finally `ended` or `detached`). A stream that
//!   closes is a detach: the session keeps running.
//! - `ensure`, `list`, `kill`: one answer each.
//!
//! The table lock is held while a session is created, so two clients ensuring the same name
//! at once get one session. Lock order: the table, then a session's state; never the reverse.

mod live;
pub mod screen;

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use airlock_protocol::session::{
    validate_name, AttachRequest, EnsureRequest, Opened, SessionRefusal, SessionSpec, MAX_SESSIONS,
};
use airlock_protocol::{
    read_packet, write_packet, ErrorCode, Message, Packet, RemoteError, SessionErrorCode,
    SessionInfo, SessionMessage, SessionState, WindowSize,
};

pub use live::{login_shell, Outgoing, Session, CLIENT_QUEUE, SLOW_CLIENT_LIMIT};

use crate::exec::{send, send_error, Shared, Writer};

/// A client that does not take a frame for this long is cut off (its writer thread ends).
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Every session of the sandbox, by name.
#[derive(Default)]
pub struct Sessions {
    table: Mutex<BTreeMap<String, Arc<Session>>>,
}

/// What [`Sessions::open`] found or made.
struct Found {
    session: Arc<Session>,
    created: bool,
    replaced: Option<SessionState>,
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Session>>> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The running session `name`; with `create`, made (or an exited one replaced) if need be.
    /// Without `create` an exited session is returned as it is (its last screen and status).
    fn open(
        &self,
        shared: &Shared,
        name: &str,
        size: WindowSize,
        create: Option<&SessionSpec>,
    ) -> Result<Found, SessionRefusal> {
        let mut table = self.lock();
        let Some(spec) = create else {
            return match table.get(name) {
                Some(session) => Ok(Found {
                    session: Arc::clone(session),
                    created: false,
                    replaced: None,
                }),
                None => Err(no_such_session(name)),
            };
        };
        let replaced = match table.get(name) {
            Some(session) if session.is_running() => {
                return Ok(Found {
                    session: Arc::clone(session),
                    created: false,
                    replaced: None,
                })
            }
            Some(session) => Some(session.info().state),
            None if table.len() >= MAX_SESSIONS => {
                return Err(SessionRefusal::new(
                    SessionErrorCode::LimitReached,
                    format!("the sandbox already has {MAX_SESSIONS} sessions; remove one first"),
                ))
            }
            None => None,
        };
        let session = Session::spawn(shared, name, spec, size)?;
        table.insert(name.to_owned(), Arc::clone(&session));
        Ok(Found {
            session,
            created: true,
            replaced,
        })
    }

    /// Every session, ordered by name.
    pub fn list(&self) -> Vec<SessionInfo> {
        let sessions: Vec<Arc<Session>> = self.lock().values().cloned().collect();
        sessions.iter().map(|s| s.info()).collect()
    }

    /// Ends `name`'s processes and removes it; its final state.
    fn kill(&self, shared: &Shared, name: &str) -> Result<SessionInfo, SessionRefusal> {
        let session = self
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| no_such_session(name))?;
        let info = session.terminate(&shared.children);
        if info.state == SessionState::Running {
            return Err(SessionRefusal::new(
                SessionErrorCode::Internal,
                format!("session {name} did not end after SIGKILL; it is kept"),
            ));
        }
        let mut table = self.lock();
        if table.get(name).is_some_and(|s| Arc::ptr_eq(s, &session)) {
            table.remove(name);
        }
        Ok(info)
    }
}

fn no_such_session(name: &str) -> SessionRefusal {
    SessionRefusal::new(
        SessionErrorCode::NoSuchSession,
        format!("there is no session {name}"),
    )
}

fn reply(writer: &Writer, message: SessionMessage) {
    send(writer, &Packet::Control(Message::Session(message)));
}

fn refuse(writer: &Writer, refusal: SessionRefusal) {
    reply(writer, SessionMessage::Refused(refusal));
}

fn checked_name(name: &str) -> Result<(), SessionRefusal> {
    validate_name(name)
        .map_err(|e| SessionRefusal::new(SessionErrorCode::InvalidName, e.to_string()))
}

fn checked_spec(spec: &SessionSpec) -> Result<(), SessionRefusal> {
    spec.validate()
        .map_err(|e| SessionRefusal::new(SessionErrorCode::BadRequest, e.to_string()))
}

/// Serves one session stream whose first message was `request`.
pub fn serve(stream: UnixStream, writer: &Writer, shared: &Shared, request: SessionMessage) {
    match request {
        SessionMessage::Attach(request) => attach(stream, writer, shared, request),
        SessionMessage::Ensure(request) => match ensure(shared, &request) {
            Ok(opened) => reply(writer, SessionMessage::Opened(opened)),
            Err(refusal) => refuse(writer, refusal),
        },
        SessionMessage::List => reply(
            writer,
            SessionMessage::Listing {
                sessions: shared.sessions.list(),
            },
        ),
        SessionMessage::Kill { name } => {
            match checked_name(&name).and_then(|()| shared.sessions.kill(shared, &name)) {
                Ok(info) => reply(writer, SessionMessage::Info(info)),
                Err(refusal) => refuse(writer, refusal),
            }
        }
        other @ (SessionMessage::Detach
        | SessionMessage::Opened(_)
        | SessionMessage::Info(_)
        | SessionMessage::Listing { .. }
        | SessionMessage::Ended(_)
        | SessionMessage::Detached
        | SessionMessage::Refused(_)) => send_error(
            writer,
            ErrorCode::UnexpectedMessage,
            format!("expected a session request, received {}", other.name()),
        ),
    }
}

fn ensure(shared: &Shared, request: &EnsureRequest) -> Result<Opened, SessionRefusal> {
    checked_name(&request.name)?;
    checked_spec(&request.spec)?;
    let found = shared
        .sessions
        .open(shared, &request.name, request.size, Some(&request.spec))?;
    Ok(Opened {
        session: found.session.info(),
        created: found.created,
        replaced: found.replaced,
    })
}

fn attach(mut stream: UnixStream, writer: &Writer, shared: &Shared, request: AttachRequest) {
    let opened = checked_name(&request.name)
        .and_then(|()| request.create.as_ref().map_or(Ok(()), checked_spec))
        .and_then(|()| {
            shared
                .sessions
                .open(shared, &request.name, request.size, request.create.as_ref())
        });
    let found = match opened {
        Ok(found) => found,
        Err(refusal) => return refuse(writer, refusal),
    };
    let session = found.session;
    let (queue, outgoing) = sync_channel(CLIENT_QUEUE);
    let client = match session.attach(request.size, queue) {
        Ok(client) => client,
        Err(refusal) => return refuse(writer, refusal),
    };
    let opened = Opened {
        session: session.info(),
        created: found.created,
        replaced: found.replaced,
    };
    if let Ok(stream) = writer.lock() {
        let _ = stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
    }
    if !send(
        writer,
        &Packet::Control(Message::Session(SessionMessage::Opened(opened))),
    ) {
        if let Some(id) = client {
            session.detach(id, None);
        }
        return;
    }
    let for_writer = Arc::clone(writer);
    let Ok(writer_thread) =
        thread::Builder::new().spawn(move || write_client(&outgoing, &for_writer))
    else {
        if let Some(id) = client {
            session.detach(id, None);
        }
        return;
    };
    if let Some(id) = client {
        read_client(&mut stream, &session, id);
    }
    let _ = writer_thread.join();
}

/// The attached client's input until it detaches or goes away.
fn read_client(stream: &mut UnixStream, session: &Session, id: u64) {
    loop {
        let last = match read_packet(stream) {
            Ok(Some(Packet::Stdin(data))) => {
                session.input(data);
                continue;
            }
            Ok(Some(Packet::Control(Message::Resize(size)))) => {
                session.resize(id, size);
                continue;
            }
            Ok(Some(Packet::Control(Message::Session(SessionMessage::Detach)))) => {
                Some(Outgoing::Detached)
            }
            // A half-closed client (detaching), one that is gone (killed, terminal closed),
            // or our own close after `ended`: a detach.
            Ok(None) => Some(Outgoing::Detached),
            Err(err) => Some(Outgoing::Error(RemoteError::new(
                ErrorCode::BadRequest,
                err.to_string(),
            ))),
            Ok(Some(other)) => Some(Outgoing::Error(RemoteError::new(
                ErrorCode::UnexpectedMessage,
                format!("{} is not valid while attached", other.name()),
            ))),
        };
        return session.detach(id, last);
    }
}

/// Sends a client's queue until its last message, then closes the stream.
fn write_client(outgoing: &Receiver<Outgoing>, writer: &Writer) {
    let finished = loop {
        let Ok(item) = outgoing.recv() else {
            break false;
        };
        let (packet, last) = match item {
            Outgoing::Output(data) => (Packet::Stdout(data), false),
            Outgoing::Ended(info) => (
                Packet::Control(Message::Session(SessionMessage::Ended(info))),
                true,
            ),
            Outgoing::Detached => (
                Packet::Control(Message::Session(SessionMessage::Detached)),
                true,
            ),
            Outgoing::Error(err) => (Packet::Control(Message::Error(err)), true),
        };
        if !send(writer, &packet) {
            break true;
        }
        if last {
            break true;
        }
    };
    let stream = writer
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !finished {
        // Dropped without a last word: the client fell behind the session's output.
        let err = RemoteError::new(
            ErrorCode::Internal,
            "this client could not keep up with the session's output and was detached; attach again",
        );
        let _ = write_packet(&mut &*stream, &Packet::Control(Message::Error(err)));
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}
