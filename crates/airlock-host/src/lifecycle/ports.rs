//! Published ports: host loopback listeners forwarded into the sandbox (`airlock ports`).
//!
//! The keeper owns them (they must outlive the CLI, and die with the sandbox: `down` stops the
//! keeper). Invariants:
//! - every listener is bound to `127.0.0.1`, never another address; a host port already in use
//!   is a clear error ([`PortsError::InUse`]);
//! - each accepted connection opens its own stream to PID 1 over the control socket,
//!   authenticates it with the epoch key, and asks for `forward { port }`; the guest connects
//!   to `127.0.0.1:port` inside the sandbox and the two sockets are joined byte for byte. A
//!   guest that refuses (nothing listens there) closes the host connection at once;
//! - unpublishing shuts the listener and every connection it accepted, and returns only once
//!   the port is closed, so a client connecting afterwards is refused;
//! - the table is mirrored to `ports.json` in the sandbox's state directory (written
//!   atomically) for `status`.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use crate::wire::{Forward, PortsReply, PortsRequest, MODE_PORTS, PORTS_FILE};
use airlock_protocol::{
    host_handshake, read_packet, write_message, ForwardRequest, Key, Message, Packet, VersionRange,
};

/// Why a ports request failed.
#[derive(Debug, thiserror::Error)]
pub enum PortsError {
    /// The host port is taken by another program.
    #[error("host port {port} is already in use on 127.0.0.1")]
    InUse {
        /// The port.
        port: u16,
    },
    /// The host port is already forwarded by this sandbox.
    #[error("host port {port} is already published (to sandbox port {guest})")]
    AlreadyPublished {
        /// The port.
        port: u16,
        /// Where it goes.
        guest: u16,
    },
    /// Nothing is published on this host port.
    #[error("host port {port} is not published")]
    NotPublished {
        /// The port.
        port: u16,
    },
    /// Binding or a thread failed.
    #[error("cannot publish host port {port}: {source}")]
    Io {
        /// The port.
        port: u16,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl PortsError {
    fn kind(&self) -> &'static str {
        match self {
            Self::InUse { .. } => "in_use",
            Self::AlreadyPublished { .. } => "already_published",
            Self::NotPublished { .. } => "not_published",
            Self::Io { .. } => "io",
        }
    }
}

/// One live listener.
struct Running {
    guest: u16,
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
    conns: Conns,
    accept: Option<JoinHandle<()>>,
}

impl Running {
    fn close(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocked accept (EINVAL on a listening socket that was shut down).
        let _ = rustix::net::shutdown(self.listener.as_fd(), rustix::net::Shutdown::Both);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let conns = std::mem::take(&mut *lock(&self.conns));
        for conn in conns.into_values() {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The published ports of one sandbox.
pub struct Forwards {
    control: Arc<OwnedFd>,
    key: [u8; 32],
    table: Mutex<BTreeMap<u16, Running>>,
    state_file: PathBuf,
}

impl Forwards {
    /// An empty table forwarding through `control` (the sandbox's control socket).
    pub fn new(control: Arc<OwnedFd>, key: [u8; 32], state_dir: &Path) -> Self {
        let forwards = Self {
            control,
            key,
            table: Mutex::new(BTreeMap::new()),
            state_file: state_dir.join(PORTS_FILE),
        };
        forwards.save(&[]);
        forwards
    }

    /// Every published port, by host port.
    pub fn list(&self) -> Vec<Forward> {
        lock(&self.table)
            .iter()
            .map(|(&host, r)| Forward {
                host,
                guest: r.guest,
            })
            .collect()
    }

    /// Starts forwarding `127.0.0.1:host` (0: a free port) to the sandbox's `guest` port.
    pub fn publish(&self, host: u16, guest: u16) -> Result<Forward, PortsError> {
        let mut table = lock(&self.table);
        if let Some(running) = table.get(&host) {
            return Err(PortsError::AlreadyPublished {
                port: host,
                guest: running.guest,
            });
        }
        let listener =
            TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, host))).map_err(|source| {
                match source.kind() {
                    std::io::ErrorKind::AddrInUse => PortsError::InUse { port: host },
                    _ => PortsError::Io { port: host, source },
                }
            })?;
        let host = listener
            .local_addr()
            .map_err(|source| PortsError::Io { port: host, source })?
            .port();
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Conns::default();
        let accept = {
            let (listener, stop, conns) =
                (Arc::clone(&listener), Arc::clone(&stop), Arc::clone(&conns));
            let (control, key) = (Arc::clone(&self.control), self.key);
            thread::Builder::new()
                .name(format!("port-{host}"))
                .spawn(move || accept_loop(&listener, &stop, &conns, &control, key, guest))
                .map_err(|source| PortsError::Io { port: host, source })?
        };
        table.insert(
            host,
            Running {
                guest,
                listener,
                stop,
                conns,
                accept: Some(accept),
            },
        );
        drop(table);
        self.save(&self.list());
        Ok(Forward { host, guest })
    }

