//! The sandbox image the tests run tickets in, and what a test reads of a ticket's sandbox on the
//! daemon. No registry is reachable, so it is made on this
//! machine by `scripts/build-sandbox-image` (a debootstrap root filesystem with git, imported into
//! the daemon, cached by the digest of its inputs). `.ci/test` builds it before the tests and
//! passes it as `AFE_SANDBOX_IMAGE`; elsewhere the first test that needs it builds it.

use std::sync::OnceLock;

use sha2::Digest;

/// The image's reference. Fails, saying what to do, when it cannot be had: these tests are never
/// skipped.
pub fn sandbox_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            if let Ok(image) = std::env::var("AFE_SANDBOX_IMAGE") {
                return image;
            }
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../scripts/build-sandbox-image");
            let output = std::process::Command::new(&script)
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
            assert!(
                output.status.success(),
                "the sandbox image could not be built ({}): {}\nrun `bash .ci/install` (debootstrap, as root) or set AFE_SANDBOX_IMAGE to an image that meets docs/afe-sandbox.md",
                script.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        })
        .clone()
}

/// How many containers and volumes of `ticket` the daemon still has, found by its label alone.
pub async fn sandbox_objects(ticket: &str) -> (usize, usize) {
    let docker = bollard::Docker::connect_with_local_defaults().expect("the Docker daemon");
    let filter = || {
        Some(std::collections::HashMap::from([(
            "label".to_string(),
            vec![format!("afe.ticket={ticket}")],
        )]))
    };
    let containers = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: filter(),
            ..Default::default()
        }))
        .await
        .expect("listing containers");
    let volumes = docker
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
            filters: filter(),
        }))
        .await
        .expect("listing volumes");
    (containers.len(), volumes.volumes.unwrap_or_default().len())
}

/// Waits until a process whose command line holds `needle` runs in the ticket's sandbox container
/// (`afe-<ticket>`): a node is at the point the test wants to cut it. Asked until it is — the
/// deadline only ends a test whose ticket never got there, it times nothing.
pub async fn wait_for_process(ticket: &str, needle: &str) {
    let docker = bollard::Docker::connect_with_local_defaults().expect("the Docker daemon");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "{needle:?} never ran in the sandbox of ticket {ticket}"
        );
        if let Ok(top) = docker
            .top_processes(
                &format!("afe-{ticket}"),
                None::<bollard::query_parameters::TopOptions>,
            )
            .await
            && format!("{:?}", top.processes).contains(needle)
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The sandbox image with the scripted ACP agent (`afe-acp-script`, this crate's binary) at
/// `/usr/local/bin`, as a user's image would carry their agent. Made from [`sandbox_image`] on the
/// daemon (a container created, the binary copied in, committed; nothing pulled) and tagged by
/// the binary's digest. The binary is linked against the machine's glibc: the sandbox image is
/// made from the same Debian release by debootstrap here.
pub fn acp_sandbox_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(build_acp_sandbox_image).clone()
}

/// The path of this crate's binary `name` (`afe-acp-script`, `afe-mcp-script`), built first:
/// the tests of other crates cannot name another package's binaries.
pub fn testkit_binary(name: &str) -> std::path::PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let built = std::process::Command::new(cargo)
        .args([
            "build",
            "-q",
            "-p",
            "afe-testkit",
            "--bin",
            name,
            "--message-format=json",
        ])
        .output()
        .expect("running cargo build");
    assert!(
        built.status.success(),
        "building {name}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    String::from_utf8_lossy(&built.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
        .unwrap_or_else(|| panic!("cargo named no executable for {name}"))
}

fn build_acp_sandbox_image() -> String {
    use std::process::Command;
    let binary = testkit_binary("afe-acp-script");
    let bytes = std::fs::read(&binary).unwrap();
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let image = format!("afe-sandbox-acp:{digest}");
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().expect("docker");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    if Command::new("docker")
        .args(["image", "inspect", &image])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return image;
    }
    let base = sandbox_image();
    let container = docker(&["create", &base]);
    docker(&[
        "cp",
        &binary.display().to_string(),
        &format!("{container}:/usr/local/bin/afe-acp-script"),
    ]);
    docker(&["commit", &container, &image]);
    docker(&["rm", &container]);
    image
}
