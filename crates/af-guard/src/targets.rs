//! Where the probe and the gate try to go. The defaults are the real addresses a user's platform
//! must keep workloads from; every test passes its own test hosts instead.

use std::net::SocketAddr;

use crate::route::{Route, RouteKind};

/// The standard routes' targets (CONTAINMENT.md E1, E2, E4, E6) plus any extra routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Targets {
    /// E1: TCP straight to a public address.
    pub public_tcp: Option<SocketAddr>,
    /// E2: a UDP DNS query straight to a public resolver.
    pub public_dns: Option<SocketAddr>,
    /// E4: the instance metadata endpoint, IPv4 ...
    pub metadata: Option<SocketAddr>,
    /// ... and IPv6.
    pub metadata_v6: Option<SocketAddr>,
    /// E6: the platform's API (the Kubernetes API server, the Docker host).
    pub platform_api: Option<SocketAddr>,
    pub extra: Vec<Route>,
}

impl Targets {
    /// The real targets: a public anycast address for TCP and DNS, the metadata endpoints, and the
    /// Kubernetes API server when running in a pod. Without a platform API address the route is
    /// reported unanswered — a failure — rather than left out.
    pub fn real() -> Targets {
        let platform_api = match (
            std::env::var("KUBERNETES_SERVICE_HOST"),
            std::env::var("KUBERNETES_SERVICE_PORT"),
        ) {
            (Ok(host), Ok(port)) => format!("{host}:{port}")
                .parse()
                .ok()
                .or_else(|| format!("[{host}]:{port}").parse().ok()),
            _ => None,
        };
        Targets {
            public_tcp: Some(SocketAddr::from(([1, 1, 1, 1], 443))),
            public_dns: Some(SocketAddr::from(([1, 1, 1, 1], 53))),
            metadata: Some(SocketAddr::from(([169, 254, 169, 254], 80))),
            metadata_v6: Some(SocketAddr::from((
                [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254],
                80,
            ))),
            platform_api,
            extra: Vec::new(),
        }
    }

    /// Every route to try, in a fixed order.
    pub fn routes(&self) -> Vec<Route> {
        let route = |name: &str, kind: Option<RouteKind>| Route {
            name: name.to_string(),
            kind: kind.unwrap_or(RouteKind::Unconfigured),
        };
        let mut routes = vec![
            route("public-tcp", self.public_tcp.map(RouteKind::Tcp)),
            route("public-dns", self.public_dns.map(RouteKind::DnsUdp)),
            route("metadata", self.metadata.map(RouteKind::Tcp)),
            route("metadata-v6", self.metadata_v6.map(RouteKind::Tcp)),
            route("platform-api", self.platform_api.map(RouteKind::Tcp)),
        ];
        routes.extend(self.extra.iter().cloned());
        routes
    }
}
