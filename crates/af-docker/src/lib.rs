//! The local runtime on the Docker Engine API (bollard): the engine image built FROM scratch, the
//! environment's networks, the containment probe under a service's rules, ownership by label
//! (AF-RUN-045) and teardown by label.
//!
//! - [`plan`]: every object as data, from pure functions (golden files, a test per guarantee).
//! - [`apply`]: the calls that send them and read back what the daemon decided.
//! - [`runtime`]: `LocalRuntime`, `up` in named phases over both, and a pure status assembly.

pub mod apply;
pub mod error;
pub mod names;
pub mod plan;
pub mod runtime;
pub mod test_hosts;

// The effect modules at the crate's root, where the conformance suite and the tests name them.
use apply::control;
pub use apply::{
    build, database, engine_image, ingress, networks, one_shot, probe, schedule, service, sidecar,
    teardown, trust,
};

pub use error::DockerError;
pub use runtime::LocalRuntime;

/// Connects to the local daemon at the API version both sides speak.
pub async fn connect() -> Result<bollard::Docker, DockerError> {
    let docker = bollard::Docker::connect_with_local_defaults()
        .map_err(|e| error::platform("connecting to the Docker daemon", e))?;
    docker
        .negotiate_version()
        .await
        .map_err(|e| error::platform("agreeing an API version with the Docker daemon", e))
}
