//! The engine image: the static `af-proxy` binary in an image built FROM scratch, tagged with the
//! digest of the binary, built on the local daemon when that tag is missing. No registry is
//! needed. `AF_PROXY_IMAGE` names another image instead.

use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::BuildImageOptions;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::error::{DockerError, platform};

pub const REPOSITORY: &str = "antifailure/proxy";

/// Where the static binary is: `AF_PROXY_BINARY`, or the static build beside this workspace's.
pub fn locate_binary() -> Result<PathBuf, DockerError> {
    if let Ok(path) = std::env::var("AF_PROXY_BINARY") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| platform("locating af", e))?;
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .filter(|dir| dir.ends_with("target"))
        .map(|target| target.join("x86_64-unknown-linux-gnu/release/af-proxy"))
        .collect();
    candidates.into_iter().find(|p| p.exists()).ok_or_else(|| DockerError::EngineImage {
        detail: "no static af-proxy binary: build it with `scripts/build-engine` or set AF_PROXY_BINARY (or AF_PROXY_IMAGE to an image that has it)".to_string(),
    })
}

/// `antifailure/proxy:<first 16 hex digits of the binary's SHA-256>`.
pub fn tag_for(binary: &[u8]) -> String {
    let digest = Sha256::digest(binary);
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{REPOSITORY}:{hex}")
}

/// Whether a binary links statically: a dynamic one names its loader, which a FROM scratch image
/// does not have.
pub fn is_static(binary: &[u8]) -> bool {
    const LOADER: &[u8] = b"/lib64/ld-linux";
    binary.starts_with(b"\x7fELF") && !binary.windows(LOADER.len()).any(|w| w == LOADER)
}

/// The build context: a Dockerfile and the binary.
fn context(binary: &[u8]) -> Result<Vec<u8>, DockerError> {
    let dockerfile =
        b"FROM scratch\nCOPY af-proxy /af-proxy\nUSER 1337:1337\nENTRYPOINT [\"/af-proxy\"]\n";
    let mut archive = tar::Builder::new(Vec::new());
    for (name, bytes, mode) in [
        ("Dockerfile", &dockerfile[..], 0o644),
        ("af-proxy", binary, 0o755),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        archive
            .append_data(&mut header, name, bytes)
            .map_err(|e| platform("packing the engine image", e))?;
    }
    archive
        .into_inner()
        .map_err(|e| platform("packing the engine image", e))
}

/// The engine image's tag, built first when the daemon does not have it.
pub async fn ensure(docker: &Docker, binary_path: &Path) -> Result<String, DockerError> {
    if let Ok(image) = std::env::var("AF_PROXY_IMAGE") {
        docker
            .inspect_image(&image)
            .await
            .map_err(|e| DockerError::EngineImage {
                detail: format!("AF_PROXY_IMAGE={image} is not on this daemon: {e}"),
            })?;
        return Ok(image);
    }
    let binary = std::fs::read(binary_path).map_err(|e| DockerError::EngineImage {
        detail: format!("cannot read {}: {e}", binary_path.display()),
    })?;
    if !is_static(&binary) {
        return Err(DockerError::EngineImage {
            detail: format!(
                "{} is not statically linked; an image FROM scratch cannot run it",
                binary_path.display()
            ),
        });
    }
    let tag = tag_for(&binary);
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let options = BuildImageOptions {
        t: Some(tag.clone()),
        dockerfile: "Dockerfile".to_string(),
        rm: true,
        forcerm: true,
        ..Default::default()
    };
    let body = bollard::body_full(context(&binary)?.into());
    let mut build = docker.build_image(options, None, Some(body));
    while let Some(step) = build.next().await {
        let info = step.map_err(|e| DockerError::EngineImage {
            detail: format!("building {tag}: {e}"),
        })?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(DockerError::EngineImage {
                detail: format!("building {tag}: {error}"),
            });
        }
    }
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_the_binary() {
        assert_eq!(tag_for(b"a"), tag_for(b"a"));
        assert_ne!(tag_for(b"a"), tag_for(b"b"));
        assert!(tag_for(b"a").starts_with("antifailure/proxy:"));
        assert_eq!(tag_for(b"a").len(), "antifailure/proxy:".len() + 16);
    }

    #[test]
    fn dynamic_binaries_are_told_apart() {
        assert!(is_static(b"\x7fELF static"));
        assert!(!is_static(b"\x7fELF ... /lib64/ld-linux-x86-64.so.2 ..."));
        assert!(!is_static(b"#!/bin/sh"));
    }
}
