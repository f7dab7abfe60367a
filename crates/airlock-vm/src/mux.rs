//! Many byte streams over one virtio-serial port, each with its own flow control.
//!
//! Where the host has no `vhost-vsock`, the guest's only channel is one serial port, but the
//! control protocol opens a stream per exec, session or transfer. Each end of the port runs a
//! [`Mux`]: a stream is a local socketpair end pumped to and from the port in frames
//! `stream u32 BE | kind u8 | length u32 BE | payload` (payload at most [`MAX_PAYLOAD`]).
//!
//! Flow control: a sender may have at most [`WINDOW`] bytes of a stream in flight; the
//! receiver returns credit only after it wrote the bytes to the stream's local socket. So a
//! stream whose reader stalls (a command nobody reads) holds at most one window in the
//! receiver's memory and never blocks the port for the others. A peer that sends beyond its
//! window gets that stream reset.
//!
//! Either side opens streams ([`Mux::open`]): the host for each exec (the guest hands its end
//! to the control server), the guest for each egress connection (the host hands its end to the
//! proxy). The host's stream ids are odd, the guest's even, so both can open at once; an
//! `Open` with the opener's own parity is refused. Stream 0 is the boot exchange (hello and
//! configuration) before the mux starts ([`write_frame`], [`read_frame`]).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;

/// Largest payload of one frame.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Bytes of one stream a sender may have unacknowledged.
pub const WINDOW: u32 = 256 * 1024;
/// Streams open at once; a peer's `Open` beyond it is refused with `Reset`. With the window,
/// this bounds what a hostile guest can make the host hold: threads, at most `MAX_STREAMS ×
/// WINDOW` bytes of queued data, and descriptors (an egress stream holds about five on the
/// host, so 128 stays well inside the usual limit of 1024 per process).
pub const MAX_STREAMS: usize = 128;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Host → guest: a new stream with this id.
    Open = 1,
    /// Bytes of the stream.
    Data = 2,
    /// The sender will send no more bytes on this stream (half close).
    Eof = 3,
    /// The stream is gone in both directions.
    Reset = 4,
    /// The receiver wrote this many bytes (u32 BE payload): the sender may send that much more.
    Credit = 5,
    /// Stream 0, guest → host, once: the guest is up (JSON payload).
    Hello = 6,
    /// Stream 0, host → guest, once: the guest's configuration (JSON payload).
    Config = 7,
}

impl Kind {
    fn from_u8(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Open,
            2 => Kind::Data,
            3 => Kind::Eof,
            4 => Kind::Reset,
            5 => Kind::Credit,
            6 => Kind::Hello,
            7 => Kind::Config,
            _ => return None,
        })
    }
}

/// A frame read from the port.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub stream: u32,
    pub kind: Kind,
    pub payload: Vec<u8>,
}

/// Writes one frame (header and payload in one write, so frames never interleave).
pub fn write_frame(out: &mut dyn Write, stream: u32, kind: Kind, payload: &[u8]) -> io::Result<()> {
    if payload.len() > MAX_PAYLOAD && !matches!(kind, Kind::Hello | Kind::Config) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "mux payload too large",
        ));
    }
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mux payload too large"))?;
    let mut buf = Vec::with_capacity(9 + payload.len());
    buf.extend_from_slice(&stream.to_be_bytes());
    buf.push(kind as u8);
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(payload);
    out.write_all(&buf)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of the port. Boot frames (stream 0) may carry
