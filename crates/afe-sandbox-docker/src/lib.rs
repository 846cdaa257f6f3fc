//! afe's sandbox on the local Docker daemon: a ticket's workspace as one volume and one container
//! for its commands, in a network namespace held by the engine, locked by netlock before anything
//! of the ticket runs, and left — when the flow has egress — only through the ticket's allowlist
//! proxy (`af-proxy serve` as uid 1337 on localhost:3128). See docs/afe-sandbox.md.
//!
//! - [`plan`]: every object as data (the Docker shape of seed 003's pod), from pure functions.
//! - [`sandbox`]: [`DockerSandbox`], the Sandbox port over those bodies.
//! - [`exec`]: a command through the Engine API's exec, streamed and bounded.

pub mod exec;
pub mod plan;
pub mod sandbox;

pub use sandbox::{DockerSandbox, DockerSandboxSettings};
