//! Reading typed values out of the located YAML tree, recording a problem (with its place) for
//! every value that is missing, unknown or of the wrong kind, and carrying on, so that one pass
//! finds every mistake in the file.

use crate::diagnostic::{Location, ManifestCode, Problems};
use crate::tree::{Node, SpannedNode, location_of};

/// The reader: the source text (to quote numbers exactly as written) and the problems found.
#[derive(Debug)]
pub(crate) struct Reader<'s> {
    source: &'s str,
    pub(crate) problems: Problems,
}

/// One entry of a mapping, with the places of its key and value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'n> {
    pub(crate) key: &'n str,
    pub(crate) key_at: Location,
    pub(crate) value: &'n SpannedNode,
}

/// The entries of a mapping whose keys are fixed by the manifest format.
#[derive(Debug)]
pub(crate) struct Fields<'n> {
    /// Where a missing key is reported: the key that names this mapping.
    pub(crate) owner: Location,
    entries: Vec<Entry<'n>>,
}

impl<'n> Fields<'n> {
    pub(crate) fn get(&self, key: &str) -> Option<&'n SpannedNode> {
        self.entry(key).map(|e| e.value)
    }

    pub(crate) fn entry(&self, key: &str) -> Option<Entry<'n>> {
        self.entries.iter().find(|e| e.key == key).copied()
    }
}

impl<'s> Reader<'s> {
    pub(crate) fn new(source: &'s str) -> Self {
        Reader {
            source,
            problems: Problems::default(),
        }
    }

    pub(crate) fn report(
        &mut self,
        code: ManifestCode,
        at: Location,
        message: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.problems.push(code, at, message, help);
    }

    fn wrong_type(&mut self, node: &SpannedNode, what: &str, expected: &str, help: String) {
        self.report(
            ManifestCode::WrongType,
            location_of(node),
            format!("{what} must be {expected}, but it is {}", node.value.kind()),
            help,
        );
    }

