//! HTTP/1.1 chunked transfer coding (RFC 9112 section 7.1), both ways: decoding an origin's
//! chunked response as its bytes arrive, and the framing of a request body sent chunked. Pure:
//! bytes in, frames out; the connection that reads and writes them is `upstream_http`.

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;

/// The longest chunk-size line (size and extensions) accepted; a longer one is refused rather
/// than buffered without end.
const MAX_SIZE_LINE: usize = 4096;

/// The most trailer bytes accepted after the last chunk.
const MAX_TRAILERS: usize = 16 << 10;

/// What the decoder found in the bytes it has.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Some of the body.
    Data(Bytes),
    /// The trailer fields after the last chunk; the body ends after them.
    Trailers(HeaderMap),
    /// The body is over; bytes after it (if any) are still in the buffer.
    End,
    /// More bytes are needed to go on.
    NeedMore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line.
    Size,
    /// Inside a chunk's data, with this many bytes to go.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer fields, then an empty line.
    Trailers,
    Done,
}

/// A chunked body's decoder. Feed it the connection's read buffer: it takes what it decodes off
/// the front and leaves anything after the body's end where it is.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder { state: State::Size }
    }
}

impl ChunkedDecoder {
    /// The next thing the buffer holds.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, &'static str> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::End),
                State::Size => {
                    let Some(line_end) = buf.iter().position(|&b| b == b'\n') else {
                        if buf.len() > MAX_SIZE_LINE {
                            return Err("a chunk-size line is too long");
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    if line_end > MAX_SIZE_LINE {
                        return Err("a chunk-size line is too long");
                    }
                    let size = chunk_size(&buf[..line_end])?;
                    buf.advance(line_end + 1);
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
                    let data = buf.split_to(take).freeze();
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err("a chunk's data is not followed by CRLF");
                    }
                    buf.advance(2);
                    self.state = State::Size;
                }
                State::Trailers => {
                    if buf.starts_with(b"\r\n") {
                        buf.advance(2);
                        self.state = State::Done;
                        return Ok(Decoded::End);
                    }
                    let Some(end) = find(buf, b"\r\n\r\n") else {
                        if buf.len() > MAX_TRAILERS {
                            return Err("the trailer section is too large");
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    let trailers = parse_trailers(&buf[..end + 4])?;
                    buf.advance(end + 4);
                    self.state = State::Done;
                    return Ok(Decoded::Trailers(trailers));
                }
            }
        }
    }
}

/// A chunk-size line without its LF: hex digits, then optional extensions (ignored), then CR.
fn chunk_size(line: &[u8]) -> Result<u64, &'static str> {
    let line = line
        .strip_suffix(b"\r")
        .ok_or("a chunk-size line does not end with CRLF")?;
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 {
        return Err("a chunk-size line does not start with a hex size");
    }
    match line[digits..].first() {
        None | Some(b';' | b' ' | b'\t') => {}
        Some(_) => return Err("a chunk size is not hexadecimal"),
    }
    let mut size: u64 = 0;
    for &digit in &line[..digits] {
        let value = u64::from(char::from(digit).to_digit(16).unwrap_or(0));
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(value))
            .ok_or("a chunk size is too large")?;
    }
    Ok(size)
}

fn parse_trailers(section: &[u8]) -> Result<HeaderMap, &'static str> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let parsed = httparse::parse_headers(section, &mut fields)
        .map_err(|_| "the trailer section is malformed")?;
    let httparse::Status::Complete((_, fields)) = parsed else {
        return Err("the trailer section is incomplete");
    };
    let mut trailers = HeaderMap::new();
    for field in fields {
        let name = http::HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| "a trailer field's name is invalid")?;
        let value = http::HeaderValue::from_bytes(field.value)
            .map_err(|_| "a trailer field's value is invalid")?;
        trailers.append(name, value);
    }
    Ok(trailers)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The line that opens a chunk of `len` bytes.
pub fn chunk_head(len: usize) -> Vec<u8> {
    format!("{len:x}\r\n").into_bytes()
}

