//! The control plane as `scripts/control-plane` starts it: Kubernetes 1.20 (what `kubectl get
//! --raw /version` says, with the kubectl built beside it), and nothing of it listening beyond
//! loopback — read off the machine's own socket table, by the processes' ids.

use std::process::Command;

use af_testcluster::TestCluster;

#[test]
fn the_control_plane_is_kubernetes_1_20_and_listens_on_loopback_only() {
    let cluster = TestCluster::shared();
    let version = Command::new(cluster.kubectl())
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["get", "--raw", "/version"])
        .output()
        .unwrap();
    assert!(version.status.success(), "{version:?}");
    let version: serde_json::Value = serde_json::from_slice(&version.stdout).unwrap();
    assert_eq!(version["gitVersion"], "v1.20.2");
    assert_eq!(
        (version["major"].as_str(), version["minor"].as_str()),
        (Some("1"), Some("20"))
    );

    let pids: Vec<(String, String)> = std::fs::read_to_string(cluster.dir.join("pids"))
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(pid, name)| (pid.to_string(), name.to_string()))
        .collect();
    let started: Vec<&str> = pids.iter().map(|(_, name)| name.as_str()).collect();
    for component in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        assert!(
            started.contains(&component),
            "{component} runs: {started:?}"
        );
    }
    let sockets = Command::new("ss").args(["-H", "-lntup"]).output().unwrap();
    assert!(sockets.status.success(), "ss: {sockets:?}");
    let table = String::from_utf8_lossy(&sockets.stdout).into_owned();
    let mut seen = 0;
    for line in table.lines() {
        let Some((pid, name)) = pids
            .iter()
            .find(|(pid, _)| line.contains(&format!("pid={pid},")))
        else {
            continue;
        };
        seen += 1;
        let local = line.split_whitespace().nth(4).unwrap_or_default();
        assert!(
            local.starts_with("127.0.0.1:") || local.starts_with("[::1]:"),
            "{name} (pid {pid}) listens beyond loopback: {line}"
        );
    }
    assert!(
        seen >= 3,
        "etcd's two listeners and the API server's were seen: {table}"
    );
}
