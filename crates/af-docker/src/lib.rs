//! The local runtime on the Docker Engine API (bollard), the first pieces: the engine image built
//! FROM scratch, the environment's networks, the containment probe under a service's rules,
//! ownership by label (AF-RUN-045) and teardown by label.

pub mod build;
mod control;
pub mod engine_image;
pub mod error;
pub mod ingress;
pub mod names;
pub mod networks;
pub mod one_shot;
pub mod plan;
pub mod probe;
pub mod runtime;
pub mod schedule;
pub mod service;
pub mod sidecar;
pub mod teardown;
pub mod test_hosts;
pub mod trust;

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
