//! The pieces that turn "the objects were created" into "the workload cannot get out":
//!
//! - [`netlock`]: the kernel filter of a sandbox's network namespace (plan in [`netlock_plan`]).
//! - [`gate`]: run before a workload, in its namespace; passes only after the sidecar answered
//!   and every escape route was seen denied several rounds in a row.
//! - [`probe`]: the same routes once, per environment, before any service image runs.
//! - [`agent`]: the conformance suite's workload, which tries the routes from inside a service.

pub mod agent;
pub mod agent_actions;
pub mod agent_https;
mod agent_wire;
pub mod gate;
pub mod netlock;
pub mod netlock_plan;
pub mod probe;
pub mod route;
pub mod sidecar_check;
pub mod targets;
