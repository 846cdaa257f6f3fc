//! What the Docker sandbox tests share: a sandbox per test, its ticket removed when the test ends
//! however it ends.

#![allow(dead_code, reason = "each test file uses its own part")]

use std::collections::BTreeMap;

use afe_sandbox::{ExecOutput, ExecRequest, Opened, Sandbox, SandboxSpec};
use afe_sandbox_docker::{DockerSandbox, DockerSandboxSettings};

/// A ticket id (lowercase letters, digits and `-`, as the store makes them), unique to the test.
pub fn ticket() -> String {
    afe_testkit::unique("t").replace('_', "-")
}

/// A spec for `ticket` on the tests' sandbox image, with no egress.
pub fn spec(ticket: &str) -> SandboxSpec {
    SandboxSpec {
        ticket: ticket.to_string(),
        image: afe_testkit::sandbox_image(),
        cpus: Some(1.0),
        memory_bytes: Some(256 << 20),
        env: BTreeMap::new(),
        egress: Vec::new(),
        runtime_class: None,
    }
}

/// The adapter on the machine's daemon, with the engine image built from the static `af-proxy`.
pub async fn adapter(settings: DockerSandboxSettings) -> DockerSandbox {
    DockerSandbox::connect(settings)
        .await
        .expect("these tests need the Docker daemon (CI runs one)")
}

/// Removes the ticket's sandbox when the test ends, passed or failed.
pub struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let ticket = self.0.clone();
        // A runtime of its own: the test's may be gone or panicking.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                if let Ok(sandbox) = DockerSandbox::connect(DockerSandboxSettings::default()).await
                {
                    let _ = sandbox.remove(&ticket).await;
                }
            });
        })
        .join();
    }
}

/// Opens and waits for the sandbox of `spec`.
pub async fn open(sandbox: &DockerSandbox, spec: &SandboxSpec) -> Opened {
    let opened = sandbox.open(spec).await.expect("the sandbox opens");
    sandbox
        .wait_ready(&opened)
        .await
        .expect("the sandbox becomes ready");
    opened
}

/// `sh -c script` in the sandbox, to its end.
pub async fn sh(sandbox: &DockerSandbox, opened: &Opened, script: &str) -> ExecOutput {
    let mut request = ExecRequest::new(["sh", "-c", script]);
    request.workdir = Some("/workspace".to_string());
    sandbox
        .exec(opened, &request, &mut |_| {})
        .await
        .expect("the command runs")
}

pub use afe_testkit::sandbox_objects;
