//! The sidecar as data: its ports, its fixed address, its configuration (the typed
//! `SidecarConfig`), the digest of what it is made from, and its create body.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use af_manifest::{EgressPolicy, EnvironmentId};
use af_sidecar_api::SidecarConfig;
use af_sidecar_api::config::{ControlConfig, DnsConfig, Listeners, RelayConfig, TlsCaptureConfig};
use bollard::models::ContainerCreateBody;

use crate::error::{DockerError, internal};
use crate::names;
use crate::plan::external_database::Relay;
use crate::plan::trust::CaptureCa;

pub const PROXY_PORT: u16 = 3128;

pub const DNS_PORT: u16 = 53;

pub const CONTROL_PORT: u16 = 9901;

pub const HTTP_PORT: u16 = 80;
pub const TLS_PORT: u16 = 443;
pub const SMTP_PORTS: [u16; 2] = [25, 587];
pub const SMTPS_PORT: u16 = 465;

/// Every TCP port the sidecar serves on its own: a relay cannot listen on one of them.
pub const SERVED_PORTS: [u16; 8] = [
    PROXY_PORT,
    HTTP_PORT,
    TLS_PORT,
    DNS_PORT,
    SMTP_PORTS[0],
    SMTP_PORTS[1],
    SMTPS_PORT,
    CONTROL_PORT,
];

/// The address a subnet's host number `index` has (`172.20.0.0/16`, 2 → 172.20.0.2).
pub fn host_in(subnet: &str, index: u32) -> Option<Ipv4Addr> {
    let (base, prefix) = subnet.split_once('/')?;
    let base: Ipv4Addr = base.parse().ok()?;
    let prefix: u32 = prefix.parse().ok()?;
    let size = 1u64 << (32 - prefix.min(32));
    (u64::from(index) < size.saturating_sub(1)).then(|| Ipv4Addr::from(u32::from(base) + index))
}

/// The variable the sidecar's configuration is given in (`af-proxy serve` reads it), with its `=`.
pub const CONFIG_VARIABLE: &str = "AF_PROXY_CONFIG_TEXT=";

/// The sidecar's configuration: every listener on all of its addresses, the control API answering
/// only on the egress side (a connection arriving on `internal_ip`, the services' side, is closed
/// unread), outside names resolved to `internal_ip`, webhooks to each service by name, and the
/// external database's relay on the services' side only.
pub fn config(
    env: &EnvironmentId,
    spec: &SidecarSpec<'_>,
    internal_ip: Ipv4Addr,
    token: &str,
) -> SidecarConfig {
    let SidecarSpec {
        policy,
        webhooks,
        capture_ca,
        relay,
        ..
    } = *spec;
    let any = |port: u16| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let mut control = ControlConfig::inline(any(CONTROL_PORT), token.to_string());
    control.workload_addresses = vec![IpAddr::V4(internal_ip)];
    let mut config = SidecarConfig::new(
        env.as_str(),
        Listeners {
            proxy: Some(any(PROXY_PORT)),
            http: Some(any(HTTP_PORT)),
            tls: Some(any(TLS_PORT)),
            dns: Some(any(DNS_PORT)),
            smtp: SMTP_PORTS.iter().map(|port| any(*port)).collect(),
            smtps: vec![any(SMTPS_PORT)],
        },
        control,
    );
    config.policy = policy.clone();
    config.dns = Some(DnsConfig::answering(Some(internal_ip), None));
    // Each service with a port takes webhooks at its name, which the platform's resolver knows.
    config.webhooks = webhooks
        .iter()
        .map(|(service, port)| (service.clone(), format!("{service}:{port}")))
        .collect();
    config.tls_capture = capture_ca.map(|ca| TlsCaptureConfig::inline(&ca.pem));
    config.relays = relay
        .map(|relay| RelayConfig {
            listen: SocketAddr::from((internal_ip, relay.listen_port)),
            host: relay.host.clone(),
            port: relay.port,
            named_by: relay.named_by.clone(),
        })
        .into_iter()
        .collect();
    config
}

/// What a sidecar is made from.
#[derive(Clone, Copy, Debug)]
pub struct SidecarSpec<'a> {
    /// The engine image.
    pub image: &'a str,
    /// The services' network and the egress network.
    pub internal: &'a str,
    pub egress: &'a str,
    pub policy: &'a EgressPolicy,
    /// Each service that takes webhooks, and its port.
    pub webhooks: &'a [(String, u16)],
    pub capture_ca: Option<&'a CaptureCa>,
    /// The external database's relay.
    pub relay: Option<&'a Relay>,
}

