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

/// What a service's refusal rules need to know of its network: the environment's subnets, and
/// the addresses in them that are the platform's own (the bridge's gateway: the host).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub subnets: Vec<String>,
    pub gateways: Vec<String>,
}

impl Layout {
    /// The arguments of `af-proxy refuse-outside` on this network.
    pub fn refusal_args(&self) -> Vec<String> {
        let mut args = vec![
            "refuse-outside".to_string(),
            "--interface".to_string(),
            "eth0".to_string(),
        ];
        for subnet in &self.subnets {
            args.extend(["--subnet".to_string(), subnet.clone()]);
        }
        for gateway in &self.gateways {
            args.extend(["--platform-side".to_string(), gateway.clone()]);
        }
        args
    }
}

pub fn layout_of(configs: &[IpamConfig]) -> Layout {
    let mut layout = Layout::default();
    for config in configs {
        let Some(subnet) = config.subnet.clone() else {
            continue;
        };
        let gateway = config
            .gateway
            .clone()
            .filter(|g| !g.is_empty())
            .or_else(|| crate::plan::sidecar::host_in(&subnet, 1).map(|ip| ip.to_string()));
        layout.gateways.extend(gateway);
        layout.subnets.push(subnet);
    }
    layout
}
