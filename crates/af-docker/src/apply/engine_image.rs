//! The engine image: the static `af-proxy` binary in an image built FROM scratch, with a root
//! filesystem made here of the few files its kernel-filter steps need (the iptables multi-call
//! binary, its libraries and extensions, `/etc/protocols`), taken from this machine. Tagged with
//! the digest of that whole context, built on the local daemon when the tag is missing; no
//! registry is needed. `AF_PROXY_IMAGE` names another image instead.

use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::BuildImageOptions;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::error::{DockerError, platform};

pub const REPOSITORY: &str = "antifailure/proxy";

/// Where the static binary is: `AF_PROXY_BINARY`, or the static build (`scripts/build-engine`)
/// beside this workspace's.
pub fn locate_binary() -> Result<PathBuf, DockerError> {
    if let Ok(path) = std::env::var("AF_PROXY_BINARY") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| platform("locating af", e))?;
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .filter(|dir| dir.ends_with("target"))
        .map(|target| target.join("x86_64-unknown-linux-gnu/sidecar/af-proxy"))
        .collect();
    candidates.into_iter().find(|p| p.exists()).ok_or_else(|| DockerError::EngineImage {
        detail: "no static af-proxy binary: build it with `scripts/build-engine` or set AF_PROXY_BINARY (or AF_PROXY_IMAGE to an image that has it)".to_string(),
    })
}

/// `antifailure/proxy:<first 16 hex digits of the build context's SHA-256>`.
pub fn tag_for(context: &[u8]) -> String {
    digest_tag(REPOSITORY, context)
}

/// `<repository>:<first 16 hex digits of the SHA-256 of bytes>`.
pub fn digest_tag(repository: &str, bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{repository}:{hex}")
}

/// The iptables files the image carries, at the same paths as on this machine.
const IPTABLES_FILES: [&str; 7] = [
    "/usr/sbin/xtables-nft-multi",
    "/lib/x86_64-linux-gnu/libxtables.so.12",
    "/lib/x86_64-linux-gnu/libmnl.so.0",
    "/lib/x86_64-linux-gnu/libnftnl.so.11",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib64/ld-linux-x86-64.so.2",
    // Protocol names: without it iptables-save prints numbers and no rule would read back as planned.
    "/etc/protocols",
];

/// Where the match and target extensions (owner, REJECT, ...) live.
const XTABLES_EXTENSIONS: &str = "/usr/lib/x86_64-linux-gnu/xtables";

/// The names the multi-call binary answers to.
const IPTABLES_NAMES: [&str; 6] = [
    "iptables",
    "iptables-restore",
    "iptables-save",
    "ip6tables",
    "ip6tables-restore",
    "ip6tables-save",
];

/// Whether a binary links statically: a dynamic one names its loader, which a FROM scratch image
/// does not have.
pub fn is_static(binary: &[u8]) -> bool {
    const LOADER: &[u8] = b"/lib64/ld-linux";
    binary.starts_with(b"\x7fELF") && !binary.windows(LOADER.len()).any(|w| w == LOADER)
}

/// The engine image's Dockerfile: the root filesystem, the sidecar's process environment, an
/// unprivileged user.
fn dockerfile() -> String {
    let environment: String = af_sidecar_api::PROCESS_ENVIRONMENT
        .iter()
        .map(|(name, value)| format!("ENV {name}={value}\n"))
        .collect();
    format!(
        "FROM scratch\nCOPY rootfs/ /\n{environment}USER 1337:1337\nENTRYPOINT [\"/af-proxy\"]\n"
    )
}