/// The end of a chunked body: the last chunk, the trailer fields, the empty line.
pub fn last_chunk(trailers: Option<&HeaderMap>) -> Vec<u8> {
    let mut end = b"0\r\n".to_vec();
    for (name, value) in trailers.into_iter().flatten() {
        end.extend_from_slice(name.as_str().as_bytes());
        end.extend_from_slice(b": ");
        end.extend_from_slice(value.as_bytes());
        end.extend_from_slice(b"\r\n");
    }
    end.extend_from_slice(b"\r\n");
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `wire` fed in pieces of `step` bytes: the data, the trailers, what is left over.
    fn decode_in_steps(wire: &[u8], step: usize) -> Result<(Vec<u8>, HeaderMap, Vec<u8>), &str> {
        let mut decoder = ChunkedDecoder::default();
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut trailers = HeaderMap::new();
        let mut fed = 0;
        loop {
            match decoder.decode(&mut buf)? {
                Decoded::Data(bytes) => data.extend_from_slice(&bytes),
                Decoded::Trailers(t) => trailers = t,
                Decoded::End => return Ok((data, trailers, buf.to_vec())),
                Decoded::NeedMore => {
                    if fed == wire.len() {
                        return Err("the wire ended first");
                    }
                    let next = (fed + step).min(wire.len());
                    buf.extend_from_slice(&wire[fed..next]);
                    fed = next;
                }
            }
        }
    }

    #[test]
    fn a_body_decodes_whole_however_its_bytes_arrive() {
        let wire = b"5\r\nhello\r\n1;name=value\r\n \r\nA\r\n0123456789\r\n0\r\n\r\nHTTP/1.1";
        for step in [1, 2, 3, 7, 64] {
            let (data, trailers, rest) = decode_in_steps(wire, step).unwrap();
            assert_eq!(data, b"hello 0123456789", "step {step}");
            assert!(trailers.is_empty());
            assert!(
                b"HTTP/1.1".starts_with(&rest),
                "the next response's bytes are left: {rest:?}"
            );
        }
    }

    #[test]
    fn trailers_are_read_after_the_last_chunk() {
        let wire = b"3\r\nabc\r\n0\r\nx-checksum: 42\r\nx-more: yes\r\n\r\n";
        for step in [1, 5, 100] {
            let (data, trailers, rest) = decode_in_steps(wire, step).unwrap();
            assert_eq!(data, b"abc");
            assert_eq!(trailers["x-checksum"], "42");
            assert_eq!(trailers["x-more"], "yes");
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn malformed_framing_is_refused() {
        for wire in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5 junk\nhello\r\n0\r\n\r\n",
            b"10000000000000000\r\n",
            b"\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
        ] {
            assert!(
                decode_in_steps(wire, 100).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(wire)
            );
        }
        let endless = vec![b'1'; MAX_SIZE_LINE + 10];
        assert_eq!(
            decode_in_steps(&endless, 1000),
            Err("a chunk-size line is too long")
        );
    }

    #[test]
    fn the_encoder_frames_what_the_decoder_reads() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-sum", http::HeaderValue::from_static("7"));
        let mut wire = Vec::new();
        for piece in [&b"first"[..], b"", b"second piece"] {
            if piece.is_empty() {
                continue;
            }
            wire.extend(chunk_head(piece.len()));
            wire.extend_from_slice(piece);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend(last_chunk(Some(&trailers)));
        let (data, decoded, rest) = decode_in_steps(&wire, 3).unwrap();
        assert_eq!(data, b"firstsecond piece");
        assert_eq!(decoded, trailers);
        assert!(rest.is_empty());
        assert_eq!(last_chunk(None), b"0\r\n\r\n");
    }

    proptest::proptest! {
        /// Whatever an origin sends as a chunked body, in whatever pieces: decoded or refused,
        /// never a panic, and never more data handed on than the wire carried.
        #[test]
        fn any_bytes_are_decoded_or_refused(
            wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            step in 1usize..64,
        ) {
            if let Ok((data, _, rest)) = decode_in_steps(&wire, step) {
                proptest::prop_assert!(data.len() + rest.len() <= wire.len());
            }
        }

        /// Any body, framed in any chunks and fed in any pieces, decodes to itself, and what
        /// follows the body is left for the next response.
        #[test]
        fn any_chunking_of_any_body_decodes_to_the_body(
            pieces in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<u8>(), 1..80), 0..8),
            step in 1usize..64,
        ) {
            let mut wire = Vec::new();
            for piece in &pieces {
                wire.extend(chunk_head(piece.len()));
                wire.extend_from_slice(piece);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend(last_chunk(None));
            wire.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            let (data, trailers, rest) = decode_in_steps(&wire, step).unwrap();
            proptest::prop_assert_eq!(data, pieces.concat());
            proptest::prop_assert!(trailers.is_empty());
            proptest::prop_assert!(b"HTTP/1.1 200 OK\r\n".starts_with(&rest));
        }
    }
}
