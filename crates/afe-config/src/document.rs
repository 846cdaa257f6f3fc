//! One manifest as JSON, with the place of every value: a file's documents keep their line and
//! column, a cluster's objects only their field paths. Every later check reports through
//! [`Document::place`], so the two sources report alike.

use std::collections::HashMap;

use af_manifest::tree::{Node, SpannedNode, location_of};
use serde_json::Value;

use crate::diagnostic::{CfgCode, Diagnostic, Origin, Place};

#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub origin: Origin,
    pub value: Value,
    /// JSON pointer → line and column (of the key, for a mapping entry).
    places: HashMap<String, (u32, u32)>,
}

impl Document {
    /// A cluster's object: field paths, no lines.
    pub fn from_object(origin: Origin, value: Value) -> Document {
        Document {
            origin,
            value,
            places: HashMap::new(),
        }
    }

    /// A file's document, and any key written twice in it (the first one is kept).
    pub fn from_tree(origin: Origin, tree: &SpannedNode) -> (Document, Vec<Diagnostic>) {
        let mut places = HashMap::new();
        let mut duplicates = Vec::new();
        let value = convert(tree, String::new(), &mut places, &mut duplicates);
        let document = Document {
            origin,
            value,
            places,
        };
        let diagnostics = duplicates
            .into_iter()
            .map(|(pointer, at, first_line)| Diagnostic {
                code: CfgCode::Duplicate,
                place: Place {
                    line_column: Some(at),
                    ..document.place(&pointer)
                },
                message: format!(
                    "this key is written twice; the first, on line {first_line}, is the one read"
                ),
                help: "remove one of the two".to_string(),
            })
            .collect();
        (document, diagnostics)
    }

    /// The place of the value at `pointer`: its path, and the line of it or of the nearest
    /// enclosing value written in the file.
    pub fn place(&self, pointer: &str) -> Place {
        let mut at = pointer;
        let line_column = loop {
            if let Some(found) = self.places.get(at) {
                break Some(*found);
            }
            match at.rfind('/') {
                Some(cut) => at = &at[..cut],
                None => break None,
            }
        };
        Place {
            origin: self.origin.clone(),
            line_column,
            path: dotted(&self.value, pointer),
        }
    }

    pub fn diagnostic(
        &self,
        code: CfgCode,
        pointer: &str,
        message: String,
        help: String,
    ) -> Diagnostic {
        Diagnostic {
            code,
            place: self.place(pointer),
            message,
            help,
        }
    }

    /// `kind` of the document, when it names one.
    pub fn kind(&self) -> Option<&str> {
        self.value.get("kind").and_then(Value::as_str)
    }

    /// `metadata.name`, when it is a string.
    pub fn name(&self) -> Option<&str> {
        self.value.pointer("/metadata/name").and_then(Value::as_str)
    }
}

/// A JSON pointer segment, escaped.
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// A JSON pointer as a person reads a field path: `spec.nodes[2].when`.
fn dotted(root: &Value, pointer: &str) -> String {
    let mut out = String::new();
    let mut at = Some(root);
    for raw in pointer.split('/').skip(1) {
        let segment = unescape(raw);
        match at {
            Some(Value::Array(items)) => {
                out.push_str(&format!("[{segment}]"));
                at = segment.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            other => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&segment);
                at = other.and_then(|v| v.get(&segment));
            }
        }
    }
    out
}

fn line_column(node: &SpannedNode) -> (u32, u32) {
    let at = location_of(node);
    (at.line, at.column)
}

fn convert(
    node: &SpannedNode,
    pointer: String,
    places: &mut HashMap<String, (u32, u32)>,
    duplicates: &mut Vec<(String, (u32, u32), u32)>,
) -> Value {
    places.entry(pointer.clone()).or_insert(line_column(node));
    match &node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => i64::try_from(*i)
            .map(Value::from)
            .or_else(|_| u64::try_from(*i).map(Value::from))
            .unwrap_or_else(|_| Value::from(*i as f64)),
        Node::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(f.to_string())),
        Node::Str(s) => Value::String(s.clone()),
        Node::Seq(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| convert(item, format!("{pointer}/{i}"), places, duplicates))
                .collect(),
        ),
        Node::Map(entries) => {
            let mut map = serde_json::Map::new();
            for (key, value) in entries {
                let name = key_text(&key.value);
                let child = format!("{pointer}/{}", escape(&name));
                if map.contains_key(&name) {
                    let first = places.get(&child).map_or(0, |(line, _)| *line);
                    duplicates.push((child, line_column(key), first));
                    continue;
                }
                places.insert(child.clone(), line_column(key));
                let converted = convert(value, child.clone(), places, duplicates);
                // The key's place wins over the value's: "unknown key" points at the key.
                places.insert(child, line_column(key));
                map.insert(name, converted);
            }
            Value::Object(map)
        }
    }
}

fn key_text(key: &Node) -> String {
    match key {
        Node::Str(s) => s.clone(),
        Node::Int(i) => i.to_string(),
        Node::Float(f) => f.to_string(),
        Node::Bool(b) => b.to_string(),
        Node::Null => "null".to_string(),
        Node::Seq(_) | Node::Map(_) => "(complex key)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(text: &str) -> (Document, Vec<Diagnostic>) {
        let trees = af_manifest::tree::parse_documents(text).unwrap();
        Document::from_tree(Origin::File("f.yaml".into()), &trees[0])
    }

    #[test]
    fn places_point_at_keys_and_items() {
        let (doc, problems) =
            document("kind: Flow\nspec:\n  nodes:\n    - id: a\n    - id: b\n      when: x\n");
        assert!(problems.is_empty());
        let place = doc.place("/spec/nodes/1/when");
        assert_eq!(place.path, "spec.nodes[1].when");
        assert_eq!(place.line_column, Some((6, 7)));
        // A missing key is placed at its nearest written parent.
        let place = doc.place("/spec/nodes/0/needs");
        assert_eq!(place.line_column, Some((4, 7)));
        assert_eq!(place.path, "spec.nodes[0].needs");
    }

    #[test]
    fn a_key_written_twice_is_reported_and_the_first_kept() {
        let (doc, problems) = document("kind: Flow\nkind: Agent\n");
        assert_eq!(doc.kind(), Some("Flow"));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].code, CfgCode::Duplicate);
        assert_eq!(problems[0].place.line_column, Some((2, 1)));
    }
}
