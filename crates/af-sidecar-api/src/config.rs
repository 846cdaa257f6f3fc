//! The sidecar's configuration file, as one type: the runtimes build it and write it, the sidecar
//! (`af-proxy serve`) reads it and checks it before it serves anything. Nothing here validates;
//! the sidecar does (af-egress), and refuses a file it cannot trust.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use af_manifest::{EgressPolicy, HostRule};
use serde::{Deserialize, Serialize};

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarConfig {
    /// The environment id, written into every decision record.
    pub environment: String,
    /// What may leave: the manifest's `egress` section, in the manifest's spelling.
    #[serde(default)]
    pub policy: EgressPolicy,
    pub listen: Listeners,
    /// The DNS responder; required when `listen.dns` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsConfig>,
    pub control: ControlConfig,
    pub log: LogConfig,
    #[serde(default)]
    pub inbox: InboxConfig,
    #[serde(default)]
    pub resolver: ResolverConfig,
    /// Services a webhook can be delivered to: name → `host:port` inside the environment.
    #[serde(default)]
    pub webhooks: BTreeMap<String, String>,
    #[serde(default)]
    pub limits: Limits,
    /// HTTPS capture: the environment's capture CA. Without it, a captured host reached over TLS
    /// is refused (and recorded); with it, the sidecar answers it behind a certificate the CA signs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_capture: Option<TlsCaptureConfig>,
    /// TCP relays to fixed destinations (an external database): each connection is decided,
    /// relayed byte for byte and recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relays: Vec<RelayConfig>,
}

/// A TCP relay: a workload's connection to `listen` is relayed to `host:port`, a destination the
/// runtime fixed (the workload never names it), after the decision. The bytes are relayed as they
/// are: TLS inside them is not terminated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    pub listen: SocketAddr,
    /// A host name or an IP literal.
    pub host: String,
    pub port: u16,
    /// Set when the manifest names this host for this relay (`database.host`): then it is allowed
    /// without an egress rule, at any address but the machine's own, link-local and multicast
    /// ones, and the record's rule is this text. Unset, the egress policy decides the host as it
    /// decides any other, addresses included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named_by: Option<String>,
}

/// The capture CA, each half inline (the Secret's content) or in a file. Its `Debug` never shows
/// the key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCaptureConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_key_file: Option<PathBuf>,
}

/// Where the sidecar listens. Every listener is optional, so the same binary serves as an
/// environment's sidecar (all of them) and as an afe ticket pod's allowlist proxy (only `proxy`, on
/// 127.0.0.1:3128).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listeners {
    /// Forward proxy: absolute-form HTTP requests and CONNECT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<SocketAddr>,
    /// Transparent HTTP: clients that resolved an outside name to the sidecar and connected to
    /// port 80 themselves; decided by the Host header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<SocketAddr>,
    /// Transparent TLS: the same on port 443; decided by the ClientHello's server name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<SocketAddr>,
    /// The DNS responder, UDP and TCP on the same address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<SocketAddr>,
    /// SMTP sinks (usually 25 and 587).
    #[serde(default)]
    pub smtp: Vec<SocketAddr>,
    /// SMTP sinks over implicit TLS (SMTPS, usually 465): answered behind the capture CA.
    #[serde(default)]
    pub smtps: Vec<SocketAddr>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    /// The sidecar's own IPv4 address as workloads reach it: the answer for every outside name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_v4: Option<Ipv4Addr>,
    /// The same for IPv6; without it AAAA queries for outside names get an empty answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_v6: Option<Ipv6Addr>,
    /// Names inside the environment (service names), forwarded to `upstream`.
    #[serde(default)]
    pub internal_names: Vec<String>,
    /// Suffixes inside the environment (`svc.cluster.local`), forwarded to `upstream`.
    #[serde(default)]
    pub internal_suffixes: Vec<String>,
    /// The platform's resolver, for internal names only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<SocketAddr>,
    /// TTL of the sidecar's own answers, seconds. Short, so a client re-asks soon.
    #[serde(default = "default_dns_ttl")]
    pub ttl: u32,
}

