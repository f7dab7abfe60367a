//! The decoder refuses hostile input without panicking: arbitrary bytes, oversized lengths,
//! unknown kinds, malformed JSON and truncated frames all end in a typed error or a clean end.

use std::io::Cursor;

use airlock_protocol::frame::{decode, encode, read_frame, HEADER_LEN};
use airlock_protocol::{read_packet, FrameKind, Packet, PacketError, MAX_FRAME_LEN};
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = FrameKind> {
    prop::sample::select(FrameKind::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic_the_packet_reader(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut cursor = Cursor::new(&bytes);
        // Read until a clean end or the first error; any outcome but a panic is acceptable.
        for _ in 0..bytes.len() + 1 {
            match read_packet(&mut cursor) {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            }
        }
        let _ = decode(&bytes);
    }

    #[test]
    fn arbitrary_control_payloads_are_refused_or_parsed_never_panic(payload in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut buf = Vec::new();
        encode(FrameKind::Control, &payload, &mut buf).unwrap();
        match read_packet(&mut Cursor::new(&buf)) {
            Ok(Some(Packet::Control(_))) | Err(PacketError::Malformed { .. }) => {}
            other => prop_assert!(false, "unexpected {other:?}"),
        }
    }

    #[test]
    fn json_shaped_garbage_is_refused_as_malformed(tag in "[a-z_]{0,12}", field in "[a-z]{1,6}", n in any::<i64>()) {
        let json = format!(r#"{{"type":"{tag}","body":{{"{field}":{n}}}}}"#);
        let mut buf = Vec::new();
        encode(FrameKind::Control, json.as_bytes(), &mut buf).unwrap();
        // Whatever parses must re-encode to an equal message: no lossy acceptance.
        if let Ok(Some(Packet::Control(message))) = read_packet(&mut Cursor::new(&buf)) {
            let again = serde_json::to_value(&message).unwrap();
            let original: serde_json::Value = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(again, original);
        }
    }

    #[test]
    fn any_announced_length_over_the_limit_is_refused_from_the_header(kind in kind(), extra in 1u32..=u32::MAX - MAX_FRAME_LEN) {
        let mut buf = vec![kind as u8];
        buf.extend_from_slice(&(MAX_FRAME_LEN + extra).to_be_bytes());
        prop_assert!(read_frame(&mut Cursor::new(&buf)).is_err());
        prop_assert!(decode(&buf).is_err());
    }

    #[test]
    fn frames_split_at_any_point_decode_identically(kind in kind(), payload in prop::collection::vec(any::<u8>(), 0..300), cut in 0usize..400) {
        let mut buf = Vec::new();
        encode(kind, &payload, &mut buf).unwrap();
        let cut = cut.min(buf.len());
        let partial = decode(&buf[..cut]).unwrap();
        if cut < HEADER_LEN + payload.len() {
            prop_assert!(partial.is_none());
        }
        let (frame, used) = decode(&buf).unwrap().unwrap();
        prop_assert_eq!(used, buf.len());
        prop_assert_eq!(frame.kind, kind);
        prop_assert_eq!(frame.payload, payload);
    }
}