    /// Stops forwarding `host`: the listener and its connections are closed on return.
    pub fn unpublish(&self, host: u16) -> Result<(), PortsError> {
        let running = lock(&self.table)
            .remove(&host)
            .ok_or(PortsError::NotPublished { port: host })?;
        running.close();
        self.save(&self.list());
        Ok(())
    }

    /// Closes everything (the keeper is stopping).
    pub fn close_all(&self) {
        let table = std::mem::take(&mut *lock(&self.table));
        for (_, running) in table {
            running.close();
        }
        let _ = std::fs::remove_file(&self.state_file);
    }

    /// Serves one `P` request on a keeper connection: one JSON line in, one JSON line out.
    pub fn serve_request(&self, conn: UnixStream) -> std::io::Result<()> {
        let mut line = String::new();
        BufReader::new(conn.try_clone()?).read_line(&mut line)?;
        let reply = match serde_json::from_str::<PortsRequest>(line.trim()) {
            Err(e) => PortsReply::Error {
                kind: "bad_request".into(),
                message: format!("malformed ports request: {e}"),
            },
            Ok(request) => {
                let done = match request {
                    PortsRequest::Publish { host, guest } => self.publish(host, guest).map(|_| ()),
                    PortsRequest::Unpublish { host } => self.unpublish(host),
                    PortsRequest::List => Ok(()),
                };
                match done {
                    Ok(()) => PortsReply::Ok {
                        forwards: self.list(),
                    },
                    Err(e) => PortsReply::Error {
                        kind: e.kind().into(),
                        message: e.to_string(),
                    },
                }
            }
        };
        let mut out = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
        out.push(b'\n');
        let mut conn = conn;
        conn.write_all(&out)
    }

