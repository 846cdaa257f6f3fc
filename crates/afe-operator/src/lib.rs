//! afe's Kubernetes operator (seed 003, "L'operator"): it reconciles each `AgentFlowEngine` of
//! its namespace in six steps — configuration, data, processes, scaling, cleanup, status — on
//! kube-runtime's `Controller`.
//!
//! - [`configuration`]: step 1 as a pure function — the config read, the Runtime generated from
//!   `spec.afe`, validated as `afe validate` does, serve's files.
//! - [`build`]: every object the operator owns, from pure functions (one per kind).
//! - [`converge`]: whose an existing object is, and whether it already holds what is wanted.
//! - [`discovery`]: whether KEDA and CloudNativePG are installed.
//! - [`reaper`]: the judgement of one sandbox object (pure) and the sweep of a namespace.
//! - [`status`]: conditions and status from what a reconcile found (pure).
//! - [`reconcile`]: the six steps against the API server; [`controller`]: the watch loop.

pub mod build;
pub mod configuration;
pub mod controller;
pub mod converge;
pub mod discovery;
pub mod reaper;
pub mod reconcile;
pub mod status;
