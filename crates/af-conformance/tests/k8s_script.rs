//! scripts/k8s-conformance, as far as a machine without k3d can check it: it says plainly that
//! it did not run (never a pass), and it refuses to touch a cluster that already has its name —
//! before creating or deleting anything.

use std::path::PathBuf;
use std::process::{Command, Output};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-conformance")
}

fn run(path: &str, cluster: &str) -> Output {
    Command::new("bash")
        .arg(script())
        .env("PATH", path)
        .env("K8S_CONFORMANCE_CLUSTER", cluster)
        .output()
        .unwrap()
}

#[test]
fn without_k3d_it_says_it_did_not_run() {
    let out = run("/usr/bin:/bin", "af-conformance-test");
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DID NOT RUN: k3d is not installed"),
        "{stderr}"
    );
    assert!(stderr.contains("this is not a pass"), "{stderr}");
}

#[test]
fn a_cluster_that_exists_is_refused_before_anything_is_created_or_deleted() {
    let dir = std::env::temp_dir().join(format!("k8s-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("k3d-calls");
    // A k3d that knows one cluster, and writes down every call.
    std::fs::write(
        dir.join("k3d"),
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nif [ \"$1 $2\" = \"cluster list\" ]; then echo 'theirs   1/1   0/0   true'; fi\n",
            log.display()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(dir.join("k3d"))
        .status()
        .unwrap();
    // A docker that answers `info`, so the refusal is what stops the script.
    std::fs::write(dir.join("docker"), "#!/bin/sh\nexit 0\n").unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(dir.join("docker"))
        .status()
        .unwrap();
    let out = run(&format!("{}:/usr/bin:/bin", dir.display()), "theirs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("refusing to touch it"), "{stderr}");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.lines().all(|c| c.starts_with("cluster list")),
        "only looked: {calls}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Without a cluster to reach, `af-conformance run --runtime kubernetes` says it ran nothing
/// (exit 2, which the script turns into DID NOT RUN) and leaves none of the outside hosts it
/// had made on the Docker daemon.
#[test]
fn the_kubernetes_harness_without_a_cluster_ran_nothing_and_leaves_nothing() {
    let dir = std::env::temp_dir().join(format!("k8s-harness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let records = dir.join("records.jsonl");
    let networks = || {
        let out = Command::new("docker")
            .args(["network", "ls", "--format", "{{.Name}}"])
            .output()
            .expect("this test needs the Docker daemon (CI runs one)");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|n| n.contains("-public") || n.contains("-origin"))
            .count()
    };
    let before = networks();
    let out = Command::new(env!("CARGO_BIN_EXE_af-conformance"))
        .args(["run", "--runtime", "kubernetes", "--out"])
        .arg(&records)
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot set up the kubernetes harness"),
        "{stderr}"
    );
    assert!(!records.exists(), "no verdict may be written");
    assert_eq!(networks(), before, "the outside hosts were removed");
    let _ = std::fs::remove_dir_all(&dir);
}
