//! YAML as a tree in which every node remembers where it was written: the manifest's, and afe's
//! config documents (afe-config), so both report problems at their line and column.
//!
//! Decoding goes through this tree rather than straight into typed structs, because serde stops
//! at the first error and a person fixing a manifest wants every error at once.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Spanned};

use crate::diagnostic::{Location, ManifestCode, Problem};

/// A YAML node. Mapping entries stay a list, in file order, so that duplicate keys survive parsing
/// and can be reported where they were written.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<SpannedNode>),
    Map(Vec<(SpannedNode, SpannedNode)>),
}

pub type SpannedNode = Spanned<Node>;

impl Node {
    /// How the node is named in a "expected X, found Y" message.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Null => "nothing (null)",
            Node::Bool(_) => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }
}

/// Where a node was written. Aliases report the place they were used, which is where a person
/// looks first.
pub fn location_of(node: &SpannedNode) -> Location {
    to_location(&node.referenced, None)
}

/// Converts the parser's location. Byte offsets are missing for some parser errors; with the source
/// at hand they are recomputed from line and column.
fn to_location(at: &serde_saphyr::Location, source: Option<&str>) -> Location {
    let span = at.span();
    let offset = span.byte_offset().and_then(|o| usize::try_from(o).ok());
    Location {
        line: u32::try_from(at.line()).unwrap_or(u32::MAX),
        column: u32::try_from(at.column()).unwrap_or(u32::MAX),
        offset: offset
            .or_else(|| source.map(|s| byte_offset_of(s, at.line(), at.column())))
            .unwrap_or(0),
        len: span
            .byte_len()
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(0),
    }
}

/// How located trees are read: duplicate keys are passed through (and reported later by the
/// decoder, with both places); YAML 1.1 booleans such as `yes` stay strings.
fn located_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        strict_booleans: true,
        with_snippet: false,
    }
}

/// YAML text that does not parse: the parser's message without the place it names, and the place.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub message: String,
    pub location: Location,
}

impl SyntaxError {
    fn from_parser(err: &serde_saphyr::Error, source: &str) -> SyntaxError {
        SyntaxError {
            message: syntax_message(&err.to_string()),
            location: err
                .location()
                .map(|at| to_location(&at, Some(source)))
                .unwrap_or(Location {
                    line: 1,
                    column: 1,
                    offset: 0,
                    len: 0,
                }),
        }
    }
}

/// Parses every document of a YAML stream (`---`-separated) into located trees, in file order.
/// Empty documents are left out.
pub fn parse_documents(source: &str) -> Result<Vec<SpannedNode>, SyntaxError> {
    serde_saphyr::from_multiple_with_options::<SpannedNode>(source, located_options())
        .map(|documents| {
            documents
                .into_iter()
                .filter(|document| document.value != Node::Null)
                .collect()
        })
        .map_err(|err| SyntaxError::from_parser(&err, source))
}

/// Parses YAML text into a located tree.
pub(crate) fn parse_tree(source: &str) -> Result<SpannedNode, Problem> {
    serde_saphyr::from_str_with_options::<SpannedNode>(source, located_options()).map_err(|err| {
        let syntax = SyntaxError::from_parser(&err, source);
        Problem {
            code: ManifestCode::Syntax,
            message: format!("this is not valid YAML: {}", syntax.message),
            help:
                "fix the YAML syntax at this place; indentation must use spaces and be consistent"
                    .to_string(),
            location: Some(syntax.location),
        }
    })
}

/// The parser's message without the place it names ("at line 2, column 2"), which the diagnostic
/// prints itself.
fn syntax_message(rendered: &str) -> String {
    let first = rendered.lines().next().unwrap_or(rendered);
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let first = match first.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("line ") => rest,
        _ => first,
    };
    match first.rfind(" at line ") {
        Some(i) => first[..i].to_string(),
        None => first.to_string(),
    }
}

/// The byte offset of a 1-based line and character column, for errors that carry no byte span.
pub fn byte_offset_of(source: &str, line: u64, column: u64) -> usize {
    let line_start: usize = source
        .split_inclusive('\n')
        .take(usize::try_from(line.saturating_sub(1)).unwrap_or(usize::MAX))
        .map(str::len)
        .sum();
    let rest = source.get(line_start..).unwrap_or("");
    let in_line: usize = rest
        .chars()
        .take(usize::try_from(column.saturating_sub(1)).unwrap_or(usize::MAX))
        .map(char::len_utf8)
        .sum();
    (line_start + in_line).min(source.len())
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        i128::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom("integer too large"))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Node, E> {
        String::from_utf8(v.to_vec())
            .map(Node::Str)
            .map_err(|_| E::custom("binary values are not supported"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_duplicate_keys_and_their_places() {
        let tree = parse_tree("a: 1\na: 2\n").unwrap();
        let Node::Map(entries) = &tree.value else {
            panic!("expected a map")
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(location_of(&entries[1].0).line, 2);
        assert_eq!(location_of(&entries[1].0).offset, 5);
    }

    #[test]
    fn yaml_1_1_booleans_stay_strings() {
        let tree = parse_tree("yes").unwrap();
        assert_eq!(tree.value, Node::Str("yes".into()));
    }

    #[test]
    fn syntax_errors_carry_a_place_and_a_plain_message() {
        let problem = parse_tree("a: [1, 2\nb: c").unwrap_err();
        assert_eq!(problem.code, ManifestCode::Syntax);
        let at = problem.location.unwrap();
        assert_eq!((at.line, at.column), (2, 2));
        assert_eq!(at.offset, 10);
        assert!(!problem.message.contains("line 2"), "{}", problem.message);
    }

    #[test]
    fn byte_offsets_count_multibyte_characters() {
        assert_eq!(byte_offset_of("é: 1\nb: 2", 2, 1), 6);
        assert_eq!(byte_offset_of("é: 1", 1, 2), 2);
        assert_eq!(byte_offset_of("x", 9, 9), 1);
    }
}
