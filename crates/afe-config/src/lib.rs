//! The afe configuration: the `Schema`, `Agent`, `Flow` and `Plugin` manifests (apiVersion
//! `afe.dev/v1alpha1`), the local `Runtime` file and the `AgentFlowEngine` resource; loading them
//! from a folder or from a cluster's custom resources and ConfigMap; validation that reports every
//! problem at once with an `AFE-CFG-0xx` code and its place; revisions (normalized, canonical,
//! sha256); and the CustomResourceDefinitions.
//!
//! ```no_run
//! let config = afe_config::load_folder(std::path::Path::new("examples/afe/config")).unwrap();
//! println!("{}", afe_config::Revision::of(&config).hash);
//! ```

mod checks;
mod config;
pub mod crd;
mod diagnostic;
mod document;
pub mod engine;
pub mod fields;
pub mod input;
pub mod kinds;
pub mod names;
pub mod revision;
pub mod runtime;
mod source;
mod structure;
pub mod when;

pub use checks::BUILTIN_TOOLS;
pub use config::{Config, load_cluster_folder, load_folder, load_objects};
pub use diagnostic::{CfgCode, Diagnostic, InvalidConfig, Origin, Place};
pub use revision::Revision;
pub use source::as_applied;
pub use structure::{Kind, Object};