/// up to `boot_limit` bytes; every other frame at most [`MAX_PAYLOAD`].
pub fn read_frame(input: &mut dyn Read, boot_limit: usize) -> io::Result<Option<Frame>> {
    let mut header = [0u8; 9];
    let mut got = 0;
    while got < header.len() {
        match input.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let stream = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let kind =
        Kind::from_u8(header[4]).ok_or_else(|| bad(format!("unknown frame kind {}", header[4])))?;
    let len = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) as usize;
    let limit = if stream == 0 { boot_limit } else { MAX_PAYLOAD };
    if len > limit {
        return Err(bad(format!(
            "frame of {len} bytes on stream {stream} (limit {limit})"
        )));
    }
    let mut payload = vec![0u8; len];
    input.read_exact(&mut payload)?;
    Ok(Some(Frame {
        stream,
        kind,
        payload,
    }))
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What arrived for one stream and is not yet written to its local socket.
struct Inbound {
    queue: VecDeque<Vec<u8>>,
    /// Bytes the peer may still send: the window, less what arrived, plus the credit returned.
    allowance: usize,
    eof: bool,
    reset: bool,
}

/// How much one stream may still send.
struct Outbound {
    credit: u32,
    reset: bool,
}

struct Stream {
    id: u32,
    local: UnixStream,
    inbound: Mutex<Inbound>,
    inbound_ready: Condvar,
    outbound: Mutex<Outbound>,
    credit_ready: Condvar,
}

impl Stream {
    /// The peer reset the stream: it reads and sends nothing more, but what it sent before
    /// is still delivered (an error message followed by a close must not be lost to a reset
    /// that a late write of ours provoked).
    fn peer_reset(&self) {
        lock(&self.outbound).reset = true;
        self.credit_ready.notify_all();
        lock(&self.inbound).eof = true;
        self.inbound_ready.notify_all();
        // Ends the outbound pump's read; the inbound pump drains, then shuts down writing.
        let _ = self.local.shutdown(Shutdown::Read);
    }

    fn reset(&self) {
        lock(&self.inbound).reset = true;
        self.inbound_ready.notify_all();
        lock(&self.outbound).reset = true;
        self.credit_ready.notify_all();
        let _ = self.local.shutdown(Shutdown::Both);
    }
}

/// Which end of the port a mux is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Opens odd stream ids.
    Host,
    /// Opens even stream ids.
    Guest,
}

impl Side {
    fn first_id(self) -> u32 {
        match self {
            Side::Host => 1,
            Side::Guest => 2,
        }
    }

    /// Whether the peer of this side may open stream `id`.
    fn peer_may_open(self, id: u32) -> bool {
        id != 0 && id.is_multiple_of(2) == (self == Side::Host)
    }
}

type Writer = Box<dyn Write + Send>;
type OnOpen = Box<dyn Fn(UnixStream) + Send>;

struct Inner {
    writer: Mutex<Writer>,
    streams: Mutex<HashMap<u32, Arc<Stream>>>,
    next_id: AtomicU32,
    side: Side,
    closed: AtomicBool,
}

impl Inner {
    fn send(&self, stream: u32, kind: Kind, payload: &[u8]) -> io::Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let result = write_frame(&mut *lock(&self.writer), stream, kind, payload);
        if result.is_err() {
            self.close_all();
        }
        result
    }

    fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        let streams: Vec<Arc<Stream>> = lock(&self.streams).drain().map(|(_, s)| s).collect();
        for s in streams {
            s.reset();
        }
    }

    fn forget(&self, id: u32) {
        lock(&self.streams).remove(&id);
    }
}

/// One end of the multiplexed port.
#[derive(Clone)]
pub struct Mux {
    inner: Arc<Inner>,
}

/// Waits for the end of the port (the peer closed it or it failed).
pub struct Closed(thread::JoinHandle<()>);

impl Closed {
    /// Blocks until the port is gone; every stream is reset by then.
    pub fn wait(self) {
        let _ = self.0.join();
    }
}

impl Mux {
    /// Starts `side`'s mux on a port split into `reader` and `writer`. `on_open` receives
    /// the local end of every stream the peer opens; without it, `Open` frames are answered
    /// with `Reset`.
    pub fn start(
        side: Side,
        reader: Box<dyn Read + Send>,
        writer: Writer,
        on_open: Option<OnOpen>,
    ) -> (Mux, Closed) {
        let inner = Arc::new(Inner {
            writer: Mutex::new(writer),
            streams: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(side.first_id()),
            side,
            closed: AtomicBool::new(false),
        });
        let for_reader = Arc::clone(&inner);
        let handle = thread::spawn(move || read_loop(reader, &for_reader, on_open.as_deref()));
        (Mux { inner }, Closed(handle))
    }

