//! `af` links the sidecar's contract, never the sidecar: no HTTP server framework, no certificate
//! library, no proxy. A dependency that pulls one of them back in fails here, by name.

use std::process::Command;

#[test]
fn af_links_no_server_no_certificate_library_and_no_proxy() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(["tree", "-p", "af-cli", "-e", "normal", "--prefix", "none"])
        .args(["--offline", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml"))
        .output()
        .expect("running cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        tree.contains("af-sidecar-api "),
        "the tree is not af's:\n{tree}"
    );
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    for forbidden in ["axum", "rcgen", "x509-parser", "af-egress", "af-proxy"] {
        assert!(
            !crates.contains(&forbidden),
            "af links {forbidden}; the CLI and the runtimes depend on af-sidecar-api, not on the sidecar:\n{tree}"
        );
    }
}
