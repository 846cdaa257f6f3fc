//! What a manifest problem looks like: a stable code, a message, what to write instead, and where.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// Every way a manifest can be refused. The numbers are stable: documentation, scripts and support
/// conversations refer to them, so a code is never renumbered or reused.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, strum::EnumIter, strum::IntoStaticStr,
)]
pub enum ManifestCode {
    /// The text is not YAML.
    #[strum(serialize = "AF-MAN-001")]
    Syntax,
    /// A key the manifest does not define.
    #[strum(serialize = "AF-MAN-002")]
    UnknownKey,
    /// A value of the wrong kind (a string where a number belongs, ...).
    #[strum(serialize = "AF-MAN-003")]
    WrongType,
    /// A required key is absent.
    #[strum(serialize = "AF-MAN-004")]
    MissingKey,
    /// A name that is not a DNS-1123 label.
    #[strum(serialize = "AF-MAN-005")]
    InvalidName,
    /// The same key, name or rule written twice.
    #[strum(serialize = "AF-MAN-006")]
    Duplicate,
    /// A port outside 1-65535.
    #[strum(serialize = "AF-MAN-007")]
    InvalidPort,
    /// A resource figure that is not a Kubernetes quantity.
    #[strum(serialize = "AF-MAN-008")]
    InvalidQuantity,
    /// A resource figure of zero or less.
    #[strum(serialize = "AF-MAN-009")]
    ZeroQuantity,
    /// `replicas` below 1.
    #[strum(serialize = "AF-MAN-010")]
    InvalidReplicas,
    /// A `health_path` that is not an absolute path.
    #[strum(serialize = "AF-MAN-011")]
    InvalidHealthPath,
    /// A service that is both `cron` and `web`.
    #[strum(serialize = "AF-MAN-012")]
    CronAndWeb,
    /// `depends_on` names a service the manifest does not have.
    #[strum(serialize = "AF-MAN-013")]
    UnknownDependency,
    /// `depends_on` goes round in a circle.
    #[strum(serialize = "AF-MAN-014")]
    DependencyCycle,
    /// A secret written into the manifest where a reference is required.
    #[strum(serialize = "AF-MAN-015")]
    InlineSecret,
    /// Neither or both of `image` and `build`.
    #[strum(serialize = "AF-MAN-016")]
    ImageSource,
    /// A `cron` schedule that is not a cron expression.
    #[strum(serialize = "AF-MAN-017")]
    InvalidCron,
    /// An egress rule that is not a host name, `*.` wildcard, IP address or CIDR.
    #[strum(serialize = "AF-MAN-018")]
    InvalidEgressRule,
    /// One host both allowed and captured.
    #[strum(serialize = "AF-MAN-019")]
    EgressConflict,
    /// `web` or `health_path` on a service without a `port`.
    #[strum(serialize = "AF-MAN-020")]
    NeedsPort,
    /// An environment variable name that a process cannot receive.
    #[strum(serialize = "AF-MAN-021")]
    InvalidEnvName,
    /// A value outside the set the key accepts (`provider: docker`, ...).
    #[strum(serialize = "AF-MAN-022")]
    InvalidValue,
    /// The manifest file cannot be read.
    #[strum(serialize = "AF-MAN-023")]
    Unreadable,
    /// A `build.context` folder that does not exist.
    #[strum(serialize = "AF-MAN-024")]
    BuildContextMissing,
    /// A `domain` that is not a DNS name.
    #[strum(serialize = "AF-MAN-025")]
    InvalidDomain,
    /// A service name in the prefix af keeps for its own objects (`af-`).
    #[strum(serialize = "AF-MAN-026")]
    ReservedName,
}

impl ManifestCode {
    /// Every code, in number order: docs/errors.md is checked against this list.
    pub fn all() -> impl Iterator<Item = ManifestCode> {
        <ManifestCode as strum::IntoEnumIterator>::iter()
    }

    /// The printed code, `AF-MAN-0xx`.
    pub fn as_str(self) -> &'static str {
        self.into()
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
