//! The DNS wire format, as far as the responder needs it: read a query's question, and write the
//! answers it gives itself (A/AAAA with the sidecar's address, REFUSED, FORMERR). Forwarded
//! queries travel as the client's own bytes and are never re-encoded.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;

pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_REFUSED: u8 = 5;

/// A query with exactly one question, as the responder reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    pub id: u16,
    /// The header's flags word, of which the opcode and RD bits are echoed.
    flags: u16,
    /// Lower case, without the trailing dot; empty for the root.
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    /// The question section's bytes, echoed verbatim in answers.
    question_bytes: Vec<u8>,
    /// Whether the query carried an EDNS OPT record (then so must the answer).
    edns: bool,
}

/// Why a message is not a query the responder can read. `Some(id)` when the header was readable,
/// so a FORMERR can be sent back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub id: Option<u16>,
    pub why: &'static str,
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]))
}

/// Where the question of a message ends (past its name, type and class), for a name written
/// without compression, as in a query and as resolvers echo it; `None` when the bytes hold no such
/// complete question.
pub fn question_end(bytes: &[u8]) -> Option<usize> {
    let mut at = 12;
    loop {
        let len = usize::from(*bytes.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        at += len;
    }
    let end = at + 4;
    (end <= bytes.len()).then_some(end)
}

/// Reads a standard query with one question. Compression pointers are refused in the question
/// (no stub resolver sends them there).
pub fn read_query(bytes: &[u8]) -> Result<Question, Unreadable> {
    let id = u16_at(bytes, 0).ok_or(Unreadable {
        id: None,
        why: "shorter than a DNS header",
    })?;
    let bad = |why| Unreadable { id: Some(id), why };
    if bytes.len() < 12 {
        return Err(Unreadable {
            id: None,
            why: "shorter than a DNS header",
        });
    }
    let flags = u16_at(bytes, 2).ok_or(bad("header"))?;
    if flags & 0x8000 != 0 {
        return Err(bad("a response, not a query"));
    }
    if (flags >> 11) & 0xf != 0 {
        return Err(bad("not a standard query (opcode)"));
    }
    let qdcount = u16_at(bytes, 4).ok_or(bad("header"))?;
    let ancount = u16_at(bytes, 6).ok_or(bad("header"))?;
    let nscount = u16_at(bytes, 8).ok_or(bad("header"))?;
    let arcount = u16_at(bytes, 10).ok_or(bad("header"))?;
    if qdcount != 1 || ancount != 0 || nscount != 0 {
        return Err(bad(
            "a query must carry exactly one question and no answers",
        ));
    }
    let mut at = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*bytes.get(at).ok_or(bad("name runs past the end"))?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return Err(bad("compressed or oversized label in the question"));
        }
        let label = bytes
            .get(at..at + len)
            .ok_or(bad("name runs past the end"))?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += len;
        if at - 12 > 255 {
            return Err(bad("name longer than 255 bytes"));
        }
    }
    let qtype = u16_at(bytes, at).ok_or(bad("question runs past the end"))?;
    let qclass = u16_at(bytes, at + 2).ok_or(bad("question runs past the end"))?;
    let question_end = at + 4;
    // An OPT record in the additional section: root name (0), type 41.
    let edns = arcount > 0
        && bytes.get(question_end) == Some(&0)
        && u16_at(bytes, question_end + 1) == Some(TYPE_OPT);
    Ok(Question {
        id,
        flags,
        name: labels.join("."),
        qtype,
        qclass,
        question_bytes: bytes[12..question_end].to_vec(),
        edns,
    })
}

impl Question {
    pub fn is_address_query(&self) -> bool {
        self.qclass == CLASS_IN && (self.qtype == TYPE_A || self.qtype == TYPE_AAAA)
    }

