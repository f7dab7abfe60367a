//! The authenticated handshake that opens every stream.
//!
//! Order of operations (nothing else is accepted before step 3 completes):
//! 1. guest → host `guest_hello { versions, nonce }`: the guest's version range and 32 fresh
//!    random bytes.
//! 2. host → guest `host_hello { versions, proof }`, where
//!    `proof = HMAC-SHA256(key, nonce || context)` and `context` binds both version ranges
//!    (see [`context`]), so a man in the middle cannot downgrade the negotiation without
//!    invalidating the proof. If the ranges do not overlap the host sends `error` instead.
//! 3. guest verifies the proof in constant time ([`hmac::Mac::verify_slice`]), negotiates,
//!    and answers `ready { version }`; on failure it answers `error` and closes.
//!
//! The key is 32 random bytes per epoch ([`Key::generate`]); it never travels on the wire.

use std::fmt;
use std::io::{Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::frame::write_encoded;
use crate::message::{
    encode_packet, read_packet, write_message, ErrorCode, Message, Packet, PacketError, RemoteError,
};
use crate::version::{negotiate, VersionError, VersionRange};

type HmacSha256 = Hmac<Sha256>;

/// Length of the key and the nonce in bytes.
pub const KEY_LEN: usize = 32;

/// The per-epoch key. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

impl Key {
    /// 32 bytes from the OS random source.
    pub fn generate() -> Result<Self, HandshakeError> {
        let mut bytes = [0u8; KEY_LEN];
        getrandom::getrandom(&mut bytes).map_err(|e| HandshakeError::Random {
            reason: e.to_string(),
        })?;
        Ok(Self(bytes))
    }

    /// Wraps existing key bytes (e.g. read from the host's 0600 state file or the guest's pipe).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// The raw bytes, for storing the key in host state or handing it to the guest.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Parses 64 hex digits.
    pub fn from_hex(text: &str) -> Result<Self, HandshakeError> {
        let mut bytes = [0u8; KEY_LEN];
        hex::decode_to_slice(text.trim(), &mut bytes)
            .map_err(|_| HandshakeError::BadKeyEncoding)?;
        Ok(Self(bytes))
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// No common version (or a malformed range).
    #[error(transparent)]
    Version(#[from] VersionError),
    /// The host's proof did not verify: it does not hold this epoch's key.
    #[error("the peer failed to prove knowledge of the channel key")]
    BadProof,
    /// The peer refused us with a typed error.
    #[error("the peer refused the handshake: {0}")]
    Refused(RemoteError),
    /// A message other than the expected one arrived.
    #[error("handshake expected {expected}, received {got}")]
    Unexpected {
        /// What was expected.
        expected: &'static str,
        /// What arrived.
        got: &'static str,
    },
    /// The nonce or proof was not 32 bytes of hex.
    #[error("handshake {field} is not 32 bytes of hex")]
    BadEncoding {
        /// `"nonce"` or `"proof"`.
        field: &'static str,
    },
    /// A key string was not 64 hex digits.
    #[error("channel key is not 64 hex digits")]
    BadKeyEncoding,
    /// The guest confirmed a different version than the host negotiated.
    #[error("the peer confirmed version {got}, expected {expected}")]
    VersionDisagreement {
        /// The version this side negotiated.
        expected: u32,
        /// The version the peer confirmed.
        got: u32,
    },
    /// The stream ended during the handshake.
    #[error("the stream closed during the handshake")]
    Closed,
    /// Reading or writing a packet failed.
    #[error(transparent)]
    Packet(#[from] PacketError),
    /// The OS random source failed.
    #[error("cannot read random bytes: {reason}")]
    Random {
        /// The OS error text.
        reason: String,
    },
}

/// The bytes the proof binds besides the nonce: a domain label and both version ranges.
pub fn context(guest: VersionRange, host: VersionRange) -> Vec<u8> {
    let mut ctx = b"airlock-control-handshake\0".to_vec();
    for v in [guest.min, guest.max, host.min, host.max] {
        ctx.extend_from_slice(&v.to_be_bytes());
    }
    ctx
}

fn mac(key: &Key, nonce: &[u8; KEY_LEN], context: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key.as_bytes()).expect("HMAC accepts any key length");
    mac.update(nonce);
    mac.update(context);
    mac
}

/// `HMAC-SHA256(key, nonce || context)`.
pub fn prove(key: &Key, nonce: &[u8; KEY_LEN], context: &[u8]) -> [u8; 32] {
    mac(key, nonce, context).finalize().into_bytes().into()
}

/// Verifies a proof in constant time.
pub fn verify(key: &Key, nonce: &[u8; KEY_LEN], context: &[u8], proof: &[u8]) -> bool {
    mac(key, nonce, context).verify_slice(proof).is_ok()
}

fn decode32(text: &str, field: &'static str) -> Result<[u8; 32], HandshakeError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).map_err(|_| HandshakeError::BadEncoding { field })?;
    Ok(out)
}

fn next_message(conn: &mut impl Read, expected: &'static str) -> Result<Message, HandshakeError> {
    match read_packet(conn)? {
        None => Err(HandshakeError::Closed),
        Some(Packet::Control(Message::Error(err))) => Err(HandshakeError::Refused(err)),
        Some(Packet::Control(message)) => Ok(message),
        Some(other) => Err(HandshakeError::Unexpected {
            expected,
            got: other.name(),
        }),
    }
}

/// Sends a typed refusal; the stream is being abandoned, so a failed send changes nothing.
fn refuse(conn: &mut impl Write, code: ErrorCode, message: String) {
    let _ignored = write_message(conn, Message::Error(RemoteError::new(code, message)));
}

/// Guest side: challenges the host and verifies its proof. Returns the negotiated version.
pub fn guest_handshake(
    conn: &mut (impl Read + Write),
    key: &Key,
    ours: VersionRange,
) -> Result<u32, HandshakeError> {
    guest_hello(conn, ours)?.verify(conn, key)
}

/// A challenge the guest sent ([`guest_hello`]): the nonce the host's proof must cover.
pub struct GuestChallenge {
    nonce: [u8; KEY_LEN],
    ours: VersionRange,
}

/// Guest side, first half of [`guest_handshake`]: sends `guest_hello` with a fresh nonce and
/// reads nothing. PID 1 sends it as soon as a stream arrives, before the thread that serves
/// the stream exists, so the host computes its proof while that thread starts.
pub fn guest_hello(
    conn: &mut impl Write,
    ours: VersionRange,
) -> Result<GuestChallenge, HandshakeError> {
    let mut nonce = [0u8; KEY_LEN];
    getrandom::getrandom(&mut nonce).map_err(|e| HandshakeError::Random {
        reason: e.to_string(),
    })?;
    write_message(
        conn,
        Message::GuestHello {
            versions: ours,
            nonce: hex::encode(nonce),
        },
    )?;
    Ok(GuestChallenge { nonce, ours })
}

impl GuestChallenge {
    /// Second half of [`guest_handshake`]: reads `host_hello`, verifies its proof before
    /// anything else (a peer without the key is refused and nothing it sent after is read),
    /// negotiates and sends `ready`. Returns the negotiated version.
    pub fn verify(self, conn: &mut (impl Read + Write), key: &Key) -> Result<u32, HandshakeError> {
        let Self { nonce, ours } = self;
        let (theirs, proof) = match next_message(conn, "host_hello")? {
            Message::HostHello { versions, proof } => (versions, proof),
            other => {
                return Err(HandshakeError::Unexpected {
                    expected: "host_hello",
                    got: other.name(),
                })
            }
        };
        // Authenticate first: nothing about an unauthenticated peer is worth negotiating.
        let proof_ok = decode32(&proof, "proof")
            .is_ok_and(|p| verify(key, &nonce, &context(ours, theirs), &p));
        if !proof_ok {
            refuse(
                conn,
                ErrorCode::AuthFailed,
                "handshake proof did not verify".into(),
            );
            return Err(HandshakeError::BadProof);
        }
        let version = match negotiate(ours, theirs) {
            Ok(version) => version,
            Err(err) => {
                refuse(conn, ErrorCode::VersionMismatch, err.to_string());
                return Err(err.into());
            }
        };
        write_message(conn, Message::Ready { version })?;
        Ok(version)
    }
}

/// Host side: answers the guest's challenge. Returns the negotiated version.
pub fn host_handshake(
    conn: &mut (impl Read + Write),
    key: &Key,
    ours: VersionRange,
) -> Result<u32, HandshakeError> {
    host_handshake_then(conn, key, ours, &[])
}

/// Host side, pipelined: like [`host_handshake`], but `then` (frames already encoded, e.g. an
/// `exec` request) goes out in the same write as `host_hello`, without waiting for `ready`.
/// This saves one round trip and changes nothing the guest checks: it reads nothing after
/// `host_hello` before the proof verified (step 3), and refuses and closes otherwise, so the
/// pipelined frames of a host without the key are never read. `then` must hold only messages
/// of the lowest version the host offers (every guest it can agree with knows them).
pub fn host_handshake_then(
    conn: &mut (impl Read + Write),
    key: &Key,
    ours: VersionRange,
    then: &[u8],
) -> Result<u32, HandshakeError> {
    let (theirs, nonce) = match next_message(conn, "guest_hello")? {
        Message::GuestHello { versions, nonce } => (versions, decode32(&nonce, "nonce")?),
        other => {
            return Err(HandshakeError::Unexpected {
                expected: "guest_hello",
                got: other.name(),
            })
        }
    };
    let version = match negotiate(ours, theirs) {
        Ok(version) => version,
        Err(err) => {
            refuse(conn, ErrorCode::VersionMismatch, err.to_string());
            return Err(err.into());
        }
    };
    let proof = prove(key, &nonce, &context(theirs, ours));
    let hello = Message::HostHello {
        versions: ours,
        proof: hex::encode(proof),
    };
    let mut out = Vec::with_capacity(160 + then.len());
    encode_packet(&Packet::Control(hello), &mut out)?;
    out.extend_from_slice(then);
    write_encoded(conn, &out).map_err(PacketError::Frame)?;
    match next_message(conn, "ready")? {
        Message::Ready { version: got } if got == version => Ok(version),
        Message::Ready { version: got } => Err(HandshakeError::VersionDisagreement {
            expected: version,
            got,
        }),
        other => Err(HandshakeError::Unexpected {
            expected: "ready",
            got: other.name(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::MAX_VERSION;
    use std::os::unix::net::UnixStream;
    use std::thread;

    fn run_pair(
        guest_key: Key,
        guest_range: VersionRange,
        host_key: Key,
        host_range: VersionRange,
    ) -> (Result<u32, HandshakeError>, Result<u32, HandshakeError>) {
        let (mut g, mut h) = UnixStream::pair().unwrap();
        let guest = thread::spawn(move || guest_handshake(&mut g, &guest_key, guest_range));
        let host = host_handshake(&mut h, &host_key, host_range);
        drop(h);
        (guest.join().unwrap(), host)
    }

    #[test]
    fn matching_keys_complete_the_handshake() {
        let key = Key::generate().unwrap();
        let (g, h) = run_pair(
            key.clone(),
            VersionRange::CURRENT,
            key,
            VersionRange::CURRENT,
        );
        assert_eq!(g.unwrap(), MAX_VERSION);
        assert_eq!(h.unwrap(), MAX_VERSION);
    }

    #[test]
    fn host_without_the_key_is_refused_by_the_guest() {
        let (g, h) = run_pair(
            Key::generate().unwrap(),
            VersionRange::CURRENT,
            Key::generate().unwrap(),
            VersionRange::CURRENT,
        );
        assert!(matches!(g, Err(HandshakeError::BadProof)));
        assert!(matches!(
            h,
            Err(HandshakeError::Refused(RemoteError {
                code: ErrorCode::AuthFailed,
                ..
            }))
        ));
    }

    #[test]
    fn disjoint_versions_fail_with_an_error_naming_both() {
        let key = Key::generate().unwrap();
        let old = VersionRange { min: 1, max: 1 };
        let new = VersionRange { min: 2, max: 3 };
        let (g, h) = run_pair(key.clone(), old, key, new);
        match h {
            Err(HandshakeError::Version(VersionError::NoOverlap { ours, theirs })) => {
                assert_eq!((ours, theirs), (new, old));
            }
            other => panic!("host: {other:?}"),
        }
        match g {
            Err(HandshakeError::Refused(err)) => {
                assert_eq!(err.code, ErrorCode::VersionMismatch);
                assert!(
                    err.message.contains("2..=3") && err.message.contains('1'),
                    "{}",
                    err.message
                );
            }
            other => panic!("guest: {other:?}"),
        }
    }

    #[test]
    fn proof_is_bound_to_the_version_ranges() {
        let key = Key::generate().unwrap();
        let nonce = [7u8; 32];
        let a = VersionRange { min: 1, max: 2 };
        let b = VersionRange { min: 1, max: 1 };
        let proof = prove(&key, &nonce, &context(a, a));
        assert!(verify(&key, &nonce, &context(a, a), &proof));
        assert!(!verify(&key, &nonce, &context(a, b), &proof));
        assert!(!verify(&key, &[8u8; 32], &context(a, a), &proof));
    }

    #[test]
    fn key_debug_output_never_shows_the_key() {
        let key = Key::from_bytes([0xab; 32]);
        assert!(!format!("{key:?}").contains("ab"));
        assert_eq!(Key::from_hex(&key.to_hex()).unwrap(), key);
    }
}
