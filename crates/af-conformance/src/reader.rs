//! The reader: checks a run's records against the roster, refusing anything that is not a whole,
//! passing run of one runtime — a missing, failed or duplicated behaviour, a skipped containment
//! behaviour, a missing immediate-startup proof, a record of another runtime or another run, a
//! behaviour the roster does not have.

use std::collections::BTreeMap;

use crate::behaviour::IMMEDIATE_STARTUP_PROOF;
use crate::record::{Record, Verdict};

/// What the reader knows of a roster behaviour.
#[derive(Clone, Debug)]
pub struct Expected {
    pub name: String,
    pub containment: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    Missing(String),
    Duplicated(String),
    Failed {
        name: String,
        detail: String,
    },
    SkippedContainment(String),
    /// A containment behaviour recorded as not containment (a doctored or mismatched record).
    ContainmentMislabelled(String),
    OtherRuntime {
        name: String,
        runtime: String,
    },
    OtherRun {
        name: String,
        run: String,
    },
    NotOnRoster(String),
    NoImmediateStartupProof,
    Empty,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Missing(name) => write!(f, "{name}: no record"),
            Problem::Duplicated(name) => write!(f, "{name}: recorded more than once"),
            Problem::Failed { name, detail } => write!(f, "{name}: failed: {detail}"),
            Problem::SkippedContainment(name) => {
                write!(f, "{name}: a containment behaviour was skipped")
            }
            Problem::ContainmentMislabelled(name) => {
                write!(
                    f,
                    "{name}: a containment behaviour recorded as not containment"
                )
            }
            Problem::OtherRuntime { name, runtime } => {
                write!(f, "{name}: a record of the {runtime} runtime")
            }
            Problem::OtherRun { name, run } => write!(f, "{name}: a record of another run ({run})"),
            Problem::NotOnRoster(name) => write!(f, "{name}: not a behaviour of the roster"),
            Problem::NoImmediateStartupProof => write!(
                f,
                "{IMMEDIATE_STARTUP_PROOF}: the immediate-startup proof did not pass"
            ),
            Problem::Empty => write!(f, "no records at all"),
        }
    }
}

/// An accepted run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub skipped: Vec<String>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, 0 failed, {} skipped",
            self.passed,
            self.skipped.len()
        )?;
        if !self.skipped.is_empty() {
            write!(f, " ({})", self.skipped.join(", "))?;
        }
        Ok(())
    }
}

/// Checks `records` as one run of `runtime` (the run id is the first record's unless given).
pub fn check(
    records: &[Record],
    roster: &[Expected],
    runtime: &str,
    run: Option<&str>,
) -> Result<Summary, Vec<Problem>> {
    let Some(first) = records.first() else {
        return Err(vec![Problem::Empty]);
    };
    let run = run.unwrap_or(&first.run);
    let mut problems = Vec::new();
    let mut by_name: BTreeMap<&str, &Record> = BTreeMap::new();
    for record in records {
        if record.runtime != runtime {
            problems.push(Problem::OtherRuntime {
                name: record.name.clone(),
                runtime: record.runtime.clone(),
            });
        }
        if record.run != run {
            problems.push(Problem::OtherRun {
                name: record.name.clone(),
                run: record.run.clone(),
            });
        }
        if by_name.insert(&record.name, record).is_some() {
            problems.push(Problem::Duplicated(record.name.clone()));
        }
        if !roster.iter().any(|e| e.name == record.name) {
            problems.push(Problem::NotOnRoster(record.name.clone()));
        }
    }
    let mut summary = Summary {
        passed: 0,
        skipped: Vec::new(),
    };
    for expected in roster {
        let Some(record) = by_name.get(expected.name.as_str()) else {
            problems.push(Problem::Missing(expected.name.clone()));
            continue;
        };
        if expected.containment && !record.containment {
            problems.push(Problem::ContainmentMislabelled(expected.name.clone()));
        }
        match record.verdict {
            Verdict::Passed => summary.passed += 1,
            Verdict::Failed => problems.push(Problem::Failed {
                name: record.name.clone(),
                detail: record.detail.clone(),
            }),
            Verdict::Skipped if expected.containment || record.containment => {
                problems.push(Problem::SkippedContainment(record.name.clone()));
            }
            Verdict::Skipped => summary.skipped.push(record.name.clone()),
        }
    }
    let proof_passed = by_name
        .get(IMMEDIATE_STARTUP_PROOF)
        .is_some_and(|r| r.verdict == Verdict::Passed);
    if !proof_passed {
        problems.push(Problem::NoImmediateStartupProof);
    }
    if problems.is_empty() {
        Ok(summary)
    } else {
        Err(problems)
    }
}