pub fn default_dns_ttl() -> u32 {
    5
}

/// The control API. Its `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    pub listen: SocketAddr,
    /// The per-environment bearer token, inline (the Secret's content) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// ... or in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The sidecar's addresses on the workloads' network. A control connection that arrives on
    /// one of them is closed before a byte is read, whatever `listen` says.
    #[serde(default)]
    pub workload_addresses: Vec<IpAddr>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// The decision log; `<path>.1` holds the previous half of the ring.
    pub path: PathBuf,
    /// The most the log may take on disk, both halves together.
    #[serde(default = "default_log_bytes")]
    pub max_bytes: u64,
}

pub fn default_log_bytes() -> u64 {
    16 << 20
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InboxConfig {
    /// Oldest entries are dropped past this many.
    pub max_entries: usize,
    /// Bodies (of requests and of mail) are cut at this many bytes (the entry says so).
    pub max_body_bytes: usize,
    /// Oldest entries are dropped while the entries held take more than this many bytes: the
    /// inbox lives in the sidecar's memory, and whatever a workload sends to a captured host
    /// must not be able to grow it past a bound the sidecar's memory limit was set for.
    pub max_bytes: usize,
}

impl Default for InboxConfig {
    fn default() -> Self {
        InboxConfig {
            max_entries: 1000,
            max_body_bytes: 256 << 10,
            max_bytes: 32 << 20,
        }
    }
}

/// How the sidecar resolves allowed names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResolverConfig {
    /// Fixed answers, consulted first (a name → its addresses).
    pub static_hosts: BTreeMap<String, Vec<IpAddr>>,
    /// A nameserver's answer is kept for its TTL, but at least this long, seconds.
    pub cache_min_ttl_seconds: u64,
    /// ... and at most this long, seconds.
    pub cache_max_ttl_seconds: u64,
    /// Names kept at most (each a few hundred bytes).
    pub cache_entries: usize,
    /// The platform's resolvers for the sidecar's own lookups; default: those of /etc/resolv.conf.
    pub nameservers: Vec<SocketAddr>,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        ResolverConfig {
            static_hosts: BTreeMap::new(),
            cache_min_ttl_seconds: 5,
            cache_max_ttl_seconds: 300,
            cache_entries: 1024,
            nameservers: Vec::new(),
        }
    }
}

/// Bounds that keep one slow or hostile client from holding the sidecar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// A client must send its whole request head within this (slowloris).
    pub header_read_timeout_ms: u64,
    /// The most a request head may take (a 10 MB header is refused).
    pub max_header_bytes: usize,
    /// A TLS client must send its ClientHello within this.
    pub client_hello_timeout_ms: u64,
    /// Connecting to an upstream.
    pub connect_timeout_ms: u64,
    /// An origin that sends nothing for this long while the sidecar waits for its answer (the
    /// head or more of the body) has its exchange ended: 504 before the head, a cut body after.
    pub upstream_read_timeout_ms: u64,
    /// An SMTP or DNS-over-TCP client idle for this long is dropped.
    pub idle_timeout_ms: u64,
    /// A forwarded internal DNS query waits this long for the platform's resolver.
    pub dns_forward_timeout_ms: u64,
    /// The largest mail message accepted.
    pub max_mail_bytes: usize,
    /// The most bytes of mail being received at once across all SMTP sessions (each message is
    /// held whole until it ends); a message that does not fit is answered 452, try again later.
    pub max_mail_bytes_in_flight: usize,
    /// The most bytes of captured requests' bodies being read at once across all connections
    /// (each is kept whole, up to `inbox.max_body_bytes`, until it is in the inbox); what does not
    /// fit is not kept, and the entry says it was cut.
    pub max_capture_bytes_in_flight: usize,
    /// The most threads the sidecar's async runtime runs on; never more than the cores it is
    /// given (a CPU limit counts). A sidecar sits beside a workload: by default it takes two, not
    /// one per core of the node, which on a large node would be dozens of threads and stacks, and
    /// contention on the image's one malloc arena (docs/sidecar.md, "Memory").
    pub worker_threads: usize,
    /// Workloads' connections open at once, on every listener together (a tunnel or upgraded
    /// connection counts for as long as it lasts; the control API does not count). At the limit
    /// the next connection waits in the kernel's backlog until one closes.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout_ms: 10_000,
            max_header_bytes: 64 << 10,
            client_hello_timeout_ms: 10_000,
            connect_timeout_ms: 10_000,
            // Squid's read_timeout: long enough for a slow report or a long poll.
            upstream_read_timeout_ms: 900_000,
            idle_timeout_ms: 60_000,
            dns_forward_timeout_ms: 2_000,
            max_mail_bytes: 10 << 20,
            max_mail_bytes_in_flight: 64 << 20,
            max_capture_bytes_in_flight: 32 << 20,
            worker_threads: 2,
            max_connections: 1024,
        }
    }
}

