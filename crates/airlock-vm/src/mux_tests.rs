use super::*;
use std::time::Duration;

/// Host and guest muxes over a socketpair standing in for the serial port; the guest echoes
/// every stream (or hands it to `guest`).
fn pair(guest: impl Fn(UnixStream) + Send + 'static) -> (Mux, Mux, Closed, Closed) {
    let (h, g) = UnixStream::pair().unwrap();
    let (host, host_closed) = Mux::start(
        Side::Host,
        Box::new(h.try_clone().unwrap()),
        Box::new(h),
        None,
    );
    let (guest_mux, guest_closed) = Mux::start(
        Side::Guest,
        Box::new(g.try_clone().unwrap()),
        Box::new(g),
        Some(Box::new(guest)),
    );
    (host, guest_mux, host_closed, guest_closed)
}

fn echo(stream: UnixStream) {
    thread::spawn(move || {
        let mut w = stream.try_clone().unwrap();
        let mut r = stream;
        io::copy(&mut r, &mut w).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
}

#[test]
fn bytes_round_trip_and_half_close_reaches_the_other_end() {
    let (host, _guest, _a, _b) = pair(echo);
    let mut s = host.open().unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let writer = {
        let mut s = s.try_clone().unwrap();
        let data = data.clone();
        thread::spawn(move || {
            s.write_all(&data).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
        })
    };
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "echoed bytes differ");
}

#[test]
fn many_streams_at_once_stay_apart() {
    let (host, _guest, _a, _b) = pair(echo);
    let handles: Vec<_> = (0..16u8)
        .map(|i| {
            let mut s = host.open().unwrap();
            thread::spawn(move || {
                let data = vec![i; 300_000];
                let mut w = s.try_clone().unwrap();
                let d = data.clone();
                let t = thread::spawn(move || {
                    w.write_all(&d).unwrap();
                    w.shutdown(Shutdown::Write).unwrap();
                });
                let mut back = Vec::new();
                s.read_to_end(&mut back).unwrap();
                t.join().unwrap();
                assert!(back == data, "stream {i} got another stream's bytes");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_stream_nobody_reads_does_not_block_the_others() {
    // The guest keeps the first stream's end open but never reads it.
    let parked = Arc::new(Mutex::new(Vec::new()));
    let first = Arc::new(AtomicBool::new(true));
    let (host, _guest, _a, _b) = {
        let parked = Arc::clone(&parked);
        pair(move |s| {
            if first.swap(false, Ordering::SeqCst) {
                lock(&parked).push(s);
            } else {
                echo(s);
            }
        })
    };
    let stalled = host.open().unwrap();
    stalled
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // Far more than the window and the socket buffers: the writer must end up blocked, held
    // back by flow control rather than queued without bound.
    let mut w = &stalled;
    let chunk = vec![7u8; 64 * 1024];
    let mut written = 0usize;
    let blocked = loop {
        match w.write(&chunk) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
            Err(e) => panic!("write failed: {e}"),
        }
        if written > 64 * 1024 * 1024 {
            break false;
        }
    };
    assert!(
        blocked,
        "64 MiB went into a stream nobody reads: no flow control"
    );
    let mut other = host.open().unwrap();
    other.write_all(b"still flowing").unwrap();
    other.shutdown(Shutdown::Write).unwrap();
    let mut back = String::new();
    other.read_to_string(&mut back).unwrap();
    assert_eq!(back, "still flowing");
}

#[test]
fn a_peer_sending_beyond_its_window_gets_the_stream_reset() {
    let (h, mut g) = UnixStream::pair().unwrap();
    let (host, _closed) = Mux::start(
        Side::Host,
        Box::new(h.try_clone().unwrap()),
        Box::new(h),
        None,
    );
    let mut s = host.open().unwrap();
    // Act as a hostile guest: read the Open, then flood data without waiting for credit.
    let open = read_frame(&mut g, 0).unwrap().unwrap();
    assert_eq!(open.kind, Kind::Open);
    let payload = vec![1u8; MAX_PAYLOAD];
    // 4 MiB while the local reader reads nothing: beyond the window plus what the local
    // socket buffers, whatever credit the host returned for bytes it did write.
    for _ in 0..64 {
        write_frame(&mut g, open.stream, Kind::Data, &payload).unwrap();
    }
    // The host resets the stream: its local end sees the end.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut sink = Vec::new();
    let read = s.read_to_end(&mut sink);
    assert!(read.is_ok(), "stream not ended: {read:?}");
    assert!(
        sink.len() < 64 * MAX_PAYLOAD,
        "the whole flood was accepted"
    );
    let reset = loop {
        let f = read_frame(&mut g, 0).unwrap().unwrap();
        if f.kind == Kind::Reset {
            break f;
        }
    };
    assert_eq!(reset.stream, open.stream);
}

#[test]
fn the_port_closing_ends_every_stream() {
    let (h, g) = UnixStream::pair().unwrap();
    let (host, closed) = Mux::start(
        Side::Host,
        Box::new(h.try_clone().unwrap()),
        Box::new(h),
        None,
    );
    let mut s = host.open().unwrap();
    drop(g);
    closed.wait();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut sink = Vec::new();
    assert!(s.read_to_end(&mut sink).is_ok());
    assert!(host.open().is_err(), "a stream opened on a closed port");
}

#[test]
fn an_oversized_or_unknown_frame_ends_the_port() {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&1u32.to_be_bytes());
    bytes.push(Kind::Data as u8);
    bytes.extend_from_slice(&(MAX_PAYLOAD as u32 + 1).to_be_bytes());
    let err = read_frame(&mut &bytes[..], 0).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    let unknown = [0, 0, 0, 1, 99, 0, 0, 0, 0];
    assert_eq!(
        read_frame(&mut &unknown[..], 0).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
}

#[test]
fn the_guest_opens_streams_too_and_ids_never_collide() {
    // The host echoes what the guest opens (the egress direction); the guest echoes the host's.
    let (h, g) = UnixStream::pair().unwrap();
    let (host, _a) = Mux::start(
        Side::Host,
        Box::new(h.try_clone().unwrap()),
        Box::new(h),
        Some(Box::new(echo)),
    );
    let (guest, _b) = Mux::start(
        Side::Guest,
        Box::new(g.try_clone().unwrap()),
        Box::new(g),
        Some(Box::new(echo)),
    );
    let round_trip = |mut s: UnixStream, text: &str| {
        s.write_all(text.as_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut back = String::new();
        s.read_to_string(&mut back).unwrap();
        assert_eq!(back, text);
    };
    let streams: Vec<(UnixStream, String)> = (0..4)
        .flat_map(|i| {
            [
                (host.open().unwrap(), format!("host {i}")),
                (guest.open().unwrap(), format!("guest {i}")),
            ]
        })
        .collect();
    for (s, text) in streams {
        round_trip(s, &text);
    }
}

#[test]
fn an_open_with_the_openers_own_parity_is_refused() {
    // A guest claiming an odd (host) id must not be able to shadow a host stream.
    let (h, mut g) = UnixStream::pair().unwrap();
    let opened = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&opened);
    let (_host, _closed) = Mux::start(
        Side::Host,
        Box::new(h.try_clone().unwrap()),
        Box::new(h),
        Some(Box::new(move |_| flag.store(true, Ordering::SeqCst))),
    );
    write_frame(&mut g, 7, Kind::Open, &[]).unwrap();
    let reply = read_frame(&mut g, 0).unwrap().unwrap();
    assert_eq!((reply.stream, reply.kind), (7, Kind::Reset));
    assert!(!opened.load(Ordering::SeqCst));
}

#[test]
fn a_peer_opening_streams_without_end_is_refused_past_the_limit() {
    // A hostile guest opens streams and never closes them: the host keeps at most MAX_STREAMS.
    let (h, mut g) = UnixStream::pair().unwrap();
    let parked = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&parked);
    let (host, _closed) = Mux::start(
        Side::Host,
        Box::new(h.try_clone().unwrap()),
        Box::new(h),
        Some(Box::new(move |s| lock(&keep).push(s))),
    );
    let extra = 8;
    for i in 0..(MAX_STREAMS + extra) as u32 {
        write_frame(&mut g, 2 + 2 * i, Kind::Open, &[]).unwrap();
    }
    let mut resets = 0;
    g.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while resets < extra {
        let f = read_frame(&mut g, 0).unwrap().unwrap();
        if f.kind == Kind::Reset {
            assert!(
                f.stream >= 2 + 2 * MAX_STREAMS as u32,
                "stream {} refused early",
                f.stream
            );
            resets += 1;
        }
    }
    assert_eq!(host.open_streams(), MAX_STREAMS);
    assert_eq!(lock(&parked).len(), MAX_STREAMS);
}

#[test]
fn data_sent_before_a_reset_is_still_delivered() {
    // The guest answers with an error and resets (its reader is gone): the host's reader must
    // still get the answer, not just the end of the stream.
    let (h, mut g) = UnixStream::pair().unwrap();
    let (host, _closed) = Mux::start(
        Side::Host,
        Box::new(h.try_clone().unwrap()),
        Box::new(h),
        None,
    );
    let mut s = host.open().unwrap();
    let open = read_frame(&mut g, 0).unwrap().unwrap();
    write_frame(&mut g, open.stream, Kind::Data, b"the answer").unwrap();
    write_frame(&mut g, open.stream, Kind::Reset, &[]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"the answer");
}
