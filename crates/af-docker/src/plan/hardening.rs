//! What every container af starts gives up, written once: every capability, and any gain of
//! privilege through a setuid file (no-new-privileges). Containers that need nothing of their root
//! filesystem but to read it also get it read-only. The one capability af ever adds — a holder's
//! NET_ADMIN, for the refusal rules, which its own process gives up at start — is added by the
//! holder's builder on top of this, in plain sight.

use bollard::models::HostConfig;

/// The host configuration every container starts from: on `network_mode` (a network's name, or
/// `container:<holder>` to join a pod's namespace), with no capability and no new privileges.
pub fn confined(network_mode: &str) -> HostConfig {
    HostConfig {
        network_mode: Some(network_mode.to_string()),
        cap_drop: Some(vec!["ALL".to_string()]),
        security_opt: Some(vec!["no-new-privileges".to_string()]),
        ..Default::default()
    }
}

/// [`confined`], with a read-only root filesystem: the engine's own containers (holders, the
/// sidecar, the ingress, one-shots), whose binary writes nothing but to its scratch space.
pub fn confined_read_only(network_mode: &str) -> HostConfig {
    HostConfig {
        readonly_rootfs: Some(true),
        ..confined(network_mode)
    }
}