/// The build context: a Dockerfile, the binary and the root filesystem, in a fixed order with
/// fixed times so the same inputs give the same digest.
fn context(binary: &[u8]) -> Result<Vec<u8>, DockerError> {
    let dockerfile = dockerfile();
    let mut archive = tar::Builder::new(Vec::new());
    let mut add = |name: &str, bytes: &[u8], mode: u32| -> Result<(), DockerError> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        archive
            .append_data(&mut header, name, bytes)
            .map_err(|e| platform("packing the engine image", e))
    };
    add("Dockerfile", dockerfile.as_bytes(), 0o644)?;
    add("rootfs/af-proxy", binary, 0o755)?;
    let mut files: Vec<String> = IPTABLES_FILES.iter().map(|f| f.to_string()).collect();
    let mut extensions: Vec<String> = std::fs::read_dir(XTABLES_EXTENSIONS)
        .map_err(|e| missing_iptables(XTABLES_EXTENSIONS, e))?
        .filter_map(|entry| entry.ok().map(|e| e.path().display().to_string()))
        .collect();
    extensions.sort();
    files.extend(extensions);
    for file in &files {
        let bytes = std::fs::read(file).map_err(|e| missing_iptables(file, e))?;
        add(&format!("rootfs{file}"), &bytes, 0o755)?;
    }
    let mut archive = archive;
    // A /tmp any user may write to, as every image is expected to have.
    let mut tmp = tar::Header::new_gnu();
    tmp.set_entry_type(tar::EntryType::Directory);
    tmp.set_size(0);
    tmp.set_mode(0o1777);
    tmp.set_cksum();
    archive
        .append_data(&mut tmp, "rootfs/tmp/", std::io::empty())
        .map_err(|e| platform("packing the engine image", e))?;
    for name in IPTABLES_NAMES {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        archive
            .append_link(
                &mut header,
                format!("rootfs/usr/sbin/{name}"),
                "xtables-nft-multi",
            )
            .map_err(|e| platform("packing the engine image", e))?;
    }
    archive
        .into_inner()
        .map_err(|e| platform("packing the engine image", e))
}

fn missing_iptables(path: &str, err: std::io::Error) -> DockerError {
    DockerError::EngineImage {
        detail: format!(
            "{path}: {err}; the engine image carries this machine's iptables (nf_tables): apt-get install iptables"
        ),
    }
}

/// The engine image's tag: `AF_PROXY_IMAGE` when set (no binary needed then), otherwise built
/// from the static binary `locate_binary` finds, when the daemon does not have it yet.
pub async fn ensure(docker: &Docker) -> Result<String, DockerError> {
    if let Ok(image) = std::env::var("AF_PROXY_IMAGE") {
        docker
            .inspect_image(&image)
            .await
            .map_err(|e| DockerError::EngineImage {
                detail: format!("AF_PROXY_IMAGE={image} is not on this daemon: {e}"),
            })?;
        return Ok(image);
    }
    ensure_built_from(docker, &locate_binary()?).await
}

/// The engine image's reference without building it: `AF_PROXY_IMAGE`, or the tag the static
/// binary's image has (the digest of its build context).
pub fn expected() -> Result<String, DockerError> {
    if let Ok(image) = std::env::var("AF_PROXY_IMAGE") {
        return Ok(image);
    }
    let path = locate_binary()?;
    let binary = std::fs::read(&path).map_err(|e| DockerError::EngineImage {
        detail: format!("cannot read {}: {e}", path.display()),
    })?;
    Ok(tag_for(&context(&binary)?))
}

/// The engine image of `binary_path`, built when the daemon does not have it.
async fn ensure_built_from(docker: &Docker, binary_path: &Path) -> Result<String, DockerError> {
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
    let context = context(&binary)?;
    let tag = tag_for(&context);
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
    let body = bollard::body_full(context.into());
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
    fn the_image_sets_the_sidecars_process_environment() {
        let dockerfile = dockerfile();
        assert!(dockerfile.contains("\nENV GLIBC_TUNABLES=glibc.malloc.arena_max=1\n"));
        assert!(dockerfile.starts_with("FROM scratch\n"));
        assert!(dockerfile.ends_with("ENTRYPOINT [\"/af-proxy\"]\n"));
    }

    #[test]
    fn dynamic_binaries_are_told_apart() {
        assert!(is_static(b"\x7fELF static"));
        assert!(!is_static(b"\x7fELF ... /lib64/ld-linux-x86-64.so.2 ..."));
        assert!(!is_static(b"#!/bin/sh"));
    }
}
