//! A behaviour: one guarantee, named, checked at the application layer over a runtime.

use af_runtime::Capability;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::context::Ctx;

/// What part of the promise a behaviour checks. Containment behaviours can never be skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    Lifecycle,
    Services,
    Readiness,
    Egress,
    Database,
    Containment,
}

/// A check passes with a detail (what was seen) or fails with one (what was seen instead).
pub type CheckResult = Result<String, String>;

/// The check itself.
pub type Check = for<'a> fn(&'a Ctx<'a>) -> BoxFuture<'a, CheckResult>;

/// One named behaviour of the roster.
#[derive(Clone, Copy)]
pub struct Behaviour {
    pub name: &'static str,
    pub area: Area,
    /// A runtime without this capability skips the behaviour, by name. Never set on a
    /// containment behaviour (the roster's tests hold it to that).
    pub needs: Option<Capability>,
    /// What passing proves, for docs/conformance.md and the run's output.
    pub proves: &'static str,
    pub check: Check,
}

impl Behaviour {
    pub fn is_containment(&self) -> bool {
        self.area == Area::Containment
    }
}

impl std::fmt::Debug for Behaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Behaviour")
            .field("name", &self.name)
            .field("area", &self.area)
            .field("needs", &self.needs)
            .finish()
    }
}

/// The name of the proof that a service's very first network action gets nothing out; the reader
/// refuses a run without it.
pub const IMMEDIATE_STARTUP_PROOF: &str = "immediate_startup_cannot_bypass_containment";
