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

/// A client for `config`, on rustls with ring. The workspace links both of rustls' providers
/// (a dependency of a test crate turns aws-lc-rs on), and rustls refuses to guess between two:
/// the provider is chosen here, once per process, as every other client of af's chooses it.
pub fn client_of(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config)
}