    /// Opens a new stream to the peer and returns its local end.
    pub fn open(&self) -> io::Result<UnixStream> {
        let id = self.inner.next_id.fetch_add(2, Ordering::Relaxed);
        let (ours, theirs) = UnixStream::pair()?;
        let stream = register(&self.inner, id, ours)?;
        if let Err(err) = self.inner.send(id, Kind::Open, &[]) {
            stream.reset();
            self.inner.forget(id);
            return Err(err);
        }
        spawn_pumps(&self.inner, stream);
        Ok(theirs)
    }

    /// Streams currently open (for tests and `status`).
    pub fn open_streams(&self) -> usize {
        lock(&self.inner.streams).len()
    }
}

/// Copies bytes both ways between two connected streams until each direction ends, passing
/// each half close on.
pub fn bridge(a: UnixStream, b: UnixStream) {
    let pairs = match (a.try_clone(), b.try_clone()) {
        (Ok(a2), Ok(b2)) => [(a, b2), (b, a2)],
        _ => return,
    };
    for (mut from, mut to) in pairs {
        thread::spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
    }
}

fn register(inner: &Arc<Inner>, id: u32, local: UnixStream) -> io::Result<Arc<Stream>> {
    let stream = Arc::new(Stream {
        id,
        local,
        inbound: Mutex::new(Inbound {
            queue: VecDeque::new(),
            allowance: WINDOW as usize,
            eof: false,
            reset: false,
        }),
        inbound_ready: Condvar::new(),
        outbound: Mutex::new(Outbound {
            credit: WINDOW,
            reset: false,
        }),
        credit_ready: Condvar::new(),
    });
    let mut streams = lock(&inner.streams);
    if inner.closed.load(Ordering::Acquire) {
        return Err(io::ErrorKind::BrokenPipe.into());
    }
    if streams.len() >= MAX_STREAMS {
        return Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            "too many mux streams",
        ));
    }
    if streams.contains_key(&id) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "mux stream id in use",
        ));
    }
    streams.insert(id, Arc::clone(&stream));
    Ok(stream)
}

fn read_loop(
    mut reader: Box<dyn Read + Send>,
    inner: &Arc<Inner>,
    on_open: Option<&(dyn Fn(UnixStream) + Send)>,
) {
    // Until the port ends or speaks garbage: nothing after that can be trusted.
    while let Ok(Some(frame)) = read_frame(&mut reader, 0) {
        dispatch(inner, frame, on_open);
    }
    inner.close_all();
}

fn dispatch(inner: &Arc<Inner>, frame: Frame, on_open: Option<&(dyn Fn(UnixStream) + Send)>) {
    let id = frame.stream;
    let stream = lock(&inner.streams).get(&id).cloned();
    match (frame.kind, stream) {
        (Kind::Open, None) if !inner.side.peer_may_open(id) => {
            let _ = inner.send(id, Kind::Reset, &[]);
        }
        (Kind::Open, None) => match on_open {
            Some(on_open) => match UnixStream::pair().and_then(|(ours, theirs)| {
                let stream = register(inner, id, ours)?;
                Ok((stream, theirs))
            }) {
                Ok((stream, theirs)) => {
                    spawn_pumps(inner, stream);
                    on_open(theirs);
                }
                Err(_) => {
                    let _ = inner.send(id, Kind::Reset, &[]);
                }
            },
            None => {
                let _ = inner.send(id, Kind::Reset, &[]);
            }
        },
        (Kind::Data, Some(stream)) => {
            let mut inbound = lock(&stream.inbound);
            if frame.payload.len() > inbound.allowance || inbound.eof {
                drop(inbound);
                // Beyond the window (or after its own EOF): the peer broke the contract.
                stream.reset();
                inner.forget(id);
                let _ = inner.send(id, Kind::Reset, &[]);
                return;
            }
            inbound.allowance -= frame.payload.len();
            inbound.queue.push_back(frame.payload);
            drop(inbound);
            stream.inbound_ready.notify_all();
        }
        (Kind::Eof, Some(stream)) => {
            lock(&stream.inbound).eof = true;
            stream.inbound_ready.notify_all();
        }
        (Kind::Credit, Some(stream)) => {
            let Ok(bytes) = <[u8; 4]>::try_from(frame.payload.as_slice()) else {
                return;
            };
            let mut out = lock(&stream.outbound);
            out.credit = out
                .credit
                .saturating_add(u32::from_be_bytes(bytes))
                .min(WINDOW);
            drop(out);
            stream.credit_ready.notify_all();
        }
        (Kind::Reset, Some(stream)) => stream.peer_reset(),
        // An Open for a stream in use, or anything for a stream already gone: the peer's
        // late frames after a reset are expected and dropped.
        (Kind::Open, Some(_))
        | (Kind::Data | Kind::Eof | Kind::Credit | Kind::Reset, None)
        | (Kind::Hello | Kind::Config, _) => {}
    }
}

