//! What talks to the daemon: each module sends the bodies `plan` builds (creating, starting,
//! inspecting, removing) and reads back what the daemon decided (addresses, subnets, exit
//! statuses). Decisions live in `plan`; what is here is the order of the calls and their waiting.

pub mod build;
pub mod control;
pub mod database;
pub mod engine_image;
pub mod ingress;
pub mod networks;
pub mod one_shot;
pub mod probe;
pub mod schedule;
pub mod service;
pub mod sidecar;
pub mod teardown;
pub mod trust;
