//! What the Docker tests share: test hosts on networks the tests make, and cleanup.

#![allow(dead_code, reason = "each test file uses its own part")]

use af_docker::teardown;
use af_docker::test_hosts::{HostSpec, OutsideHost, Program};
use af_manifest::EnvironmentId;
use bollard::Docker;

/// The daemon these tests need, and the engine image on it (built from the static `af-proxy`
/// when missing).
pub async fn daemon_and_engine() -> (Docker, String) {
    let docker = af_docker::connect()
        .await
        .expect("these tests need the Docker daemon (CI runs one)");
    let image = af_docker::engine_image::ensure(&docker)
        .await
        .expect("the engine image: run scripts/build-engine or set AF_PROXY_BINARY");
    (docker, image)
}

/// The test's own "outside": an internal network with one host on it running the sidecar program
/// as a TCP and DNS server ([`af_docker::test_hosts`]). Removed when dropped.
pub struct Outside {
    pub ip: String,
    /// The host's IPv6 address, on a dual-stack outside network.
    pub ip6: Option<String>,
    pub docker: Docker,
    pub network: String,
    pub host: String,
    inner: OutsideHost,
}

impl Outside {
    /// A host at `.10` of `subnet` (a /24) on an internal network of its own.
    pub async fn create(docker: &Docker, image: &str, tag: &str, subnet: &str) -> Outside {
        Self::create_at(docker, image, tag, subnet, 10).await
    }

    /// A host at `.<host_number>` of `subnet` (a /24).
    pub async fn create_at(
        docker: &Docker,
        image: &str,
        tag: &str,
        subnet: &str,
        host_number: u8,
    ) -> Outside {
        let mut spec = HostSpec::new(tag, subnet, Program::Server);
        spec.host_number = host_number;
        Self::from_spec(docker, image, &spec).await
    }

    /// A host at `.10` of `subnet` and at `subnet6`'s address `<prefix>::<host6>` (a /64), on a
    /// dual-stack network; it serves on both families.
    pub async fn create_dual_stack(
        docker: &Docker,
        image: &str,
        tag: &str,
        subnet: &str,
        subnet6: &str,
        host6: &str,
    ) -> Outside {
        let mut spec = HostSpec::new(tag, subnet, Program::Server);
        spec.v6 = Some((subnet6.to_string(), host6.to_string()));
        Self::from_spec(docker, image, &spec).await
    }

    async fn from_spec(docker: &Docker, image: &str, spec: &HostSpec) -> Outside {
        let inner = OutsideHost::create(docker, image, spec)
            .await
            .expect("the test's outside host");
        Outside {
            ip: inner.ip.clone(),
            ip6: inner.ip6.clone(),
            docker: docker.clone(),
            network: inner.network.clone(),
            host: inner.host.clone(),
            inner,
        }
    }
}

impl Outside {
    /// What has reached this host so far: where a route is judged.
    pub async fn arrivals(&self) -> af_docker::test_hosts::Arrivals {
        self.inner
            .arrivals()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let (docker, inner) = (self.docker.clone(), self.inner.clone());
        removed_when_dropped(async move { inner.remove(&docker).await });
    }
}

/// Runs a test's removal to its end from a `Drop`, which cannot await: on a thread of its own with
/// a short runtime, since the test's runtime may be the one dropping.
pub fn removed_when_dropped<F: std::future::Future + Send + 'static>(removal: F) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(removal);
    })
    .join()
    .unwrap();
}

/// Removes an environment's labelled objects when a test ends, however it ends.
pub struct Teardown(pub Docker, pub EnvironmentId);

impl Drop for Teardown {
    fn drop(&mut self) {
        let (docker, env) = (self.0.clone(), self.1.clone());
        removed_when_dropped(async move {
            let _ = teardown::down(&docker, &env).await;
        });
    }
}

/// The database image (`database.image`) the tests run: `AF_DB_IMAGE`, which `.ci/test` sets from
/// `scripts/build-db-image`; elsewhere that script is run once here (it caches by content). No
/// registry is reachable, so the official image cannot be had; this one takes its contract.
pub fn db_image() -> String {
    static IMAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IMAGE
        .get_or_init(|| {
            if let Ok(image) = std::env::var("AF_DB_IMAGE") {
                return image;
            }
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../scripts/build-db-image");
            let output = std::process::Command::new(&script)
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
            assert!(
                output.status.success(),
                "the database image could not be built ({}): {}\nrun `bash .ci/install` (debootstrap, as root) or set AF_DB_IMAGE to a PostgreSQL image on this machine",
                script.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        })
        .clone()
}

/// The probe's and the gates' routes pointed at TEST-NET addresses nothing on this machine answers
/// (refused inside a service's namespace), and a short timeout: for tests whose subject is not the
/// probe.
pub fn unanswered_targets() -> Vec<String> {
    [
        ("--public-tcp", "203.0.113.10:443"),
        ("--public-dns", "203.0.113.10:53"),
        ("--metadata", "203.0.113.10:80"),
        ("--metadata-v6", "[2001:db8::10]:80"),
        ("--timeout-ms", "1500"),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
    .collect()
}
