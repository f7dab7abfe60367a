//! Reading the server name from a TLS ClientHello without consuming it (N4).
//!
//! The proxy buffers what the client sends after a CONNECT until one complete ClientHello
//! handshake message has arrived (it may span several TLS records, RFC 8446 §5.1), extracts the
//! `server_name` extension (RFC 6066 §3), and then either replays the buffered bytes to the
//! upstream unchanged (tunnel) or hands them to its own TLS acceptor (interception). Nothing is
//! rewritten, so a tunnelled handshake is byte-for-byte the client's.

/// Largest ClientHello the proxy buffers (post-quantum key shares make hellos ~2 KiB; 64 KiB
/// is generous and bounds memory per connection).
pub const MAX_HELLO: usize = 64 * 1024;

/// Why the bytes are not an acceptable ClientHello.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// The first byte is not a TLS handshake record.
    #[error("the client did not start a TLS handshake")]
    NotTls,
    /// The handshake message is not a ClientHello.
    #[error("the first TLS handshake message is not a ClientHello")]
    NotClientHello,
    /// A length field points past its container, or a field is invalid.
    #[error("malformed ClientHello: {what}")]
    Malformed {
        /// Which part.
        what: &'static str,
    },
    /// More than [`MAX_HELLO`] bytes without a complete ClientHello.
    #[error("ClientHello larger than {MAX_HELLO} bytes")]
    TooLarge,
}

/// What the proxy needs from a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The `host_name` of the server_name extension, as sent.
    pub sni: Option<String>,
}

/// Parses the ClientHello at the start of `buf`; `Ok(None)` means more bytes are needed.
pub fn parse_client_hello(buf: &[u8]) -> Result<Option<ClientHello>, HelloError> {
    if buf.len() > MAX_HELLO {
        return Err(HelloError::TooLarge);
    }
    if buf.first().is_some_and(|b| *b != 0x16) {
        return Err(HelloError::NotTls);
    }
    let mut handshake = Vec::new();
    let mut rest = buf;
    loop {
        if rest.len() < 5 {
            return Ok(None);
        }
        if rest[0] != 0x16 {
            return Err(HelloError::Malformed {
                what: "a non-handshake record inside the ClientHello",
            });
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if rest.len() < 5 + len {
            return Ok(None);
        }
        handshake.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if handshake.len() >= 4 {
            if handshake[0] != 0x01 {
                return Err(HelloError::NotClientHello);
            }
            let body_len = u32::from_be_bytes([0, handshake[1], handshake[2], handshake[3]]);
            let body_len = body_len as usize;
            if body_len > MAX_HELLO {
                return Err(HelloError::TooLarge);
            }
            if handshake.len() >= 4 + body_len {
                return parse_body(&handshake[4..4 + body_len]).map(Some);
            }
        }
    }
}

/// A cursor over a byte slice whose reads fail instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed { what });
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<usize, HelloError> {
        Ok(usize::from(self.take(1, what)?[0]))
    }

    fn u16(&mut self, what: &'static str) -> Result<usize, HelloError> {
        let b = self.take(2, what)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.u8(what)?;
        self.take(n, what)
    }

    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.u16(what)?;
        self.take(n, what)
    }
}

fn parse_body(body: &[u8]) -> Result<ClientHello, HelloError> {
    let mut r = Reader(body);
    r.take(2 + 32, "version and random")?;
    r.vec8("session id")?;
    r.vec16("cipher suites")?;
    r.vec8("compression methods")?;
    if r.0.is_empty() {
        return Ok(ClientHello { sni: None }); // no extensions at all
    }
    let mut exts = Reader(r.vec16("extensions")?);
    let mut sni = None;
    while !exts.0.is_empty() {
        let kind = exts.u16("extension type")?;
        let data = exts.vec16("extension data")?;
        if kind == 0 {
            if sni.is_some() {
                return Err(HelloError::Malformed {
                    what: "two server_name extensions",
                });
            }
            sni = Some(parse_server_name(data)?);
        }
    }
    Ok(ClientHello { sni })
}

fn parse_server_name(data: &[u8]) -> Result<String, HelloError> {
    let mut list = Reader(Reader(data).vec16("server name list")?);
    let mut host = None;
    while !list.0.is_empty() {
        let kind = list.u8("server name type")?;
        let name = list.vec16("server name")?;
        if kind == 0 {
            if host.is_some() {
                return Err(HelloError::Malformed {
                    what: "two host names in server_name",
                });
            }
            if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic()) {
                return Err(HelloError::Malformed {
                    what: "server name is not a printable ASCII host name",
                });
            }
            host = Some(String::from_utf8_lossy(name).into_owned());
        }
    }
    host.ok_or(HelloError::Malformed {
        what: "server_name without a host name",
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ClientHello with an optional SNI, split into records of `record_size` bytes.
    pub(crate) fn hello(sni: Option<&str>, record_size: usize) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one cipher suite
        body.extend([1, 0]); // null compression
        let mut exts = Vec::new();
        if let Some(name) = sni {
            let n = name.len() as u16;
            exts.extend([0, 0]);
            exts.extend((n + 5).to_be_bytes());
            exts.extend((n + 3).to_be_bytes());
            exts.push(0);
            exts.extend(n.to_be_bytes());
            exts.extend(name.as_bytes());
        }
        exts.extend([0, 0x2b, 0, 3, 2, 3, 4]); // supported_versions: TLS 1.3
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut hs = vec![1];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut out = Vec::new();
        for chunk in hs.chunks(record_size) {
            out.extend([0x16, 3, 1]);
            out.extend((chunk.len() as u16).to_be_bytes());
            out.extend(chunk);
        }
        out
    }

    #[test]
    fn reads_sni_from_one_or_many_records() {
        for size in [1000, 7, 1] {
            let bytes = hello(Some("api.github.com"), size);
            let parsed = parse_client_hello(&bytes).unwrap().unwrap();
            assert_eq!(
                parsed.sni.as_deref(),
                Some("api.github.com"),
                "record size {size}"
            );
        }
    }

    #[test]
    fn partial_hello_asks_for_more_bytes() {
        let bytes = hello(Some("example.com"), 16);
        for cut in [0, 1, 4, 5, 20, bytes.len() - 1] {
            assert_eq!(parse_client_hello(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn hello_without_sni_is_reported_as_such() {
        let parsed = parse_client_hello(&hello(None, 1000)).unwrap().unwrap();
        assert_eq!(parsed.sni, None);
    }

    #[test]
    fn non_tls_and_malformed_input_is_refused() {
        assert_eq!(
            parse_client_hello(b"GET / HTTP/1.1\r\n"),
            Err(HelloError::NotTls)
        );
        let mut bytes = hello(Some("example.com"), 1000);
        bytes[5] = 2; // a ServerHello
        assert_eq!(parse_client_hello(&bytes), Err(HelloError::NotClientHello));
        let mut bytes = hello(Some("example.com"), 1000);
        let n = bytes.len();
        bytes[n - 12] = 0xff; // the server name length points past the extension
        assert!(matches!(
            parse_client_hello(&bytes),
            Err(HelloError::Malformed { .. })
        ));
    }

    #[test]
    fn oversized_hello_is_refused() {
        let mut bytes = vec![0x16, 3, 1, 0xff, 0xff];
        bytes.resize(MAX_HELLO + 1, 0);
        assert_eq!(parse_client_hello(&bytes), Err(HelloError::TooLarge));
    }
}
