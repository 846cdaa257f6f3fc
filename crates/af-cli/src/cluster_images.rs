//! Images for a k3d or kind cluster: built with the local Docker daemon and copied into the nodes
//! with the cluster tool's own command.

use std::path::Path;

use af_runtime::RuntimeError;
use async_trait::async_trait;

pub struct DockerImageWork {
    docker: bollard::Docker,
}

impl DockerImageWork {
    pub fn new(docker: bollard::Docker) -> DockerImageWork {
        DockerImageWork { docker }
    }
}

#[async_trait]
impl af_kube::runtime::ImageWork for DockerImageWork {
    async fn build(
        &self,
        manifest_name: &str,
        service: &str,
        manifest_dir: &Path,
        context: &Path,
        dockerfile: &Path,
    ) -> Result<String, RuntimeError> {
        af_docker::build::build(
            &self.docker,
            manifest_name,
            service,
            manifest_dir,
            context,
            dockerfile,
        )
        .await
        .map_err(RuntimeError::from)
    }

    async fn load(&self, command: &[String]) -> Result<(), RuntimeError> {
        let failed = |detail: String| {
            RuntimeError::platform_failed(
                format!("copying an image into the nodes ({})", command.join(" ")),
                detail,
            )
        };
        let (program, args) = command
            .split_first()
            .ok_or_else(|| failed("no command".into()))?;
        let out = tokio::process::Command::new(program)
            .args(args)
            .output()
            .await
            .map_err(|e| failed(format!("{program} could not be run ({e}); install it, or name images the nodes can pull")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(failed(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ))
        }
    }
}
