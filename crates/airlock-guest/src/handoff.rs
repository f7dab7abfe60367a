//! The handoff side of a relay (see [`crate::relay`]): each accepted connection goes to the
//! host's egress proxy as a descriptor over one long-lived channel
//! (`airlock_protocol::handoff`), and PID 1 keeps no copy.
//!
//! One thread per listener does everything: accept, send, close. A channel that breaks (the
//! proxy exited; the keeper starts a new one on a fresh socket) is reopened once for the
//! connection at hand; when that fails too the connection is closed (fail closed, as before).
//! When the proxy refuses the channel (it could not check that PID 1 is its peer, e.g. `/proc`
//! hides other processes), every later connection of this listener is byte-relayed instead
//! ([`crate::relay::byte_relay`]): slower, with the same policy.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use airlock_protocol::handoff::{self, ACCEPTED, HELLO};

/// How long PID 1 waits for the proxy to answer a new channel (a proxy started on demand
/// answers within milliseconds).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `listener` forever, handing each connection to the proxy at `socket`.
pub(crate) fn serve(listener: &TcpListener, socket: &Path) {
    let mut channel: Option<UnixStream> = None;
    let mut refused = false;
    let relayed = Arc::new(AtomicUsize::new(0));
    loop {
        let client = crate::relay::accept(listener);
        if refused {
            crate::relay::byte_relay(client, socket, &relayed);
            continue;
        }
        match hand_over(&mut channel, socket, &client) {
            Outcome::HandedOver | Outcome::Unreachable => drop(client),
            Outcome::Refused => {
                refused = true;
                crate::relay::byte_relay(client, socket, &relayed);
            }
        }
    }
}

/// What became of one connection.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The proxy holds it now.
    HandedOver,
    /// No proxy to hand it to: the caller closes it (fail closed).
    Unreachable,
    /// The proxy does not take handoffs from this peer.
    Refused,
}

/// Sends `client` over the open channel, or over a new one when there is none or the open one
/// is broken.
fn hand_over(channel: &mut Option<UnixStream>, socket: &Path, client: &TcpStream) -> Outcome {
    for _ in 0..2 {
        let open = match channel.take() {
            Some(open) => open,
            None => match open_channel(socket) {
                Ok(open) => open,
                Err(outcome) => return outcome,
            },
        };
        if handoff::send_connection(open.as_fd(), client.as_fd()).is_ok() {
            *channel = Some(open);
            return Outcome::HandedOver;
        }
        // A broken channel (e.g. EPIPE: the proxy restarted): the next round opens a new one.
    }
    Outcome::Unreachable
}

/// Connects to the proxy's socket and asks for a handoff channel.
fn open_channel(socket: &Path) -> Result<UnixStream, Outcome> {
    let mut stream = UnixStream::connect(socket).map_err(|_| Outcome::Unreachable)?;
    stream.write_all(HELLO).map_err(|_| Outcome::Unreachable)?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(|_| Outcome::Unreachable)?;
    let mut answer = [0u8; 1];
    match stream.read(&mut answer) {
        Ok(1) if answer[0] == ACCEPTED => Ok(stream),
        // Closed without accepting (or answered something else): this proxy does not take
        // handoffs from us.
        Ok(_) => Err(Outcome::Refused),
        Err(_) => Err(Outcome::Unreachable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::{start, Relay};
    use airlock_protocol::handoff::Received;
    use std::net::{Ipv4Addr, Shutdown};
    use std::os::unix::net::UnixListener;
    use std::thread;

    fn free_port() -> u16 {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Accepts one channel on `host` as the proxy would and returns it.
    fn accept_channel(host: &UnixListener) -> UnixStream {
        let (mut channel, _) = host.accept().unwrap();
        let mut hello = vec![0u8; HELLO.len()];
        channel.read_exact(&mut hello).unwrap();
        assert_eq!(hello, HELLO);
        channel.write_all(&[ACCEPTED]).unwrap();
        channel
    }

    /// The next handed-over connection on `channel` (waits for it).
    fn next_connection(channel: &UnixStream) -> Option<TcpStream> {
        loop {
            match handoff::recv_connection(channel.as_fd()) {
                Ok(Received::Connection(fd)) => return Some(TcpStream::from(fd)),
                Ok(Received::Closed) => return None,
                Err(e) if e.would_block() => thread::sleep(Duration::from_millis(2)),
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn start_handoff(socket: &Path) -> u16 {
        let port = free_port();
        start(&[Relay {
            port,
            socket: socket.to_path_buf(),
            handoff: true,
        }])
        .unwrap();
        port
    }

    #[test]
    fn the_proxy_gets_the_client_socket_itself_and_pid1_keeps_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let channel = accept_channel(&host);
        let mut served = next_connection(&channel).unwrap();
        // The proxy's end is the accepted TCP socket of the sandbox's listener.
        assert_eq!(served.local_addr().unwrap().port(), port);
        client.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        served.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        served.write_all(b"pong").unwrap();
        // Closing the proxy's copy ends the connection: PID 1 kept none.
        drop(served);
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"pong");
    }

    #[test]
    fn connections_share_one_channel_and_a_broken_one_is_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let _a = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let _b = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let channel = accept_channel(&host);
        assert!(next_connection(&channel).is_some());
        assert!(next_connection(&channel).is_some());
        // The proxy goes away; its successor listens on the same path.
        drop(channel);
        drop(host);
        std::fs::remove_file(&socket).unwrap();
        let host = UnixListener::bind(&socket).unwrap();
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let channel = accept_channel(&host);
        let mut served = next_connection(&channel).unwrap();
        c.write_all(b"x").unwrap();
        let mut buf = [0u8; 1];
        served.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"x");
    }

    #[test]
    fn a_proxy_refusing_the_channel_gets_the_bytes_relayed_instead() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let host = UnixListener::bind(&socket).unwrap();
        let port = start_handoff(&socket);
        let echo = thread::spawn(move || {
            // Refuse the channel: read the hello, close without answering.
            let (mut channel, _) = host.accept().unwrap();
            let mut hello = vec![0u8; HELLO.len()];
            channel.read_exact(&mut hello).unwrap();
            drop(channel);
            // Then serve the byte relay's own connection.
            let (mut conn, _) = host.accept().unwrap();
            let mut buf = Vec::new();
            conn.read_to_end(&mut buf).unwrap();
            conn.write_all(&buf).unwrap();
        });
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        client.write_all(b"relayed").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        echo.join().unwrap();
        assert_eq!(got, "relayed");
    }

    #[test]
    fn no_proxy_socket_closes_the_client_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let port = start_handoff(&dir.path().join("absent.sock"));
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = client.write_all(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n");
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).unwrap_or(0), 0);
    }
}
