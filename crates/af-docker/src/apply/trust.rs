//! The environment's capture CA on Docker (HTTPS capture): made with the environment and kept for
//! its life in the labels of a volume of its own, so every `up` finds the same CA the running
//! services already trust. The volume holds what services read — the CA's certificate and the
//! bundle (af-runtime's `capture_trust`) — and is mounted read-only in every application and
//! migration container; the key stays in the labels, which only the host side can read, and
//! reaches the sidecar in its configuration.

use af_manifest::EnvironmentId;
use af_runtime::capture_trust::{self, BUNDLE_FILE_NAME, CA_FILE_NAME, CaptureCaPem};
use bollard::Docker;
use bollard::models::VolumeCreateRequest;

use crate::error::{DockerError, platform};
use crate::{names, one_shot};

pub use crate::plan::trust::CaptureCa;

const CERT_LABEL: &str = "dev.antifailure.capture-ca.cert";
const KEY_LABEL: &str = "dev.antifailure.capture-ca.key";
/// Whether the bundle holds the machine's trust store too (see `capture_trust::variables`).
const SYSTEM_STORE_LABEL: &str = "dev.antifailure.capture-ca.system-store";

/// The environment's capture CA: the one its volume carries, or a new one in a new volume.
pub async fn ensure(
    docker: &Docker,
    env: &EnvironmentId,
    engine_image: &str,
) -> Result<CaptureCa, DockerError> {
    let volume = format!("af-{env}-trust");
    match docker.inspect_volume(&volume).await {
        Ok(found) => {
            if !names::is_ours(Some(&found.labels), env) {
                return Err(DockerError::Runtime(
                    af_runtime::RuntimeErrorKind::NotOurs {
                        object_kind: "volume".into(),
                        name: volume,
                    }
                    .into(),
                ));
            }
            let label = |key: &str| found.labels.get(key).cloned();
            match (label(CERT_LABEL), label(KEY_LABEL)) {
                (Some(cert), Some(key)) => Ok(CaptureCa {
                    volume,
                    pem: CaptureCaPem { cert, key },
                    with_system_store: label(SYSTEM_STORE_LABEL).as_deref() == Some("true"),
                }),
                _ => Err(platform(
                    format!("reading the capture CA of volume {volume}"),
                    "its labels carry no CA; run af down and af up again",
                )),
            }
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => create(docker, env, engine_image, volume).await,
        Err(err) => Err(platform(format!("inspecting volume {volume}"), err)),
    }
}

async fn create(
    docker: &Docker,
    env: &EnvironmentId,
    engine_image: &str,
    volume: String,
) -> Result<CaptureCa, DockerError> {
    let pem = af_sidecar_api::new_ca(env.as_str())
        .map_err(|e| platform("making the environment's capture CA", e))?;
    let system = capture_trust::system_bundle();
    let mut labels = names::labels(env, "trust-volume");
    labels.insert(CERT_LABEL.to_string(), pem.cert.clone());
    labels.insert(KEY_LABEL.to_string(), pem.key.clone());
    labels.insert(SYSTEM_STORE_LABEL.to_string(), system.is_some().to_string());
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.clone()),
            labels: Some(labels),
            ..Default::default()
        })
        .await
        .map_err(|e| platform(format!("creating volume {volume}"), e))?;
    let files = [
        (CA_FILE_NAME, pem.cert.clone()),
        (
            BUNDLE_FILE_NAME,
            capture_trust::bundle(system.as_deref(), &pem.cert),
        ),
    ];
    if let Err(err) = fill(docker, env, engine_image, &volume, &files).await {
        // A volume without its files would be reused as it is by the next `up`.
        let _ = docker
            .remove_volume(
                &volume,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await;
        return Err(err);
    }
    Ok(CaptureCa {
        volume,
        pem,
        with_system_store: system.is_some(),
    })
}

/// Writes `files` into `volume` through a container that never starts: the daemon extracts an
/// archive into a created container's mounts.
async fn fill(
    docker: &Docker,
    env: &EnvironmentId,
    engine_image: &str,
    volume: &str,
    files: &[(&str, String)],
) -> Result<(), DockerError> {
    const AT: &str = "/trust";
    let name = names::container(env, "trust-fill");
    one_shot::clear(docker, &name, env).await?;
    let body = crate::plan::containers::inert(
        engine_image,
        names::labels(env, "trust-fill"),
        vec![format!("{volume}:{AT}")],
    );
    one_shot::create(docker, &name, body, &[]).await?;
    let uploaded = async {
        let archive = archive(files).map_err(|e| platform("packing the capture CA", e))?;
        let options = bollard::query_parameters::UploadToContainerOptionsBuilder::new()
            .path(AT)
            .build();
        docker
            .upload_to_container(&name, Some(options), bollard::body_full(archive.into()))
            .await
            .map_err(|e| platform(format!("writing the capture CA into volume {volume}"), e))
    }
    .await;
    one_shot::remove(docker, &name).await?;
    uploaded
}

/// The files as a tar archive, readable by every user (the services run as theirs).
fn archive(files: &[(&str, String)]) -> std::io::Result<Vec<u8>> {
    let mut archive = tar::Builder::new(Vec::new());
    for (name, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        archive.append_data(&mut header, name, text.as_bytes())?;
    }
    archive.into_inner()
}