    /// A response header + the echoed question, with `answers` answer records following.
    fn response_head(&self, rcode: u8, answers: u16) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&self.id.to_be_bytes());
        // QR, the query's opcode and RD, RA (the sidecar answers for everything it serves), rcode.
        let flags = 0x8000 | (self.flags & 0x7900) | 0x0080 | u16::from(rcode & 0xf);
        out.extend_from_slice(&flags.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&answers.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&u16::from(self.edns).to_be_bytes());
        out.extend_from_slice(&self.question_bytes);
        out
    }

    fn finish(&self, mut out: Vec<u8>) -> Vec<u8> {
        if self.edns {
            // OPT: root name, type 41, UDP payload 1232 (the DNS flag day figure), no flags.
            out.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        }
        out
    }

    /// A response with no answers and this rcode (NOERROR for "no such record", REFUSED, ...).
    pub fn empty_response(&self, rcode: u8) -> Vec<u8> {
        let head = self.response_head(rcode, 0);
        self.finish(head)
    }

    /// The answer to an A or AAAA query: the given addresses (of the query's family), or an empty
    /// NOERROR answer when the sidecar has none of that family.
    pub fn address_response(
        &self,
        v4: Option<Ipv4Addr>,
        v6: Option<Ipv6Addr>,
        ttl: u32,
    ) -> Vec<u8> {
        let rdata: Option<Vec<u8>> = match self.qtype {
            TYPE_A => v4.map(|ip| ip.octets().to_vec()),
            TYPE_AAAA => v6.map(|ip| ip.octets().to_vec()),
            _ => None,
        };
        let Some(rdata) = rdata else {
            return self.empty_response(0);
        };
        let mut out = self.response_head(0, 1);
        out.extend_from_slice(&[0xc0, 0x0c]); // the name: a pointer to the question's
        out.extend_from_slice(&self.qtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(&rdata);
        self.finish(out)
    }
}

/// A FORMERR for a message whose header could be read but whose question could not.
pub fn format_error(id: u16) -> Vec<u8> {
    let mut out = id.to_be_bytes().to_vec();
    out.extend_from_slice(&(0x8000u16 | u16::from(RCODE_FORMERR)).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out
}

/// The name of a query type, for the decision log.
pub fn type_name(qtype: u16) -> String {
    match qtype {
        1 => "A".into(),
        2 => "NS".into(),
        5 => "CNAME".into(),
        6 => "SOA".into(),
        10 => "NULL".into(),
        12 => "PTR".into(),
        15 => "MX".into(),
        16 => "TXT".into(),
        28 => "AAAA".into(),
        33 => "SRV".into(),
        64 => "SVCB".into(),
        65 => "HTTPS".into(),
        255 => "ANY".into(),
        other => format!("TYPE{other}"),
    }
}

/// Builds a query (for tests and the benchmark's client).
pub fn build_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut out = id.to_be_bytes().to_vec();
    out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out
}

