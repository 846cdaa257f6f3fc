//! Building a service's image from its `build` context with the Engine API. The tag is the digest
//! of the context, so an unchanged context is not built again, and a changed one always is.

use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::BuildImageOptions;
use futures_util::StreamExt;

use crate::engine_image::digest_tag;
use crate::error::{DockerError, platform};

/// Every file under `dir`, sorted, as paths relative to it.
fn files_under(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.push(
                    path.strip_prefix(dir)
                        .map(Path::to_path_buf)
                        .unwrap_or(path),
                );
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The context as a tar archive with fixed times and owners, so the same files give the same
/// bytes and the same digest.
pub fn context_archive(dir: &Path) -> Result<Vec<u8>, DockerError> {
    let read =
        |e: std::io::Error| platform(format!("reading the build context {}", dir.display()), e);
    let mut archive = tar::Builder::new(Vec::new());
    for relative in files_under(dir).map_err(read)? {
        let full = dir.join(&relative);
        let bytes = std::fs::read(&full).map_err(read)?;
        let executable = std::fs::metadata(&full)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
            .unwrap_or(false);
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(if executable { 0o755 } else { 0o644 });
        header.set_cksum();
        archive
            .append_data(&mut header, &relative, bytes.as_slice())
            .map_err(read)?;
    }
    archive.into_inner().map_err(read)
}

/// The tag a service's image built from `context` (relative to the manifest's folder) has: the
/// digest of the context's files, so it is known without building.
pub fn tag_of(
    manifest_name: &str,
    service: &str,
    manifest_dir: &Path,
    context: &Path,
) -> Result<String, DockerError> {
    let archive = context_archive(&manifest_dir.join(context))?;
    Ok(digest_tag(
        &format!("af-{manifest_name}-{service}"),
        &archive,
    ))
}

/// Builds `context` (relative to the manifest's folder) unless an image with its digest exists;
/// returns the tag. A failed build names the service and the builder's message.
pub async fn build(
    docker: &Docker,
    manifest_name: &str,
    service: &str,
    manifest_dir: &Path,
    context: &Path,
    dockerfile: &Path,
) -> Result<String, DockerError> {
    let dir = manifest_dir.join(context);
    let archive = context_archive(&dir)?;
    let tag = digest_tag(&format!("af-{manifest_name}-{service}"), &archive);
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let options = BuildImageOptions {
        t: Some(tag.clone()),
        dockerfile: dockerfile.display().to_string(),
        rm: true,
        forcerm: true,
        ..Default::default()
    };
    let mut steps = docker.build_image(options, None, Some(bollard::body_full(archive.into())));
    let mut output = Vec::new();
    while let Some(step) = steps.next().await {
        let failed = |detail: String| {
            platform(
                format!(
                    "building the image of service {service} from {}",
                    dir.display()
                ),
                detail,
            )
        };
        let info = match step {
            Ok(info) => info,
            // The builder's own failure (a step that failed), as the stream reports it.
            Err(bollard::errors::Error::DockerStreamError { error }) => {
                return Err(build_failed(service, &dir, &output, &error));
            }
            Err(e) => return Err(failed(e.to_string())),
        };
        if let Some(line) = info.stream {
            output.push(line);
        }
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(build_failed(service, &dir, &output, &error));
        }
    }
    Ok(tag)
}

/// The builder ran and the build failed: the context's to fix, not the daemon (AF-RUN-062), with
/// its message and its last lines.
fn build_failed(service: &str, dir: &Path, output: &[String], error: &str) -> DockerError {
    let last: Vec<String> = output
        .iter()
        .rev()
        .take(10)
        .rev()
        .map(|l| l.trim_end().to_string())
        .collect();
    DockerError::Runtime(
        af_runtime::RuntimeErrorKind::ImageBuildFailed {
            service: service.to_string(),
            context: dir.display().to_string(),
            detail: format!("{error}\n{}", last.join("\n")),
        }
        .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_files_give_the_same_archive() {
        let dir = std::env::temp_dir().join(format!("af-build-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(dir.join("sub/a"), "a").unwrap();
        let first = context_archive(&dir).unwrap();
        std::fs::write(dir.join("sub/a"), "a").unwrap(); // a new mtime, the same content
        assert_eq!(first, context_archive(&dir).unwrap());
        std::fs::write(dir.join("sub/a"), "b").unwrap();
        assert_ne!(first, context_archive(&dir).unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
