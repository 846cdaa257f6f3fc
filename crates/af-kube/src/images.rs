//! Getting images to a cluster's nodes. The nodes cannot see the daemon on the machine that ran
//! af, so an image that built fine is an image the cluster reports as ErrImagePull minutes later.
//! For a k3d or kind cluster — told by the kubeconfig context's name, the only mark those tools
//! leave — images are copied into the nodes. Nodes that run on the very Docker daemon af builds
//! with (each says so, with the daemon's id, in [`DOCKER_DAEMON_ANNOTATION`]) already have what af
//! builds. Any other cluster must be able to pull them.

use af_runtime::RuntimeError;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;

/// How images reach the nodes of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loader {
    /// `k3d image import IMAGE -c CLUSTER`.
    K3d(String),
    /// `kind load docker-image IMAGE --name CLUSTER`.
    Kind(String),
    /// The nodes run on the daemon af builds with: what it builds they have, nothing to copy.
    SameDaemon,
    /// The nodes pull from a registry: nothing to copy, and `build:` cannot be served.
    Registry,
}

/// The annotation by which a node says which Docker daemon runs its containers (its `docker info`
/// id): a node of this machine's own daemon needs no copy of an image built there.
pub const DOCKER_DAEMON_ANNOTATION: &str = "dev.antifailure/docker-daemon";

/// Whether every node (and there is one) runs on the daemon whose id is `daemon_id`.
pub fn on_this_daemon(nodes: &[Node], daemon_id: &str) -> bool {
    !daemon_id.is_empty()
        && !nodes.is_empty()
        && nodes.iter().all(|node| {
            node.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DOCKER_DAEMON_ANNOTATION))
                .is_some_and(|id| id == daemon_id)
        })
}

/// The loader of the cluster behind kubeconfig context `context`.
pub fn loader_for(context: &str) -> Loader {
    if let Some(cluster) = context.strip_prefix("k3d-") {
        Loader::K3d(cluster.to_string())
    } else if let Some(cluster) = context.strip_prefix("kind-") {
        Loader::Kind(cluster.to_string())
    } else {
        Loader::Registry
    }
}

/// The command that copies `image` into the nodes, if this cluster takes copies.
pub fn load_command(loader: &Loader, image: &str) -> Option<Vec<String>> {
    let words: Vec<&str> = match loader {
        Loader::K3d(cluster) => vec!["k3d", "image", "import", image, "-c", cluster],
        Loader::Kind(cluster) => vec!["kind", "load", "docker-image", image, "--name", cluster],
        Loader::SameDaemon | Loader::Registry => return None,
    };
    Some(words.into_iter().map(str::to_string).collect())
}

/// The names a node reports for an image, as a reference would be written: the runtime keeps
/// `docker.io/library/name:tag` for `name:tag`.
fn names_for(image: &str) -> Vec<String> {
    let mut names = vec![image.to_string()];
    let first = image.split('/').next().unwrap_or_default();
    let has_registry =
        image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if !has_registry {
        names.push(format!("docker.io/{image}"));
        if !image.contains('/') {
            names.push(format!("docker.io/library/{image}"));
        }
    }
    names
}

/// Whether every node already has `image` (so copying it again is skipped).
pub fn on_every_node(nodes: &[Node], image: &str) -> bool {
    let wanted = names_for(image);
    !nodes.is_empty()
        && nodes.iter().all(|node| {
            node.status
                .as_ref()
                .and_then(|s| s.images.as_ref())
                .is_some_and(|images| {
                    images
                        .iter()
                        .flat_map(|i| i.names.iter().flatten())
                        .any(|name| wanted.contains(name))
                })
        })
}

/// Images for a k3d or kind cluster: built with the local Docker daemon and copied into the nodes
/// with the cluster tool's own command.
#[derive(Debug)]
pub struct DockerImageWork {
    docker: bollard::Docker,
}

impl DockerImageWork {
    pub fn new(docker: bollard::Docker) -> DockerImageWork {
        DockerImageWork { docker }
    }
}

#[async_trait]
impl crate::runtime::ImageWork for DockerImageWork {
    async fn build(
        &self,
        manifest_name: &str,
        service: &str,
        manifest_dir: &std::path::Path,
        context: &std::path::Path,
        dockerfile: &std::path::Path,
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

    async fn daemon_id(&self) -> Option<String> {
        self.docker.info().await.ok().and_then(|info| info.id)
    }

    async fn ensure_engine_image(&self) -> Result<(), RuntimeError> {
        af_docker::engine_image::ensure(&self.docker)
            .await
            .map(drop)
            .map_err(RuntimeError::from)
    }

    async fn load(&self, command: &[String]) -> Result<(), RuntimeError> {
        let failed = |detail: String| {
            crate::error::unexpected(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_name_tells_the_cluster_kind() {
        assert_eq!(loader_for("k3d-twins"), Loader::K3d("twins".into()));
        assert_eq!(loader_for("kind-ci"), Loader::Kind("ci".into()));
        assert_eq!(loader_for("prod-eu-1"), Loader::Registry);
        assert_eq!(
            loader_for("my-k3d-cluster"),
            Loader::Registry,
            "only the tools' own prefix"
        );
    }

    #[test]
    fn load_commands_name_the_image_and_the_cluster() {
        assert_eq!(
            load_command(&Loader::K3d("twins".into()), "af-shop-web:abc").unwrap(),
            ["k3d", "image", "import", "af-shop-web:abc", "-c", "twins"]
        );
        assert_eq!(
            load_command(&Loader::Kind("ci".into()), "x:1").unwrap(),
            ["kind", "load", "docker-image", "x:1", "--name", "ci"]
        );
        assert_eq!(load_command(&Loader::Registry, "x:1"), None);
    }

    #[test]
    fn nodes_of_this_daemon_are_told_by_their_annotation_every_one_of_them() {
        let node = |daemon: Option<&str>| -> Node {
            let annotations = daemon
                .map(|d| serde_json::json!({DOCKER_DAEMON_ANNOTATION: d}))
                .unwrap_or(serde_json::json!({}));
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "n", "annotations": annotations}}),
            )
            .unwrap()
        };
        assert!(on_this_daemon(&[node(Some("ABCD:1"))], "ABCD:1"));
        assert!(!on_this_daemon(
            &[node(Some("ABCD:1")), node(None)],
            "ABCD:1"
        ));
        assert!(!on_this_daemon(&[node(Some("EFGH:2"))], "ABCD:1"));
        assert!(!on_this_daemon(&[], "ABCD:1"));
        assert!(!on_this_daemon(&[node(Some(""))], ""));
    }

    #[test]
    fn an_image_on_every_node_is_not_copied_again() {
        let node = |names: &[&str]| -> Node {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"},
                "status": {"images": [{"names": names}]}}))
            .unwrap()
        };
        let image = "antifailure/proxy:0123";
        assert!(on_every_node(
            &[node(&["docker.io/antifailure/proxy:0123"]), node(&[image])],
            image
        ));
        assert!(
            !on_every_node(&[node(&[image]), node(&["other:1"])], image),
            "one node lacks it"
        );
        assert!(!on_every_node(&[], image));
        assert!(on_every_node(
            &[node(&["docker.io/library/redis:7"])],
            "redis:7"
        ));
        assert!(!on_every_node(
            &[node(&["docker.io/registry.example/x:1"])],
            "registry.example/x:1"
        ));
    }
}