/// Everything a sidecar is made from, as a digest; unchanged, a second `up` keeps it as it runs
/// (and keeps its token, which the services never see but `af net log` reads back).
pub fn spec_digest(spec: &SidecarSpec<'_>) -> Result<String, DockerError> {
    let policy_text = serde_json::to_string(spec.policy)
        .map_err(|e| internal("writing the sidecar configuration", e))?;
    let webhook_text = format!("{:?}", spec.webhooks);
    let ca_cert = spec.capture_ca.map_or("", |ca| ca.pem.cert.as_str());
    let mut parts = vec![
        spec.image,
        spec.internal,
        spec.egress,
        &policy_text,
        &webhook_text,
        ca_cert,
    ];
    // Only when there is one: a sidecar without a relay keeps the digest it had before relays
    // existed, so upgrading af does not make every running sidecar again.
    let relay_text = spec.relay.map(|relay| format!("{relay:?}"));
    parts.extend(relay_text.as_deref());
    Ok(names::spec_digest(&parts))
}

/// The sidecar's create body ([`crate::plan::containers::sidecar`]) at `internal_ip`, behind
/// `token`.
pub fn body(
    env: &EnvironmentId,
    spec: SidecarSpec<'_>,
    internal_ip: Ipv4Addr,
    token: &str,
) -> Result<ContainerCreateBody, DockerError> {
    let text = config(env, &spec, internal_ip, token)
        .to_text()
        .map_err(|e| internal("writing the sidecar configuration", e))?;
    Ok(crate::plan::containers::sidecar(
        env,
        spec.image,
        spec.internal,
        internal_ip,
        &text,
        &spec_digest(&spec)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_in_subnets() {
        assert_eq!(
            host_in("172.20.0.0/16", 2),
            Some(Ipv4Addr::new(172, 20, 0, 2))
        );
        assert_eq!(host_in("10.0.5.0/24", 2), Some(Ipv4Addr::new(10, 0, 5, 2)));
        assert_eq!(host_in("10.0.5.0/31", 2), None);
        assert_eq!(host_in("nonsense", 2), None);
    }

    /// What the runtime writes, the sidecar reads back field for field, and accepts.
    fn read_by_the_sidecar(config: &SidecarConfig) -> af_egress::LoadedConfig {
        let text = config.to_text().unwrap();
        let loaded = af_egress::parse_config(&text, std::path::Path::new("/"))
            .unwrap_or_else(|problems| panic!("the sidecar refuses it: {problems:?}\n{text}"));
        assert_eq!(&loaded.config, config, "{text}");
        loaded
    }

    #[test]
    fn the_configuration_round_trips_through_the_sidecars_own_parser() {
        let env = EnvironmentId::derive("shop", "main");
        let policy = EgressPolicy {
            allow: vec![af_manifest::parse_host_rule("api.stripe.com").unwrap()],
            ..EgressPolicy::default()
        };
        let webhooks = [("web".to_string(), 8080)];
        let relay = Relay {
            host: "db.staging.example.com".into(),
            port: 6543,
            listen_port: 6543,
            named_by: Some("database.host".into()),
        };
        let mut spec = SidecarSpec {
            image: "engine",
            internal: "internal",
            egress: "egress",
            policy: &policy,
            webhooks: &webhooks,
            capture_ca: None,
            relay: Some(&relay),
        };
        let internal_ip = Ipv4Addr::new(172, 20, 0, 2);
        let config = config(&env, &spec, internal_ip, "0123456789abcdef0123");
        let loaded = read_by_the_sidecar(&config);
        assert_eq!(loaded.control_token, "0123456789abcdef0123");
        assert_eq!(
            loaded.config.control.workload_addresses,
            [IpAddr::V4(internal_ip)]
        );
        assert_eq!(loaded.config.webhooks["web"], "web:8080");
        assert_eq!(
            loaded.config.relays[0].listen,
            SocketAddr::from((internal_ip, 6543)),
            "the relay listens on the services' side only"
        );
        assert_eq!(
            loaded.config.relays[0].named_by.as_deref(),
            Some("database.host")
        );
        assert!(loaded.capture_ca.is_none());

        let ca = CaptureCa {
            volume: "v".into(),
            pem: af_sidecar_api::new_ca(env.as_str()).unwrap(),
            with_system_store: true,
        };
        spec.capture_ca = Some(&ca);
        spec.relay = None;
        let config = super::config(&env, &spec, internal_ip, "0123456789abcdef0123");
        assert!(config.relays.is_empty());
        assert!(
            read_by_the_sidecar(&config).capture_ca.is_some(),
            "the sidecar loads the CA"
        );
    }
}
