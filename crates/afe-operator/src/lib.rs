//! afe's Kubernetes operator (seed 003, "L'operator"). Built so far: the reaper, step 5 of every
//! reconcile — it finds the sandbox namespace's objects by afe's labels and removes those whose
//! ticket ended or whose worker went silent, reading neither the store nor the afe API.
//!
//! - [`build`]: every object the operator owns, from pure functions (one per kind).
//! - [`reaper`]: the judgement of one object (pure) and the sweep of a namespace.

pub mod build;
pub mod reaper;
