//! The DNS wire format, as far as the responder needs it: read a query's question (its name with
//! hickory-proto, so that it is a sequence of labels, never joined text), write the answers the
//! responder gives itself (A/AAAA with the sidecar's address, REFUSED, FORMERR), and write the
//! query it forwards — rebuilt from the question alone, so nothing else a client put in its query
//! reaches the platform's resolver.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;

pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_REFUSED: u8 = 5;

/// The flags of every query the responder forwards: a standard query, recursion desired.
const FORWARDED_FLAGS: u16 = 0x0100;

/// A query with exactly one question, as the responder reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    pub id: u16,
    /// The header's flags word, of which the opcode and RD bits are echoed.
    flags: u16,
    /// The name asked about, label by label (compare it with [`Name`]'s case-insensitive
    /// comparisons, never as text: a label may hold dots).
    pub name: Name,
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
    // Names in a query are written whole (no stub resolver compresses its question), which also
    // makes the question's bytes echoable verbatim in an answer.
    let at = question_end(bytes).ok_or(bad("a question that is cut short, or compressed"))? - 4;
    if at - 12 > 255 {
        return Err(bad("name longer than 255 bytes"));
    }
    let name =
        Name::read(&mut BinDecoder::new(&bytes[12..at])).map_err(|_| bad("name unreadable"))?;
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
        name,
        qtype,
        qclass,
        question_bytes: bytes[12..question_end].to_vec(),
        edns,
    })
}

/// Whether every label of `name` is a host name's: letters, digits and hyphens (LDH), and `_`,
/// which service names use (`_http._tcp`). Anything else — a label holding a dot, a space, any
/// byte a host name cannot have — is a name no platform serves, and text that could be carried
/// out through a resolver. Lengths are the wire format's (63 per label, 255 in all), enforced as
/// the name is read.
pub fn is_host_name(name: &Name) -> bool {
    name.iter().all(|label| {
        !label.is_empty()
            && label
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
    })
}

impl Question {
    /// The name as text for the decision log: dots inside a label, and bytes no host name has,
    /// escaped (`a\.b`, `\255`); no trailing dot.
    pub fn name_text(&self) -> String {
        let mut text = self.name.to_lowercase().to_ascii();
        if text.len() > 1 {
            text.pop();
        }
        text
    }

    /// The query sent to the platform's resolver for this question, under the client's id: a
    /// header of the responder's own (a standard query asking for recursion), the one question,
    /// and an EDNS OPT record of the responder's own (UDP payload 1232, no options) when the
    /// client sent one. Nothing else of the client's query — its other flags, its other records,
    /// its EDNS options, bytes past its end — is sent on.
    pub fn forwarded_query(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.question_bytes.len() + 11);
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&FORWARDED_FLAGS.to_be_bytes());
        out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(self.edns)]);
        // The question as read: a name written whole (checked as it was read), type and class.
        out.extend_from_slice(&self.question_bytes);
        self.finish(out)
    }

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
            (q.id, q.name_text().as_str(), q.qtype),
            (0x1234, "api.example.com", TYPE_A)
        );
        assert_eq!(q.name, Name::from_ascii("api.example.com.").unwrap());
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

    /// Any name of any labels (any bytes, up to the wire's limits), asked as a query.
    fn query_strategy() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let label = proptest::collection::vec(any::<u8>(), 1..20);
        (
            proptest::collection::vec(label, 0..8),
            any::<u16>(),
            any::<bool>(),
        )
            .prop_map(|(labels, qtype, edns)| {
                let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
                for label in &labels {
                    query.push(label.len() as u8);
                    query.extend_from_slice(label);
                }
                query.push(0);
                query.extend_from_slice(&qtype.to_be_bytes());
                query.extend_from_slice(&CLASS_IN.to_be_bytes());
                if edns {
                    // An OPT record with an option the forwarded query must not carry.
                    query.extend_from_slice(&[
                        0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 6, 0xfd, 0xe9, 0, 2, 7, 7,
                    ]);
                }
                query
            })
    }

    proptest::proptest! {
        /// The responder reads a question as hickory-proto does (name label by label, type), and
        /// the query it forwards is one hickory reads as exactly that question and nothing else.
        #[test]
        fn questions_read_as_hickory_reads_them(query in query_strategy()) {
            let theirs = hickory_proto::op::Message::from_vec(&query);
            match read_query(&query) {
                Ok(ours) => {
                    let theirs = theirs.expect("hickory reads what the responder reads");
                    let asked = &theirs.queries[0];
                    proptest::prop_assert!(ours.name.eq_case(asked.name()));
                    proptest::prop_assert_eq!(ours.qtype, u16::from(asked.query_type()));
                    let forwarded = hickory_proto::op::Message::from_vec(&ours.forwarded_query())
                        .expect("the forwarded query is a DNS message");
                    proptest::prop_assert_eq!(forwarded.queries.len(), 1);
                    proptest::prop_assert!(forwarded.queries[0].name().eq_case(asked.name()));
                    proptest::prop_assert!(forwarded.answers.is_empty() && forwarded.authorities.is_empty());
                    proptest::prop_assert!(forwarded.additionals.is_empty());
                    let edns = forwarded.edns.as_ref();
                    proptest::prop_assert_eq!(edns.is_some(), theirs.edns.is_some());
                    proptest::prop_assert!(edns.is_none_or(|e| e.options().as_ref().is_empty()));
                }
                // Only a name too long for the wire is refused here and read there.
                Err(why) => proptest::prop_assert!(
                    theirs.is_err() || query.len() > 255 + 12 + 4,
                    "{why:?}"
                ),
            }
        }

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