    /// Mirrors the table to `ports.json` (temp file + rename: readers never see half of it).
    fn save(&self, forwards: &[Forward]) {
        let Ok(json) = serde_json::to_vec(forwards) else {
            return;
        };
        let tmp = self.state_file.with_extension("json.tmp");
        if std::fs::write(&tmp, json).is_ok() {
            let _ = std::fs::rename(&tmp, &self.state_file);
        }
    }
}

impl Drop for Forwards {
    fn drop(&mut self) {
        self.close_all();
    }
}

/// Reads the published ports a keeper recorded (empty when it recorded none).
pub fn read_published(state_dir: &Path) -> Vec<Forward> {
    std::fs::read(state_dir.join(PORTS_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Connections a listener accepted that are still open, by serial number (closed on
/// unpublish; each removes itself when it ends, so none is held longer than it lives).
type Conns = Arc<Mutex<HashMap<u64, TcpStream>>>;

/// Connections forwarded at once per published port; more are closed at once.
pub const MAX_CONNECTIONS: usize = 512;

fn accept_loop(
    listener: &TcpListener,
    stop: &AtomicBool,
    conns: &Conns,
    control: &Arc<OwnedFd>,
    key: [u8; 32],
    guest: u16,
) {
    let mut serial = 0u64;
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok((tcp, _)) = accepted else {
            // Out of descriptors and the like: back off rather than spin.
            thread::sleep(std::time::Duration::from_millis(50));
            continue;
        };
        serial += 1;
        {
            let mut live = lock(conns.as_ref());
            let Ok(clone) = tcp.try_clone() else { continue };
            if live.len() >= MAX_CONNECTIONS {
                continue; // dropping `tcp` closes it
            }
            live.insert(serial, clone);
        }
        let (control, mine) = (Arc::clone(control), Arc::clone(conns));
        let id = serial;
        let spawned = thread::Builder::new().spawn(move || {
            forward_one(tcp, &control, key, guest);
            lock(&mine).remove(&id);
        });
        if spawned.is_err() {
            lock(conns.as_ref()).remove(&id);
        }
    }
}

/// Opens a forward stream to the guest and joins it with `tcp`.
fn forward_one(tcp: TcpStream, control: &OwnedFd, key: [u8; 32], guest: u16) {
    let Ok(stream) = open_forward(control, key, guest) else {
        let _ = tcp.shutdown(Shutdown::Both);
        return;
    };
    let _ = tcp.set_nodelay(true);
    let (Ok(tcp_rd), Ok(stream_wr)) = (tcp.try_clone(), stream.try_clone()) else {
        return;
    };
    let upstream = thread::spawn(move || copy_then_close(tcp_rd, stream_wr));
    copy_then_close(stream, tcp);
    let _ = upstream.join();
}

fn open_forward(control: &OwnedFd, key: [u8; 32], port: u16) -> std::io::Result<UnixStream> {
    let mut stream =
        airlock_protocol::open_stream(control.as_fd()).map_err(std::io::Error::other)?;
    let version = host_handshake(&mut stream, &Key::from_bytes(key), VersionRange::CURRENT)
        .map_err(std::io::Error::other)?;
    if version < airlock_protocol::transfer::TRANSFER_SINCE {
        return Err(std::io::Error::other("the guest predates port forwarding"));
    }
    write_message(&mut stream, Message::Forward(ForwardRequest { port }))
        .map_err(std::io::Error::other)?;
    match read_packet(&mut stream) {
        Ok(Some(Packet::Control(Message::ForwardConnected))) => Ok(stream),
        Ok(Some(Packet::Control(Message::Error(e)))) => Err(std::io::Error::other(e.message)),
        Ok(_) => Err(std::io::Error::other("unexpected answer to forward")),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

trait HalfClose {
    fn half_close(&self, how: Shutdown);
}

impl HalfClose for TcpStream {
    fn half_close(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
}

impl HalfClose for UnixStream {
    fn half_close(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
}

/// Copies until EOF, then half-closes the writer (the other direction keeps flowing); on an
/// error closes both.
fn copy_then_close<R: Read + HalfClose, W: Write + HalfClose>(mut from: R, mut to: W) {
    let failed = std::io::copy(&mut from, &mut to).is_err();
    to.half_close(Shutdown::Write);
    if failed {
        from.half_close(Shutdown::Both);
        to.half_close(Shutdown::Both);
    }
}

/// Sends one request to the keeper listening on `socket` and returns the table after it.
pub fn request(socket: &Path, request: &PortsRequest) -> Result<Vec<Forward>, crate::HostError> {
    use crate::error::{ErrorKind, HostError};
    let reply = super::exec::ask_keeper(socket, MODE_PORTS, request, "ports.keeper")?;
    let reply: PortsReply = serde_json::from_str(&reply).map_err(|_| {
        HostError::new(
            ErrorKind::Failed,
            "ports.keeper",
            "the sandbox's keeper does not know about ports (it predates them)",
        )
        .with_hint("recreate the sandbox with this airlock: `airlock down`, then `airlock up`")
    })?;
    match reply {
        PortsReply::Ok { forwards } => Ok(forwards),
        PortsReply::Error { kind, message } => {
            let (code, hint) = match kind.as_str() {
                "in_use" => (
                    "ports.in_use",
                    "pick another host port (HOST:GUEST), or 0:GUEST for any free one",
                ),
                "already_published" => ("ports.already_published", "unpublish it first"),
                "not_published" => ("ports.not_published", "run `airlock ports` to list them"),
                _ => ("ports.failed", "run `airlock status`"),
            };
            Err(HostError::new(ErrorKind::Failed, code, message).with_hint(hint))
        }
    }
}

/// Publishes the user config's `[[ports]]` into the ready sandbox whose runtime directory is
/// `runtime_dir`, through the same keeper request as `ports --publish`. A host port already
/// forwarded is left as it is; every other failure (a host port in use above all) becomes a
/// warning line naming the port, so `up` still succeeds.
pub fn publish_configured(
    runtime_dir: &Path,
    configured: &[airlock_config::ports::PublishedPort],
) -> Vec<String> {
    if configured.is_empty() {
        return Vec::new();
    }
    let socket = runtime_dir.join(super::backend::SOCKET);
    let published = match request(&socket, &PortsRequest::List) {
        Ok(forwards) => forwards,
        Err(e) => {
            return vec![format!(
                "warning: [[ports]] not published: {} ({})",
                e.message, e.code
            )]
        }
    };
    let mut warnings = Vec::new();
    for p in configured {
        if published.iter().any(|f| f.host == p.host) {
            continue;
        }
        let request_one = PortsRequest::Publish {
            host: p.host,
            guest: p.guest,
        };
        if let Err(e) = request(&socket, &request_one) {
            warnings.push(format!(
                "warning: [[ports]] host port {} -> sandbox port {} not published: {}",
                p.host, p.guest, e.message
            ));
        }
    }
    warnings
}
