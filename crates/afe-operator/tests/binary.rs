//! The `afe-operator` binary at start: with nothing to reach the API with, it says so with its
//! code and exits 2, before watching anything.

use std::process::Command;

#[test]
fn with_no_credentials_it_exits_with_what_to_do() {
    let dir = std::env::temp_dir().join(format!("afe-operator-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_afe-operator"))
        .args(["--namespace", "afe", "--kube-context", "nowhere"])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("AFE-OPR-005") && stderr.contains("--kube-context"),
        "{stderr}"
    );
}
