//! The Kubernetes runtime. [`render`] turns a validated manifest into every object of its
//! environment — typed k8s-openapi values, one module per kind, pure: no cluster is read or
//! written there. Applying them is a separate layer.

pub mod apply;
pub mod error;
pub mod fit;
pub mod images;
pub mod render;
pub mod runtime;

pub use runtime::KubeRuntime;
