//! The guest's side of the protocol: authentication, versions, hostile frames.

use std::io::Write;

use airlock_protocol::frame::{write_frame, FrameKind};
use airlock_protocol::{
    host_handshake, read_packet, write_message, write_packet, ClientError, ErrorCode, ExecClient,
    HandshakeError, Key, Message, Packet, VersionError, VersionRange, MAX_FRAME_LEN,
};

use crate::fixture::{request, Guest};

fn expect_error(stream: &mut std::os::unix::net::UnixStream, code: ErrorCode) -> String {
    loop {
        match read_packet(stream) {
            Ok(Some(Packet::Control(Message::Error(err)))) => {
                assert_eq!(err.code, code, "{}", err.message);
                return err.message;
            }
            Ok(Some(_)) => continue,
            other => panic!("expected an error message, got {other:?}"),
        }
    }
}

#[test]
fn host_with_the_wrong_key_is_refused_and_nothing_runs() {
    let guest = Guest::start();
    let marker = std::env::temp_dir().join(format!("airlock-wrong-key-{}", std::process::id()));
    let wrong = ExecClient::connect(guest.stream(), &Key::generate().unwrap());
    match wrong {
        Err(ClientError::Handshake(HandshakeError::Refused(err))) => {
            assert_eq!(err.code, ErrorCode::AuthFailed)
        }
        other => panic!("{other:?}"),
    }
    // Skipping the handshake and sending exec directly is refused too.
    let mut raw = guest.stream();
    let _hello = read_packet(&mut raw).unwrap();
    write_message(
        &mut raw,
        Message::Exec(request(&["touch", marker.to_str().unwrap()])),
    )
    .unwrap();
    let _ = read_packet(&mut raw);
    assert!(!marker.exists(), "an unauthenticated exec ran");
    // The guest still serves the rightful host.
    assert_eq!(guest.sh("echo ok").stdout, "ok\n");
}

#[test]
fn version_mismatch_fails_with_an_error_naming_both_versions() {
    let guest = Guest::start();
    let future = VersionRange { min: 7, max: 9 };
    match host_handshake(&mut guest.stream(), &guest.key, future) {
        Err(HandshakeError::Version(VersionError::NoOverlap { ours, theirs })) => {
            assert_eq!(ours, future);
            assert_eq!(theirs, VersionRange::CURRENT);
        }
        other => panic!("{other:?}"),
    }
}

fn authenticated(guest: &Guest) -> std::os::unix::net::UnixStream {
    let mut stream = guest.stream();
    host_handshake(&mut stream, &guest.key, VersionRange::CURRENT).unwrap();
    stream
}

#[test]
fn oversized_frame_is_refused_without_reading_it() {
    let guest = Guest::start();
    let mut stream = authenticated(&guest);
    let mut header = vec![FrameKind::Control as u8];
    header.extend_from_slice(&(MAX_FRAME_LEN * 4).to_be_bytes());
    stream.write_all(&header).unwrap();
    let message = expect_error(&mut stream, ErrorCode::BadRequest);
    assert!(message.contains("exceeds"), "{message}");
    assert_eq!(guest.sh("echo still-serving").stdout, "still-serving\n");
}

#[test]
fn out_of_order_and_malformed_frames_are_refused() {
    let guest = Guest::start();
    let mut stream = authenticated(&guest);
    write_packet(&mut stream, &Packet::Stdin(b"early".to_vec())).unwrap();
    expect_error(&mut stream, ErrorCode::UnexpectedMessage);

    let mut stream = authenticated(&guest);
    write_frame(
        &mut stream,
        FrameKind::Control,
        br#"{"type":"exec","body":{"argv":"sh"}}"#,
    )
    .unwrap();
    expect_error(&mut stream, ErrorCode::BadRequest);

    let mut stream = authenticated(&guest);
    stream.write_all(&[0x7f, 0, 0, 0, 0]).unwrap();
    expect_error(&mut stream, ErrorCode::BadRequest);

    // A second exec while the first runs is refused and ends the first.
    let mut stream = authenticated(&guest);
    write_message(&mut stream, Message::Exec(request(&["sleep", "30"]))).unwrap();
    write_message(&mut stream, Message::Exec(request(&["true"]))).unwrap();
    expect_error(&mut stream, ErrorCode::UnexpectedMessage);
}
