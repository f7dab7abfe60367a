//! Zero-copy tunnels: `splice(2)` through a pipe, in the kernel, for CONNECT tunnels whose both
//! ends are plain sockets (the normal case).
//!
//! A tunnel is two independent pumps (client → upstream, upstream → client). Each pump owns a
//! non-blocking pipe and loops: wait until the source is readable, splice up to one pipe's worth
//! from the source into the pipe, then splice all of it from the pipe into the destination
//! (waiting for writability as needed). Because the pipe is always drained before the next fill,
//! `EAGAIN` on the first splice means "source empty" and on the second "destination full", so
//! readiness bookkeeping stays exact. On end of stream the pump shuts down the destination's
//! write side (the peer sees EOF; the other direction keeps going, as with a TCP half-close).
//!
//! Bytes are never copied to user space, which roughly halves the CPU cost per byte against a
//! read/write copy loop (B5).

use std::future::Future;
use std::io;
use std::os::fd::AsFd;

use rustix::net::Shutdown;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// Bytes per splice (the pipe is enlarged to this when the kernel allows, else 64 KiB).
const CHUNK: usize = 1 << 20;

/// A tokio socket whose readiness the pumps drive directly (tokio keeps the registration, so
/// no descriptor ever changes hands).
pub trait SpliceSocket: AsFd + Send + Sync {
    /// Waits until the socket may be ready for `interest`.
    fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Runs `f`; on `WouldBlock` clears the readiness so the next wait really waits.
    fn try_io_for<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>)
        -> io::Result<R>;
}

macro_rules! splice_socket {
    ($t:ty) => {
        impl SpliceSocket for $t {
            async fn ready_for(&self, interest: Interest) -> io::Result<()> {
                self.ready(interest).await.map(|_| ())
            }
            fn try_io_for<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    };
}
splice_socket!(TcpStream);
splice_socket!(UnixStream);

/// Carries bytes both ways between `a` and `b` until both directions ended; returns the byte
/// counts (a → b, b → a) — also when an error (which ends both directions) cut it short.
pub async fn splice_bidirectional<A: SpliceSocket, B: SpliceSocket>(
    a: &A,
    b: &B,
) -> ((u64, u64), io::Result<()>) {
    let (mut ab, mut ba) = (0u64, 0u64);
    let result = tokio::try_join!(pump(a, b, &mut ab), pump(b, a, &mut ba));
    ((ab, ba), result.map(|_| ()))
}

async fn pump<S: SpliceSocket, D: SpliceSocket>(
    src: &S,
    dst: &D,
    total: &mut u64,
) -> io::Result<()> {
    let (pipe_r, pipe_w) = rustix::pipe::pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
    let chunk = rustix::pipe::fcntl_setpipe_size(&pipe_w, CHUNK).unwrap_or(64 * 1024);
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        let n = loop {
            src.ready_for(Interest::READABLE).await?;
            let spliced = src.try_io_for(Interest::READABLE, || {
                rustix::pipe::splice(src.as_fd(), None, &pipe_w, None, chunk, flags)
                    .map_err(io::Error::from)
            });
            match spliced {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            // The peer may already be gone; its own pump reports that.
            let _ = rustix::net::shutdown(dst.as_fd(), Shutdown::Write);
            return Ok(());
        }
        let mut left = n;
        while left > 0 {
            dst.ready_for(Interest::WRITABLE).await?;
            let spliced = dst.try_io_for(Interest::WRITABLE, || {
                rustix::pipe::splice(&pipe_r, None, dst.as_fd(), None, left, flags)
                    .map_err(io::Error::from)
            });
            match spliced {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        *total += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn splice_carries_both_directions_and_half_closes() {
        let (client, proxy_side) = tokio::net::UnixStream::pair().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_side = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let tunnel =
            tokio::spawn(async move { splice_bidirectional(&proxy_side, &upstream_side).await });
        let (mut cr, mut cw) = client.into_split();
        let up: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = up.clone();
        let writer = tokio::spawn(async move {
            cw.write_all(&up).await.unwrap();
            cw.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, expected);
        server.write_all(b"reply after half-close").await.unwrap();
        server.shutdown().await.unwrap();
        let mut back = Vec::new();
        cr.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"reply after half-close");
        writer.await.unwrap();
        let ((ab, ba), result) = tunnel.await.unwrap();
        result.unwrap();
        assert_eq!((ab, ba), (3_000_000, 22));
    }
}