fn spawn_pumps(inner: &Arc<Inner>, stream: Arc<Stream>) {
    let done = Arc::new(AtomicU32::new(0));
    let finish = {
        let inner = Arc::clone(inner);
        let stream = Arc::clone(&stream);
        move |done: &AtomicU32| {
            if done.fetch_add(1, Ordering::AcqRel) == 1 {
                inner.forget(stream.id);
            }
        }
    };
    let (out_inner, out_stream, out_done, out_finish) = (
        Arc::clone(inner),
        Arc::clone(&stream),
        Arc::clone(&done),
        finish.clone(),
    );
    thread::spawn(move || {
        pump_out(&out_inner, &out_stream);
        out_finish(&out_done);
    });
    let in_inner = Arc::clone(inner);
    thread::spawn(move || {
        pump_in(&in_inner, &stream);
        finish(&done);
    });
}

/// Local socket → port, within the credit the peer granted.
fn pump_out(inner: &Inner, stream: &Stream) {
    let mut buf = vec![0u8; MAX_PAYLOAD];
    let mut local = &stream.local;
    loop {
        let allowed = {
            let mut out = lock(&stream.outbound);
            while out.credit == 0 && !out.reset {
                out = stream
                    .credit_ready
                    .wait(out)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if out.reset {
                return;
            }
            (out.credit as usize).min(MAX_PAYLOAD)
        };
        match local.read(&mut buf[..allowed]) {
            Ok(0) => {
                let _ = inner.send(stream.id, Kind::Eof, &[]);
                return;
            }
            Ok(n) => {
                lock(&stream.outbound).credit -= n as u32;
                if inner.send(stream.id, Kind::Data, &buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                if !lock(&stream.outbound).reset {
                    stream.reset();
                    let _ = inner.send(stream.id, Kind::Reset, &[]);
                }
                return;
            }
        }
    }
}

/// Port → local socket; credit goes back once the bytes are written.
fn pump_in(inner: &Inner, stream: &Stream) {
    let mut local = &stream.local;
    loop {
        let chunk = {
            let mut inbound = lock(&stream.inbound);
            loop {
                if inbound.reset {
                    return;
                }
                if let Some(chunk) = inbound.queue.pop_front() {
                    break chunk;
                }
                if inbound.eof {
                    let _ = stream.local.shutdown(Shutdown::Write);
                    return;
                }
                inbound = stream
                    .inbound_ready
                    .wait(inbound)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        if local.write_all(&chunk).is_err() {
            if !lock(&stream.inbound).reset {
                stream.reset();
                let _ = inner.send(stream.id, Kind::Reset, &[]);
            }
            return;
        }
        // The allowance grows before the peer can learn of it.
        lock(&stream.inbound).allowance += chunk.len();
        let credit = u32::try_from(chunk.len()).unwrap_or(u32::MAX).to_be_bytes();
        if inner.send(stream.id, Kind::Credit, &credit).is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[path = "mux_tests.rs"]
mod tests;