impl Limits {
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }
    pub fn client_hello_timeout(&self) -> Duration {
        Duration::from_millis(self.client_hello_timeout_ms)
    }
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }
    pub fn upstream_read_timeout(&self) -> Duration {
        Duration::from_millis(self.upstream_read_timeout_ms)
    }
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }
    pub fn dns_forward_timeout(&self) -> Duration {
        Duration::from_millis(self.dns_forward_timeout_ms)
    }
    /// The runtime's worker threads, given the cores available to the process.
    pub fn workers_for(&self, available_cores: usize) -> usize {
        self.worker_threads.min(available_cores).max(1)
    }
}

impl std::fmt::Debug for TlsCaptureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCaptureConfig")
            .field("ca_cert", &self.ca_cert)
            .field("ca_cert_file", &self.ca_cert_file)
            .field("ca_key", &self.ca_key.as_ref().map(|_| "(hidden)"))
            .field("ca_key_file", &self.ca_key_file)
            .finish()
    }
}

impl std::fmt::Debug for ControlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .field("token_file", &self.token_file)
            .field("workload_addresses", &self.workload_addresses)
            .finish()
    }
}

/// A configuration that could not be written as text or read from it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigTextError {
    #[error("writing the sidecar's configuration: {0}")]
    Write(String),
    #[error("reading the sidecar's configuration: {0}")]
    Read(String),
}

/// Where the decision log is kept in every sidecar af starts (a memory-backed directory).
pub const DECISION_LOG: &str = "/var/log/af/decisions.jsonl";

impl SidecarConfig {
    /// A sidecar for `environment` on `listen`, its control API as `control` says, its decision
    /// log at [`DECISION_LOG`]; nothing allowed or captured, every bound at its default.
    pub fn new(environment: &str, listen: Listeners, control: ControlConfig) -> SidecarConfig {
        SidecarConfig {
            environment: environment.to_string(),
            policy: EgressPolicy::default(),
            listen,
            dns: None,
            control,
            log: LogConfig::at(DECISION_LOG),
            inbox: InboxConfig::default(),
            resolver: ResolverConfig::default(),
            webhooks: BTreeMap::new(),
            limits: Limits::default(),
            tls_capture: None,
            relays: Vec::new(),
        }
    }

    /// The file's text, as `af-proxy serve` reads it (YAML).
    pub fn to_text(&self) -> Result<String, ConfigTextError> {
        serde_saphyr::to_string(self).map_err(|e| ConfigTextError::Write(e.to_string()))
    }

    /// A file's text read back as written, with its values unchecked: what a runtime wrote before
    /// (its token, its capture CA). Whether the sidecar would accept it is the sidecar's to say.
    pub fn from_text(text: &str) -> Result<SidecarConfig, ConfigTextError> {
        serde_saphyr::from_str(text)
            .map_err(|e| ConfigTextError::Read(e.without_snippet().to_string()))
    }

    /// The control token, when it is written inline (as every runtime writes it).
    pub fn inline_token(&self) -> Option<&str> {
        self.control.token.as_deref()
    }

