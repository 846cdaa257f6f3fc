//! What a manifest problem looks like: a stable code, a message, what to write instead, and where.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// Every way a manifest can be refused. The numbers are stable: documentation, scripts and support
/// conversations refer to them, so a code is never renumbered or reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ManifestCode {
    /// The text is not YAML.
    Syntax,
    /// A key the manifest does not define.
    UnknownKey,
    /// A value of the wrong kind (a string where a number belongs, ...).
    WrongType,
    /// A required key is absent.
    MissingKey,
    /// A name that is not a DNS-1123 label.
    InvalidName,
    /// The same key, name or rule written twice.
    Duplicate,
    /// A port outside 1-65535.
    InvalidPort,
    /// A resource figure that is not a Kubernetes quantity.
    InvalidQuantity,
    /// A resource figure of zero or less.
    ZeroQuantity,
    /// `replicas` below 1.
    InvalidReplicas,
    /// A `health_path` that is not an absolute path.
    InvalidHealthPath,
    /// A service that is both `cron` and `web`.
    CronAndWeb,
    /// `depends_on` names a service the manifest does not have.
    UnknownDependency,
    /// `depends_on` goes round in a circle.
    DependencyCycle,
    /// A secret written into the manifest where a reference is required.
    InlineSecret,
    /// Neither or both of `image` and `build`.
    ImageSource,
    /// A `cron` schedule that is not a cron expression.
    InvalidCron,
    /// An egress rule that is not a host name, `*.` wildcard, IP address or CIDR.
    InvalidEgressRule,
    /// One host both allowed and captured.
    EgressConflict,
    /// `web` or `health_path` on a service without a `port`.
    NeedsPort,
    /// An environment variable name that a process cannot receive.
    InvalidEnvName,
    /// A value outside the set the key accepts (`provider: docker`, ...).
    InvalidValue,
    /// The manifest file cannot be read.
    Unreadable,
    /// A `build.context` folder that does not exist.
    BuildContextMissing,
    /// A `domain` that is not a DNS name.
    InvalidDomain,
    /// A service name in the prefix af keeps for its own objects (`af-`).
    ReservedName,
}

impl ManifestCode {
    /// All codes, in number order (for documentation tests).
    pub const ALL: [ManifestCode; 26] = [
        Self::Syntax,
        Self::UnknownKey,
        Self::WrongType,
        Self::MissingKey,
        Self::InvalidName,
        Self::Duplicate,
        Self::InvalidPort,
        Self::InvalidQuantity,
        Self::ZeroQuantity,
        Self::InvalidReplicas,
        Self::InvalidHealthPath,
        Self::CronAndWeb,
        Self::UnknownDependency,
        Self::DependencyCycle,
        Self::InlineSecret,
        Self::ImageSource,
        Self::InvalidCron,
        Self::InvalidEgressRule,
        Self::EgressConflict,
        Self::NeedsPort,
        Self::InvalidEnvName,
        Self::InvalidValue,
        Self::Unreadable,
        Self::BuildContextMissing,
        Self::InvalidDomain,
        Self::ReservedName,
    ];

    /// The printed code, `AF-MAN-0xx`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syntax => "AF-MAN-001",
            Self::UnknownKey => "AF-MAN-002",
            Self::WrongType => "AF-MAN-003",
            Self::MissingKey => "AF-MAN-004",
            Self::InvalidName => "AF-MAN-005",
            Self::Duplicate => "AF-MAN-006",
            Self::InvalidPort => "AF-MAN-007",
            Self::InvalidQuantity => "AF-MAN-008",
            Self::ZeroQuantity => "AF-MAN-009",
            Self::InvalidReplicas => "AF-MAN-010",
            Self::InvalidHealthPath => "AF-MAN-011",
            Self::CronAndWeb => "AF-MAN-012",
            Self::UnknownDependency => "AF-MAN-013",
            Self::DependencyCycle => "AF-MAN-014",
            Self::InlineSecret => "AF-MAN-015",
            Self::ImageSource => "AF-MAN-016",
            Self::InvalidCron => "AF-MAN-017",
            Self::InvalidEgressRule => "AF-MAN-018",
            Self::EgressConflict => "AF-MAN-019",
            Self::NeedsPort => "AF-MAN-020",
            Self::InvalidEnvName => "AF-MAN-021",
            Self::InvalidValue => "AF-MAN-022",
            Self::Unreadable => "AF-MAN-023",
            Self::BuildContextMissing => "AF-MAN-024",
            Self::InvalidDomain => "AF-MAN-025",
            Self::ReservedName => "AF-MAN-026",
        }
    }
}

impl fmt::Display for ManifestCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ManifestCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A place in the manifest text: 1-based line and column (in characters, as editors count them),
/// and the byte range that a diagnostic underlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Location {
    pub line: u32,
    pub column: u32,
    pub offset: usize,
    pub len: usize,
}

/// One thing wrong with a manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub code: ManifestCode,
    /// What is wrong, naming the object.
    pub message: String,
    /// What to write instead.
    pub help: String,
    /// Where; absent only when the file could not be read at all.
    pub location: Option<Location>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = self.location {
            write!(f, "{}:{}: ", at.line, at.column)?;
        }
        write!(f, "{} {} ({})", self.code, self.message, self.help)
    }
}

/// A manifest that was refused, with every problem found in it (not just the first) and the text
/// they point into, so a caller can render them against the source.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{file}: {} problem(s), the first: {}", .problems.len(), .problems[0])]
pub struct InvalidManifest {
    pub file: PathBuf,
    pub source_text: String,
    /// Never empty; sorted by position in the file.
    pub problems: Vec<Problem>,
}

/// Collects problems while a manifest is decoded and checked.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<Problem>);

impl Problems {
    pub(crate) fn push(
        &mut self,
        code: ManifestCode,
        location: Location,
        message: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.0.push(Problem {
            code,
            message: message.into(),
            help: help.into(),
            location: Some(location),
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems in file order, each reported once.
    pub(crate) fn into_sorted(mut self) -> Vec<Problem> {
        self.0
            .sort_by_key(|p| p.location.map(|l| (l.offset, l.len)).unwrap_or_default());
        self.0.dedup();
        self.0
    }
}