/// The rcode and the IPv4/IPv6 addresses in a response's answer section (for tests and the
/// benchmark's client). `None` when it is not a readable response.
pub fn read_response_addresses(bytes: &[u8]) -> Option<(u8, Vec<std::net::IpAddr>)> {
    let flags = u16_at(bytes, 2)?;
    let rcode = (flags & 0xf) as u8;
    let qdcount = u16_at(bytes, 4)?;
    let ancount = u16_at(bytes, 6)?;
    let mut at = 12;
    let skip_name = |mut at: usize| -> Option<usize> {
        loop {
            let len = *bytes.get(at)?;
            if len & 0xc0 == 0xc0 {
                return Some(at + 2);
            }
            at += 1 + usize::from(len);
            if len == 0 {
                return Some(at);
            }
        }
    };
    for _ in 0..qdcount {
        at = skip_name(at)? + 4;
    }
    let mut addresses = Vec::new();
    for _ in 0..ancount {
        at = skip_name(at)?;
        let rtype = u16_at(bytes, at)?;
        let rdlen = usize::from(u16_at(bytes, at + 8)?);
        let rdata = bytes.get(at + 10..at + 10 + rdlen)?;
        match (rtype, rdlen) {
            (TYPE_A, 4) => addresses.push(std::net::IpAddr::from(<[u8; 4]>::try_from(rdata).ok()?)),
            (TYPE_AAAA, 16) => {
                addresses.push(std::net::IpAddr::from(<[u8; 16]>::try_from(rdata).ok()?))
            }
            _ => {}
        }
        at += 10 + rdlen;
    }
    Some((rcode, addresses))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_query_and_answers_it() {
        let query = build_query(0x1234, "API.Example.com.", TYPE_A);
        let q = read_query(&query).unwrap();
        assert_eq!(
            (q.id, q.name.as_str(), q.qtype),
            (0x1234, "api.example.com", TYPE_A)
        );
        assert!(q.is_address_query());
        let answer = q.address_response(Some(Ipv4Addr::new(10, 0, 0, 2)), None, 5);
        let (rcode, addresses) = read_response_addresses(&answer).unwrap();
        assert_eq!(rcode, 0);
        assert_eq!(
            addresses,
            vec!["10.0.0.2".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(&answer[..2], &[0x12, 0x34]);
    }

    #[test]
    fn aaaa_without_an_ipv6_address_is_an_empty_noerror() {
        let q = read_query(&build_query(1, "a.example", TYPE_AAAA)).unwrap();
        let answer = q.address_response(Some(Ipv4Addr::LOCALHOST), None, 5);
        assert_eq!(read_response_addresses(&answer), Some((0, vec![])));
    }

    #[test]
    fn refused_echoes_the_question() {
        let query = build_query(7, "x.example", 16);
        let q = read_query(&query).unwrap();
        let refused = q.empty_response(RCODE_REFUSED);
        assert_eq!(
            read_response_addresses(&refused),
            Some((RCODE_REFUSED, vec![]))
        );
        assert_eq!(
            &refused[12..],
            &query[12..],
            "the question is echoed byte for byte"
        );
    }

    #[test]
    fn edns_queries_get_an_opt_record_back() {
        let mut query = build_query(9, "a.example", TYPE_A);
        query[11] = 1; // arcount
        query.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
        let q = read_query(&query).unwrap();
        let answer = q.empty_response(RCODE_REFUSED);
        assert_eq!(&answer[10..12], &[0, 1]);
        assert_eq!(&answer[answer.len() - 11..answer.len() - 8], &[0, 0, 41]);
    }

    #[test]
    fn garbage_is_unreadable_with_or_without_an_id() {
        assert_eq!(read_query(b"\x01").unwrap_err().id, None);
        let mut response = build_query(5, "a", TYPE_A);
        response[2] |= 0x80;
        assert_eq!(read_query(&response).unwrap_err().id, Some(5));
        let mut pointer = build_query(6, "a", TYPE_A);
        pointer[12] = 0xc0;
        assert!(read_query(&pointer).is_err());
        assert_eq!(&format_error(6)[..4], &[0, 6, 0x80, 1]);
    }

    #[test]
    fn the_question_ends_past_its_name_type_and_class() {
        let query = build_query(7, "db.internal", TYPE_A);
        // 1 + "db" + 1 + "internal" + the root's 0, then type and class.
        assert_eq!(question_end(&query), Some(12 + 13 + 4));
        assert_eq!(
            read_query(&query).unwrap().question_bytes,
            query[12..12 + 13 + 4]
        );
        assert_eq!(question_end(&query[..12 + 13 + 3]), None, "cut short");
        let mut pointer = query.clone();
        pointer[12] = 0xc0;
        assert_eq!(question_end(&pointer), None, "compressed");
        assert_eq!(question_end(&query[..12]), None, "no question at all");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = question_end(&bytes);
            if let Ok(q) = read_query(&bytes) {
                let _ = q.address_response(Some(Ipv4Addr::LOCALHOST), Some(Ipv6Addr::LOCALHOST), 1);
                let _ = q.empty_response(RCODE_REFUSED);
            }
            let _ = read_response_addresses(&bytes);
        }
    }
}
