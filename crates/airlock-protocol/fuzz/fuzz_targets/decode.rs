//! Feeds arbitrary bytes to the frame decoder and the packet reader: any outcome but a panic,
//! a hang or an allocation beyond the frame limit is a bug.
//! Run: `cd crates/airlock-protocol/fuzz && cargo +nightly fuzz run decode`.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = airlock_protocol::frame::decode(data);
    let mut cursor = Cursor::new(data);
    while let Ok(Some(_packet)) = airlock_protocol::read_packet(&mut cursor) {}
});
