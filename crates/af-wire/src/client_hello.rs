//! Reading the server name (SNI) out of a TLS ClientHello, from bytes that may arrive in pieces.
//! Nothing is decrypted and nothing is answered: the sidecar only needs to know which name the
//! client is about to talk to, to decide it and to refuse domain fronting.

/// The most ClientHello the sidecar will buffer. Real ones are a few hundred bytes; post-quantum
/// key shares make them a few kilobytes.
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// What the bytes so far say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelloRead {
    /// Not enough bytes yet; read more and ask again.
    NeedMore,
    /// A complete ClientHello, with the server name it carries (if any), lower case.
    Complete { server_name: Option<String> },
    /// Not a TLS ClientHello at all, or a malformed one.
    NotTls(&'static str),
}

/// Parses a ClientHello from the start of a connection's bytes, reassembling a handshake message
/// split across TLS records and across reads.
pub fn read_client_hello(bytes: &[u8]) -> HelloRead {
    let mut handshake = Vec::new();
    let mut rest = bytes;
    loop {
        if rest.len() < 5 {
            return HelloRead::NeedMore;
        }
        if rest[0] != 0x16 {
            return HelloRead::NotTls("the first record is not a TLS handshake");
        }
        if rest[1] != 0x03 {
            return HelloRead::NotTls("unknown TLS record version");
        }
        let length = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if length == 0 || length > 16384 + 2048 {
            return HelloRead::NotTls("TLS record length out of range");
        }
        if rest.len() < 5 + length {
            return HelloRead::NeedMore;
        }
        handshake.extend_from_slice(&rest[5..5 + length]);
        rest = &rest[5 + length..];
        if handshake.len() >= 4 {
            if handshake[0] != 0x01 {
                return HelloRead::NotTls("the first handshake message is not a ClientHello");
            }
            let message_len = (usize::from(handshake[1]) << 16)
                | (usize::from(handshake[2]) << 8)
                | usize::from(handshake[3]);
            if message_len + 4 > MAX_CLIENT_HELLO {
                return HelloRead::NotTls("ClientHello larger than the sidecar accepts");
            }
            if handshake.len() >= message_len + 4 {
                return match parse_hello_body(&handshake[4..4 + message_len]) {
                    Some(server_name) => HelloRead::Complete { server_name },
                    None => HelloRead::NotTls("malformed ClientHello"),
                };
            }
        }
        if bytes.len() - rest.len() > MAX_CLIENT_HELLO {
            return HelloRead::NotTls("ClientHello larger than the sidecar accepts");
        }
    }
}

/// A minimal, well-formed TLS 1.3 ClientHello naming `server_name` (or no server), in one record:
/// what tests and benchmarks send where a real TLS client would.
pub fn build_client_hello(server_name: Option<&str>) -> Vec<u8> {
    let mut extensions = Vec::new();
    if let Some(name) = server_name {
        let name = name.as_bytes();
        let mut entry = vec![0u8];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name);
        let mut ext_data = (entry.len() as u16).to_be_bytes().to_vec();
        ext_data.extend_from_slice(&entry);
        extensions.extend_from_slice(&0u16.to_be_bytes());
        extensions.extend_from_slice(&(ext_data.len() as u16).to_be_bytes());
        extensions.extend_from_slice(&ext_data);
    }
    // supported_versions, so the hello looks like a real TLS 1.3 one.
    extensions.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]);
    body.extend_from_slice(&[0x01, 0x00]);
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend_from_slice(&extensions);
    let mut handshake = vec![0x01];
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

/// A cursor over a byte slice that refuses to read past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }

    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// The server name in a ClientHello body, `Some(None)` when it has none, `None` when malformed.
fn parse_hello_body(body: &[u8]) -> Option<Option<String>> {
    let mut c = Cursor(body);
    c.take(2)?; // legacy_version
    c.take(32)?; // random
    c.vec8()?; // legacy_session_id
    c.vec16()?; // cipher_suites
    c.vec8()?; // legacy_compression_methods
    if c.0.is_empty() {
        return Some(None); // no extensions at all
    }
    let mut extensions = Cursor(c.vec16()?);
    let mut server_name = None;
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let data = extensions.vec16()?;
        if kind == 0 {
            if server_name.is_some() {
                return None; // two server_name extensions: refuse to pick one
            }
            server_name = Some(parse_server_name(data)?);
        }
    }
    Some(server_name)
}

fn parse_server_name(data: &[u8]) -> Option<String> {
    let mut c = Cursor(data);
    let mut list = Cursor(c.vec16()?);
    let mut host = None;
    while !list.0.is_empty() {
        let kind = list.u8()?;
        let name = list.vec16()?;
        if kind == 0 {
            if host.is_some() {
                return None;
            }
            let text = std::str::from_utf8(name).ok()?;
            host = Some(text.trim_end_matches('.').to_ascii_lowercase());
        }
    }
    host
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_hello(server_name: Option<&str>) -> Vec<u8> {
        build_client_hello(server_name)
    }

    #[test]
    fn reads_the_server_name() {
        assert_eq!(
            read_client_hello(&client_hello(Some("API.Example.com"))),
            HelloRead::Complete {
                server_name: Some("api.example.com".into())
            }
        );
        assert_eq!(
            read_client_hello(&client_hello(None)),
            HelloRead::Complete { server_name: None }
        );
    }

    #[test]
    fn every_prefix_needs_more() {
        let hello = client_hello(Some("api.example.com"));
        for cut in 0..hello.len() {
            assert_eq!(
                read_client_hello(&hello[..cut]),
                HelloRead::NeedMore,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_hello_split_across_records_is_reassembled() {
        let hello = client_hello(Some("split.example.com"));
        let handshake = &hello[5..];
        let (a, b) = handshake.split_at(20);
        let mut split = Vec::new();
        for part in [a, b] {
            split.extend_from_slice(&[0x16, 0x03, 0x01]);
            split.extend_from_slice(&(part.len() as u16).to_be_bytes());
            split.extend_from_slice(part);
        }
        assert_eq!(
            read_client_hello(&split),
            HelloRead::Complete {
                server_name: Some("split.example.com".into())
            }
        );
    }

    #[test]
    fn other_protocols_are_not_tls() {
        for bytes in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"SSH-2.0-OpenSSH_9.6\r\n",
            &[0x16, 0x03, 0x01, 0, 4, 2, 0, 0, 0],
        ] {
            assert!(
                matches!(read_client_hello(bytes), HelloRead::NotTls(_)),
                "{bytes:?}"
            );
        }
    }

    proptest::proptest! {
        /// Arbitrary bytes, and a real hello with one byte changed, never panic the reader.
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), at in 0usize..200, value: u8) {
            let _ = read_client_hello(&bytes);
            let mut hello = client_hello(Some("fuzz.example.com"));
            let at = at % hello.len();
            hello[at] = value;
            let _ = read_client_hello(&hello);
        }
    }
}
