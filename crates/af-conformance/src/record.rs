//! One machine-readable record per behaviour per run: what the reader checks. A process that
//! exited 0 is not a claim; these records are.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Passed,
    Failed,
    Skipped,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub name: String,
    /// The runtime the behaviour ran on (`local`, `kubernetes`).
    pub runtime: String,
    /// The run this record belongs to: every record of one run carries the same id.
    pub run: String,
    pub verdict: Verdict,
    pub containment: bool,
    pub duration_ms: u64,
    /// What was seen (passed), what was seen instead (failed), or why it was skipped.
    pub detail: String,
}

/// Records as JSON lines.
pub fn to_lines(records: &[Record]) -> String {
    records
        .iter()
        .filter_map(|r| serde_json::to_string(r).ok())
        .map(|line| line + "\n")
        .collect()
}

/// JSON lines back into records; a line that is not a record is an error naming it.
pub fn from_lines(text: &str) -> Result<Vec<Record>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|err| format!("line {}: {err}", index + 1))
        })
        .collect()
}