    /// The capture CA, when both halves are written inline (as every runtime writes them), so a
    /// runtime keeps the CA its services already trust.
    pub fn inline_capture_ca(&self) -> Option<crate::CaptureCaPem> {
        let tls = self.tls_capture.as_ref()?;
        Some(crate::CaptureCaPem {
            cert: tls.ca_cert.clone()?,
            key: tls.ca_key.clone()?,
        })
    }

    /// The forward proxy of an afe ticket's sandbox: allowlist only (`allow`, the flow's
    /// `sandbox.egress`; nothing captured, no DNS responder, no transparent listeners), on
    /// loopback port 3128 where the sandbox's `HTTP_PROXY` points, its control API on loopback
    /// port 9901 behind `token`.
    pub fn allowlist_proxy(ticket: &str, allow: Vec<HostRule>, token: String) -> SidecarConfig {
        let mut config = SidecarConfig::new(
            ticket,
            Listeners {
                proxy: Some(SocketAddr::from((
                    Ipv4Addr::LOCALHOST,
                    ALLOWLIST_PROXY_PORT,
                ))),
                ..Listeners::default()
            },
            ControlConfig::inline(SocketAddr::from((Ipv4Addr::LOCALHOST, CONTROL_PORT)), token),
        );
        config.policy.allow = allow;
        config
    }
}

/// The forward proxy's port in an afe sandbox (seed 003).
pub const ALLOWLIST_PROXY_PORT: u16 = 3128;
/// The control API's port in every sidecar af starts.
pub const CONTROL_PORT: u16 = 9901;

impl TlsCaptureConfig {
    /// Both halves of `ca` inline.
    pub fn inline(ca: &crate::CaptureCaPem) -> TlsCaptureConfig {
        TlsCaptureConfig {
            ca_cert: Some(ca.cert.clone()),
            ca_cert_file: None,
            ca_key: Some(ca.key.clone()),
            ca_key_file: None,
        }
    }
}

impl DnsConfig {
    /// A responder that answers every outside name with `answer_v4`, forwarding nothing.
    pub fn answering(answer_v4: Option<Ipv4Addr>, answer_v6: Option<Ipv6Addr>) -> DnsConfig {
        DnsConfig {
            answer_v4,
            answer_v6,
            internal_names: Vec::new(),
            internal_suffixes: Vec::new(),
            upstream: None,
            ttl: default_dns_ttl(),
        }
    }
}

impl ControlConfig {
    /// The control API on `listen`, behind `token`, reachable from anywhere `listen` is.
    pub fn inline(listen: SocketAddr, token: String) -> ControlConfig {
        ControlConfig {
            listen,
            token: Some(token),
            token_file: None,
            workload_addresses: Vec::new(),
        }
    }
}

impl LogConfig {
    /// The decision log at `path`, of the default size.
    pub fn at(path: impl Into<PathBuf>) -> LogConfig {
        LogConfig {
            path: path.into(),
            max_bytes: default_log_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_secrets_never_show_in_debug() {
        let mut config = SidecarConfig::allowlist_proxy(
            "ticket-42",
            ["pypi.org", "*.pythonhosted.org"]
                .map(|rule| af_manifest::parse_host_rule(rule).unwrap())
                .into(),
            "0123456789abcdef0123456789abcdef".into(),
        );
        config.tls_capture = Some(TlsCaptureConfig::inline(&crate::CaptureCaPem {
            cert: "-----BEGIN CERTIFICATE-----\nx\n".into(),
            key: "-----BEGIN PRIVATE KEY-----\ny\n".into(),
        }));
        let text = config.to_text().unwrap();
        assert_eq!(SidecarConfig::from_text(&text).unwrap(), config, "{text}");
        assert_eq!(
            config.inline_token(),
            Some("0123456789abcdef0123456789abcdef")
        );
        assert_eq!(
            config.inline_capture_ca().unwrap().key,
            "-----BEGIN PRIVATE KEY-----\ny\n"
        );
        let debug = format!("{config:?}");
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    }

    #[test]
    fn a_file_with_unknown_keys_is_not_read() {
        let err = SidecarConfig::from_text("environment: e\nsurprise: 1\n").unwrap_err();
        assert!(err.to_string().contains("surprise"), "{err}");
    }
}