    /// The entries of a mapping with free-form keys (service names, variable names), in file order,
    /// with duplicate keys reported and dropped. Null reads as an empty mapping (`services:` with
    /// nothing under it).
    pub(crate) fn entries<'n>(&mut self, node: &'n SpannedNode, what: &str) -> Vec<Entry<'n>> {
        let pairs = match &node.value {
            Node::Map(pairs) => pairs,
            Node::Null => return Vec::new(),
            _ => {
                self.wrong_type(
                    node,
                    what,
                    "a mapping",
                    format!("write {what} as `key: value` lines indented under it"),
                );
                return Vec::new();
            }
        };
        let mut entries: Vec<Entry<'n>> = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let Node::Str(name) = &key.value else {
                let text = self.scalar_text(key);
                self.report(
                    ManifestCode::WrongType,
                    location_of(key),
                    format!(
                        "a key in {what} must be a string, but it is {}",
                        key.value.kind()
                    ),
                    match text {
                        Some(text) => format!("quote it: \"{text}\""),
                        None => "write a plain name as the key".to_string(),
                    },
                );
                continue;
            };
            if let Some(first) = entries.iter().find(|e| e.key == name) {
                self.report(
                    ManifestCode::Duplicate,
                    location_of(key),
                    format!(
                        "{name:?} appears twice in {what}; the first is on line {}",
                        first.key_at.line
                    ),
                    "remove one of them, or merge them into one",
                );
                continue;
            }
            entries.push(Entry {
                key: name,
                key_at: location_of(key),
                value,
            });
        }
        entries
    }

    /// The entries of a mapping whose keys are fixed: every key not in `known` is reported, with the
    /// closest known key as a suggestion.
    pub(crate) fn fields<'n>(
        &mut self,
        node: &'n SpannedNode,
        owner: Location,
        what: &str,
        known: &[&str],
    ) -> Fields<'n> {
        let entries = self.entries(node, what);
        for entry in &entries {
            if !known.contains(&entry.key) {
                let help = match closest(entry.key, known) {
                    Some(suggestion) => format!("did you mean `{suggestion}`?"),
                    None => format!("the keys {what} accepts are: {}", known.join(", ")),
                };
                self.report(
                    ManifestCode::UnknownKey,
                    entry.key_at,
                    format!("{what} has no key `{}`", entry.key),
                    help,
                );
            }
        }
        Fields { owner, entries }
    }

    /// A key that must be present; its absence is reported at the mapping's owner.
    pub(crate) fn required<'n>(
        &mut self,
        fields: &Fields<'n>,
        key: &str,
        what: &str,
        example: &str,
    ) -> Option<&'n SpannedNode> {
        let value = fields.get(key);
        if value.is_none() {
            self.report(
                ManifestCode::MissingKey,
                fields.owner,
                format!("{what} needs `{key}`"),
                format!("add it, for example `{example}`"),
            );
        }
        value
    }

    /// A string. Numbers and booleans are refused rather than converted, because `version: 1.10`
    /// silently read as "1.1" is worse than an error.
    pub(crate) fn string(&mut self, node: &SpannedNode, what: &str) -> Option<String> {
        match &node.value {
            Node::Str(s) => Some(s.clone()),
            _ => {
                let help = match self.scalar_text(node) {
                    Some(text) => format!("quote it: \"{text}\""),
                    None => format!("write {what} as a single string"),
                };
                self.wrong_type(node, what, "a string", help);
                None
            }
        }
    }

    /// A string, or a number or boolean taken exactly as written (`cpu: 0.5`, `DEBUG: true`), for
    /// values that are text to their consumer.
    pub(crate) fn scalar_as_text(&mut self, node: &SpannedNode, what: &str) -> Option<String> {
        match &node.value {
            Node::Str(s) => Some(s.clone()),
            Node::Int(_) | Node::Float(_) | Node::Bool(_) => self.scalar_text(node),
            _ => {
                self.wrong_type(
                    node,
                    what,
                    "a single value",
                    format!("write {what} as one string or number"),
                );
                None
            }
        }
    }

    /// A list of words (a command line). A single string is refused: splitting it would need a
    /// shell's quoting rules, and guessing them wrong runs a different command.
    pub(crate) fn word_list(&mut self, node: &SpannedNode, what: &str) -> Option<Vec<String>> {
        match &node.value {
            Node::Seq(items) => {
                let words: Vec<Option<String>> = items
                    .iter()
                    .map(|item| self.scalar_as_text(item, &format!("each word of {what}")))
                    .collect();
                words.into_iter().collect()
            }
            Node::Str(s) => {
                let example: Vec<String> = s.split_whitespace().map(|w| format!("{w:?}")).collect();
                self.wrong_type(
                    node,
                    what,
                    "a list of words",
                    format!("write it as a list: [{}]", example.join(", ")),
                );
                None
            }
            _ => {
                self.wrong_type(
                    node,
                    what,
                    "a list of words",
                    format!("write {what} as [\"word\", ...]"),
                );
                None
            }
        }
    }

    /// A list of strings.
    pub(crate) fn string_list<'n>(
        &mut self,
        node: &'n SpannedNode,
        what: &str,
    ) -> Vec<(String, &'n SpannedNode)> {
        match &node.value {
            Node::Seq(items) => items
                .iter()
                .filter_map(|item| {
                    self.string(item, &format!("each entry of {what}"))
                        .map(|s| (s, item))
                })
                .collect(),
            Node::Null => Vec::new(),
            Node::Str(s) => {
                self.wrong_type(node, what, "a list", format!("write it as a list: [{s}]"));
                Vec::new()
            }
            _ => {
                self.wrong_type(node, what, "a list", format!("write {what} as [a, b]"));
                Vec::new()
            }
        }
    }

    pub(crate) fn bool(&mut self, node: &SpannedNode, what: &str) -> Option<bool> {
        match &node.value {
            Node::Bool(b) => Some(*b),
            _ => {
                self.wrong_type(
                    node,
                    what,
                    "true or false",
                    format!("write {what}: true or {what}: false"),
                );
                None
            }
        }
    }

    pub(crate) fn integer(&mut self, node: &SpannedNode, what: &str) -> Option<i128> {
        match &node.value {
            Node::Int(i) => Some(*i),
            Node::Str(s) if s.trim().parse::<i128>().is_ok() => {
                self.wrong_type(
                    node,
                    what,
                    "a whole number",
                    format!("write it without quotes: {}", s.trim()),
                );
                None
            }
            _ => {
                self.wrong_type(
                    node,
                    what,
                    "a whole number",
                    format!("write {what} as a whole number"),
                );
                None
            }
        }
    }

    /// One of a fixed set of words.
    pub(crate) fn one_of<'v>(
        &mut self,
        node: &SpannedNode,
        what: &str,
        values: &[&'v str],
    ) -> Option<&'v str> {
        let text = self.string(node, what)?;
        match values.iter().find(|v| **v == text) {
            Some(v) => Some(*v),
            None => {
                let help = match closest(&text, values) {
                    Some(suggestion) => format!(
                        "did you mean `{suggestion}`? It accepts: {}",
                        values.join(", ")
                    ),
                    None => format!("it accepts: {}", values.join(", ")),
                };
                self.report(
                    ManifestCode::InvalidValue,
                    location_of(node),
                    format!("{what} cannot be {text:?}"),
                    help,
                );
                None
            }
        }
    }

    /// The exact source text of a scalar node, or `None` for collections.
    fn scalar_text(&self, node: &SpannedNode) -> Option<String> {
        match &node.value {
            Node::Str(s) => Some(s.clone()),
            Node::Int(_) | Node::Float(_) | Node::Bool(_) | Node::Null => {
                let at = location_of(node);
                self.source
                    .get(at.offset..at.offset + at.len)
                    .map(str::to_string)
                    .filter(|s| !s.is_empty())
            }
            Node::Seq(_) | Node::Map(_) => None,
        }
    }
}

/// The known word closest to a mistyped one, if any is close: within one edit per three letters
/// (a swap of neighbours counts as one), once case, '_' and '-' are ignored (`healthPath` for
/// `health_path`, `prot` for `port`, but nothing for `db`).
pub(crate) fn closest<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    let fold = |s: &str| {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    let folded = fold(word);
    let allowed = (folded.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (strsim::osa_distance(&fold(k), &folded), *k))
        .filter(|(distance, _)| *distance <= allowed)
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let known = ["health_path", "health", "port", "replicas"];
        assert_eq!(closest("healthPath", &known), Some("health_path"));
        assert_eq!(closest("prot", &known), Some("port"));
        assert_eq!(closest("replica", &known), Some("replicas"));
        assert_eq!(closest("something", &known), None);
        assert_eq!(closest("prot", &["cron", "port"]), Some("port"));
        assert_eq!(closest("db", &["web", "worker"]), None);
    }
}
