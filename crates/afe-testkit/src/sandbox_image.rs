//! The sandbox image the tests run tickets in. No registry is reachable, so it is made on this
//! machine by `scripts/build-sandbox-image` (a debootstrap root filesystem with git, imported into
//! the daemon, cached by the digest of its inputs). `.ci/test` builds it before the tests and
//! passes it as `AFE_SANDBOX_IMAGE`; elsewhere the first test that needs it builds it.

use std::sync::OnceLock;

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
