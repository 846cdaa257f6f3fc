//! The environment's two networks' create requests: `internal` for the services (no route off the
//! host; a subnet af chooses, so the sidecar can have a fixed address in it), `egress` for the
//! sidecar alone.

use af_manifest::EnvironmentId;
use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};

use crate::names;

/// Where Docker picks the services' network's own addresses: the upper half of its /24 (126
/// containers), leaving the lower half to addresses af fixes.
pub const DYNAMIC_RANGE: &str = "128/25";

/// The services' network on `10.213.{third}.0/24`: internal (no route off the host), containers'
/// own addresses from the upper half, so the sidecar's fixed one (.2) is free even when instances
/// are made before it.
pub fn internal(name: &str, env: &EnvironmentId, third: u8) -> NetworkCreateRequest {
    NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".to_string()),
        internal: Some(true),
        labels: Some(names::labels(env, "internal-network")),
        ipam: Some(Ipam {
            config: Some(vec![IpamConfig {
                subnet: Some(format!("10.213.{third}.0/24")),
                ip_range: Some(format!("10.213.{third}.{DYNAMIC_RANGE}")),
                // Given a range, Docker would put the gateway at its first address instead.
                gateway: Some(format!("10.213.{third}.1")),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The sidecar's way off the host: a plain bridge.
pub fn egress(name: &str, env: &EnvironmentId) -> NetworkCreateRequest {
    NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".to_string()),
        internal: Some(false),
        labels: Some(names::labels(env, "egress-network")),
        ..Default::default()
    }
}
