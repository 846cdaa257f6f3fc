//! The conformance suite: one roster of named behaviours every runtime must pass, each checked at
//! the application layer from inside a running environment; the plan that decides what a run
//! runs (refusing any run that would skip containment); the runner that records a verdict per
//! behaviour; and the reader that checks a run's records.
//!
//! A runtime is run through a [`harness::Harness`]: the runtime plus its "outside" (hosts the
//! suite creates on networks it owns, [`outside::Outside`]) and the few platform-side actions a
//! behaviour needs. The local runtime's harness is [`local::LocalHarness`]; the Kubernetes
//! runtime's, for a k3d cluster, is [`kubernetes::KubeHarness`].

pub mod behaviour;
mod behaviours;
pub mod context;
pub mod fixtures;
pub mod harness;
pub mod kubernetes;
pub mod local;
pub mod outside;
pub mod plan;
pub mod reader;
pub mod record;
pub mod runner;

pub use behaviours::roster;

/// An error as the text a record or a harness message carries.
pub(crate) fn text(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// The roster as the reader knows it.
pub fn expected() -> Vec<reader::Expected> {
    roster()
        .iter()
        .map(|b| reader::Expected {
            name: b.name.to_string(),
            containment: b.is_containment(),
        })
        .collect()
}

/// A fresh run id: short enough to sit in environment ids, different every run.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:06x}",
        (nanos ^ u128::from(std::process::id())) & 0xff_ffff
    )
}
