//! Whether the node takes a Pod at all, decided before anything of it is made: what a kubelet
//! refuses (a sysctl it does not allow: `SysctlForbidden`, with the kubelet's message), and what
//! this node will not do on the machine the tests run on (the host's namespaces, privileged
//! containers, host paths: `UnsupportedByTestNode`). A refused Pod fails with the reason, as a
//! kubelet's admission failure does, and nothing of it is made.

use k8s_openapi::api::core::v1::{Pod, PodSpec};

/// The sysctls a kubelet allows a Pod without `--allowed-unsafe-sysctls`, as of 1.29 (the
/// version af renders for): 1.22 added `net.ipv4.ip_unprivileged_port_start`, 1.27
/// `ip_local_reserved_ports`, 1.29 the TCP keepalive and timeout ones.
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The safe sysctls of a 1.20 kubelet (`pkg/kubelet/sysctl`), for a node that behaves as one.
pub const SAFE_SYSCTLS_1_20: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
];

/// The reason this node gives what it will not run here.
pub const UNSUPPORTED: &str = "UnsupportedByTestNode";

/// Why a Pod is refused: the Pod's `status.reason` and `status.message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub message: String,
}

fn unsupported(what: &str) -> Refusal {
    Refusal {
        reason: UNSUPPORTED.to_string(),
        // As the kubelet words its own refusals: "Pod <message>".
        message: format!(
            "Pod {what}: the tests' node does not do this (docs/runtimes.md, \"The tests' Kubernetes\")"
        ),
    }
}

/// The volume sources the node makes.
fn volume_supported(volume: &k8s_openapi::api::core::v1::Volume) -> bool {
    volume.empty_dir.is_some()
        || volume.secret.is_some()
        || volume.config_map.is_some()
        || volume.projected.is_some()
        || volume.downward_api.is_some()
        || volume.persistent_volume_claim.is_some()
}

/// Whether the node takes `pod`, allowing `safe_sysctls`.
pub fn admit(pod: &Pod, safe_sysctls: &[String]) -> Result<(), Refusal> {
    let Some(spec) = pod.spec.as_ref() else {
        return Err(unsupported("has no spec"));
    };
    host_namespaces(spec)?;
    for sysctl in spec
        .security_context
        .as_ref()
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
    {
        if !safe_sysctls.iter().any(|s| s == &sysctl.name) {
            return Err(Refusal {
                reason: "SysctlForbidden".to_string(),
                message: format!("Pod forbidden sysctl: {:?} not whitelisted", sysctl.name),
            });
        }
    }
    for volume in spec.volumes.iter().flatten() {
        if !volume_supported(volume) {
            return Err(unsupported(&format!(
                "volume {:?} is of a kind this node does not make (it makes emptyDir, secret, configMap, projected, downwardAPI and persistentVolumeClaim)",
                volume.name
            )));
        }
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for container in containers {
        let security = container.security_context.as_ref();
        if security.and_then(|s| s.privileged) == Some(true) {
            return Err(unsupported(&format!(
                "container {:?} asks to be privileged",
                container.name
            )));
        }
        let profile = security
            .and_then(|s| s.seccomp_profile.as_ref())
            .or_else(|| spec.security_context.as_ref()?.seccomp_profile.as_ref());
        if profile.is_some_and(|p| p.type_ == "Localhost") {
            return Err(unsupported(&format!(
                "container {:?} asks for a Localhost seccomp profile",
                container.name
            )));
        }
    }
    Ok(())
}

fn host_namespaces(spec: &PodSpec) -> Result<(), Refusal> {
    for (asked, what) in [
        (
            spec.host_network,
            "the host's network namespace (hostNetwork)",
        ),
        (spec.host_pid, "the host's process namespace (hostPID)"),
        (spec.host_ipc, "the host's IPC namespace (hostIPC)"),
    ] {
        if asked == Some(true) {
            return Err(unsupported(&format!("asks for {what}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
    }

    fn safe(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_sysctl_is_refused_with_the_kubelets_reason_unless_it_is_safe_for_this_node() {
        let sidecar = pod(serde_json::json!({
            "securityContext": {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]},
            "containers": [{"name": "c"}]
        }));
        assert_eq!(admit(&sidecar, &safe(SAFE_SYSCTLS)), Ok(()));
        let refused = admit(&sidecar, &safe(SAFE_SYSCTLS_1_20)).unwrap_err();
        assert_eq!(refused.reason, "SysctlForbidden");
        assert_eq!(
            refused.message,
            "Pod forbidden sysctl: \"net.ipv4.ip_unprivileged_port_start\" not whitelisted"
        );
    }

    #[test]
    fn what_would_reach_the_machine_itself_is_refused_by_name() {
        for (spec, said) in [
            (
                serde_json::json!({"hostNetwork": true, "containers": [{"name": "c"}]}),
                "hostNetwork",
            ),
            (
                serde_json::json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]}),
                "privileged",
            ),
            (
                serde_json::json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}], "containers": [{"name": "c"}]}),
                "volume \"h\"",
            ),
            (
                serde_json::json!({"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "x"}}, "containers": [{"name": "c"}]}),
                "Localhost seccomp",
            ),
        ] {
            let refused = admit(&pod(spec), &safe(SAFE_SYSCTLS)).unwrap_err();
            assert_eq!(refused.reason, UNSUPPORTED);
            assert!(refused.message.contains(said), "{}", refused.message);
        }
    }

    #[test]
    fn an_ordinary_pod_is_taken() {
        let ordinary = pod(serde_json::json!({
            "volumes": [{"name": "v", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x"}}],
            "initContainers": [{"name": "i", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}],
            "containers": [{"name": "c", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]
        }));
        assert_eq!(admit(&ordinary, &safe(SAFE_SYSCTLS)), Ok(()));
    }
}
