//! What is wrong with a config: a stable `AFE-CFG-0xx` code, the file or object, the field path,
//! the line and column where a file exists, and what to write instead. Loading collects every
//! diagnostic before it gives up, so one run shows every mistake.

use std::fmt;
use std::path::PathBuf;

/// Every AFE-CFG code. The numbers are stable: docs/errors.md lists them, and scripts may match on
/// them.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, strum::EnumIter, strum::IntoStaticStr,
)]
pub enum CfgCode {
    /// The folder or a file cannot be read, or holds no manifest.
    #[strum(serialize = "AFE-CFG-001")]
    Unreadable,
    /// Not valid YAML.
    #[strum(serialize = "AFE-CFG-002")]
    Syntax,
    /// A document that is not an afe manifest: missing or unknown `apiVersion` or `kind`.
    #[strum(serialize = "AFE-CFG-003")]
    NotAManifest,
    /// A key the kind does not have.
    #[strum(serialize = "AFE-CFG-004")]
    UnknownKey,
    /// A value of the wrong type or out of range.
    #[strum(serialize = "AFE-CFG-005")]
    InvalidValue,
    /// A required key is missing.
    #[strum(serialize = "AFE-CFG-006")]
    MissingKey,
    /// A name or node id that is not a DNS-1123 label.
    #[strum(serialize = "AFE-CFG-007")]
    InvalidName,
    /// `metadata.description`, which Kubernetes drops.
    #[strum(serialize = "AFE-CFG-008")]
    DescriptionField,
    /// Two objects of one kind with one name, or a key written twice.
    #[strum(serialize = "AFE-CFG-009")]
    Duplicate,
    /// A reference to a Schema, Agent or Plugin that does not exist.
    #[strum(serialize = "AFE-CFG-010")]
    UnresolvedReference,
    /// `needs` names a node the flow does not have.
    #[strum(serialize = "AFE-CFG-011")]
    UnknownNeed,
    /// `needs` goes round in a cycle.
    #[strum(serialize = "AFE-CFG-012")]
    NeedsCycle,
    /// `when` is not valid CEL.
    #[strum(serialize = "AFE-CFG-013")]
    WhenSyntax,
    /// `when` uses a variable the node cannot see.
    #[strum(serialize = "AFE-CFG-014")]
    WhenVariable,
    /// A Schema field that does not make a JSON Schema.
    #[strum(serialize = "AFE-CFG-015")]
    InvalidField,
    /// A sandbox runtime class naming gVisor.
    #[strum(serialize = "AFE-CFG-016")]
    GvisorRefused,
    /// A secret value written into the config.
    #[strum(serialize = "AFE-CFG-017")]
    InlineSecret,
    /// A prompt missing, doubled, or referenced in a way its source cannot resolve.
    #[strum(serialize = "AFE-CFG-018")]
    Prompt,
    /// A node or plugin with no kind or more than one, or a one-of block with both or neither.
    #[strum(serialize = "AFE-CFG-019")]
    OneOf,
    /// The pinned revision is not the computed one.
    #[strum(serialize = "AFE-CFG-020")]
    RevisionMismatch,
    /// An environment variable name that is not one.
    #[strum(serialize = "AFE-CFG-021")]
    InvalidEnvName,
    /// A Kubernetes quantity that does not parse.
    #[strum(serialize = "AFE-CFG-022")]
    InvalidQuantity,
    /// An egress rule that is not a host name or `*.` wildcard.
    #[strum(serialize = "AFE-CFG-023")]
    InvalidEgress,
    /// A tool that is neither built in nor offered by a plugin.
    #[strum(serialize = "AFE-CFG-024")]
    UnknownTool,
}

impl CfgCode {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every code, in number order: docs/errors.md is checked against this list.
    pub fn all() -> impl Iterator<Item = CfgCode> {
        <CfgCode as strum::IntoEnumIterator>::iter()
    }
}

impl fmt::Display for CfgCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a config came from: a file of a folder, or an object of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    File(PathBuf),
    /// `Kind/name` of a custom resource, or `ConfigMap/name` for one of its keys.
    Object(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Object(name) => f.write_str(name),
        }
    }
}

/// The place of a diagnostic: the file or object, the field path (`spec.nodes[2].when`), and the
/// 1-based line and column when the config was a file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub origin: Origin,
    pub line_column: Option<(u32, u32)>,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: CfgCode,
    pub place: Place,
    pub message: String,
    pub help: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.place.origin)?;
        if let Some((line, column)) = self.place.line_column {
            write!(f, ":{line}:{column}")?;
        }
        write!(f, ": {} ", self.code)?;
        if !self.place.path.is_empty() {
            write!(f, "{}: ", self.place.path)?;
        }
        write!(f, "{}\n  help: {}", self.message, self.help)
    }
}

/// A config that cannot be used, with every reason found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidConfig {
    pub diagnostics: Vec<Diagnostic>,
}

impl InvalidConfig {
    /// The codes found, in report order (tests match on these).
    pub fn codes(&self) -> Vec<CfgCode> {
        self.diagnostics.iter().map(|d| d.code).collect()
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.diagnostics.len();
        for diagnostic in &self.diagnostics {
            writeln!(f, "{diagnostic}")?;
        }
        write!(
            f,
            "{count} problem{} in the config",
            if count == 1 { "" } else { "s" }
        )
    }
}
