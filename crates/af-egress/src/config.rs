//! The sidecar's configuration: one file (the Secret's content on Kubernetes), read and validated
//! before anything is served. A sidecar that cannot load its configuration serves nothing: it is
//! the environment's only way out, and a half-configured way out is worse than none.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use af_manifest::EgressPolicy;
use af_runtime::{RuntimeError, RuntimeErrorKind};
use serde::Deserialize;

use crate::tls_capture::CaptureCa;

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarConfig {
    /// The environment id, written into every decision record.
    pub environment: String,
    /// What may leave: the manifest's `egress` section, in the manifest's spelling.
    #[serde(default)]
    pub policy: EgressPolicy,
    pub listen: Listeners,
    /// The DNS responder; required when `listen.dns` is set.
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
    pub tls_capture: Option<TlsCaptureConfig>,
}

/// The capture CA, each half inline (the Secret's content) or in a file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCaptureConfig {
    pub ca_cert: Option<String>,
    pub ca_cert_file: Option<PathBuf>,
    pub ca_key: Option<String>,
    pub ca_key_file: Option<PathBuf>,
}

/// Where the sidecar listens. Every listener is optional, so the same binary serves as an
/// environment's sidecar (all of them) and as an afe ticket pod's allowlist proxy (only `proxy`, on
/// 127.0.0.1:3128).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listeners {
    /// Forward proxy: absolute-form HTTP requests and CONNECT.
    pub proxy: Option<SocketAddr>,
    /// Transparent HTTP: clients that resolved an outside name to the sidecar and connected to
    /// port 80 themselves; decided by the Host header.
    pub http: Option<SocketAddr>,
    /// Transparent TLS: the same on port 443; decided by the ClientHello's server name.
    pub tls: Option<SocketAddr>,
    /// The DNS responder, UDP and TCP on the same address.
    pub dns: Option<SocketAddr>,
    /// SMTP sinks (usually 25 and 587).
    #[serde(default)]
    pub smtp: Vec<SocketAddr>,
    /// SMTP sinks over implicit TLS (SMTPS, usually 465): answered behind the capture CA.
    #[serde(default)]
    pub smtps: Vec<SocketAddr>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    /// The sidecar's own IPv4 address as workloads reach it: the answer for every outside name.
    pub answer_v4: Option<Ipv4Addr>,
    /// The same for IPv6; without it AAAA queries for outside names get an empty answer.
    pub answer_v6: Option<Ipv6Addr>,
    /// Names inside the environment (service names), forwarded to `upstream`.
    #[serde(default)]
    pub internal_names: Vec<String>,
    /// Suffixes inside the environment (`svc.cluster.local`), forwarded to `upstream`.
    #[serde(default)]
    pub internal_suffixes: Vec<String>,
    /// The platform's resolver, for internal names only.
    pub upstream: Option<SocketAddr>,
    /// TTL of the sidecar's own answers, seconds. Short, so a client re-asks soon.
    #[serde(default = "default_dns_ttl")]
    pub ttl: u32,
}

fn default_dns_ttl() -> u32 {
    5
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    pub listen: SocketAddr,
    /// The per-environment bearer token, inline (the Secret's content) ...
    pub token: Option<String>,
    /// ... or in a file.
    pub token_file: Option<PathBuf>,
    /// The sidecar's addresses on the workloads' network. A control connection that arrives on
    /// one of them is closed before a byte is read, whatever `listen` says.
    #[serde(default)]
    pub workload_addresses: Vec<IpAddr>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// The decision log; `<path>.1` holds the previous half of the ring.
    pub path: PathBuf,
    /// The most the log may take on disk, both halves together.
    #[serde(default = "default_log_bytes")]
    pub max_bytes: u64,
}

fn default_log_bytes() -> u64 {
    16 << 20
}

#[derive(Clone, Debug, Deserialize)]
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
#[derive(Clone, Debug, Deserialize)]
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
#[derive(Clone, Debug, Deserialize)]
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

/// A configuration that was read and checked, with its control token and capture CA loaded.
#[derive(Clone, Debug)]
pub struct LoadedConfig {
    pub config: SidecarConfig,
    pub control_token: String,
    pub capture_ca: Option<Arc<CaptureCa>>,
}

/// Reads, parses and validates a configuration file. Every problem is reported at once, as the
/// AF-RUN-050 error.
pub fn load_config(path: &Path) -> Result<LoadedConfig, RuntimeError> {
    let invalid = |problems: Vec<String>| -> RuntimeError {
        RuntimeErrorKind::SidecarConfigInvalid {
            file: path.display().to_string(),
            problems,
        }
        .into()
    };
    let text = std::fs::read_to_string(path)
        .map_err(|err| invalid(vec![format!("cannot read it: {err}")]))?;
    parse_config(&text, path.parent().unwrap_or(Path::new("."))).map_err(invalid)
}

/// Parses and validates configuration text; relative `token_file` paths are read from `base`.
pub fn parse_config(text: &str, base: &Path) -> Result<LoadedConfig, Vec<String>> {
    let config: SidecarConfig =
        serde_saphyr::from_str(text).map_err(|err| vec![format!("{}", err.without_snippet())])?;
    let mut problems = config.problems();
    let token = inline_or_file(
        ("control.token", &config.control.token),
        ("control.token_file", &config.control.token_file),
        base,
        &mut problems,
    )
    .map(|token| token.trim().to_string());
    if let Some(token) = &token
        && token.len() < 16
    {
        problems
            .push("the control token is shorter than 16 characters; use a random one".to_string());
    }
    let capture_ca = config.tls_capture.as_ref().and_then(|tls| {
        let cert = inline_or_file(
            ("tls_capture.ca_cert", &tls.ca_cert),
            ("tls_capture.ca_cert_file", &tls.ca_cert_file),
            base,
            &mut problems,
        )?;
        let key = inline_or_file(
            ("tls_capture.ca_key", &tls.ca_key),
            ("tls_capture.ca_key_file", &tls.ca_key_file),
            base,
            &mut problems,
        )?;
        CaptureCa::load(&cert, &key)
            .map_err(|err| problems.push(format!("tls_capture: {err}")))
            .ok()
    });
    match token {
        Some(control_token) if problems.is_empty() => Ok(LoadedConfig {
            config,
            control_token,
            capture_ca: capture_ca.map(Arc::new),
        }),
        _ => Err(problems),
    }
}

/// A value given either inline or as a file (read from `base` when relative), exactly one of them.
fn inline_or_file(
    (inline_key, inline): (&str, &Option<String>),
    (file_key, file): (&str, &Option<PathBuf>),
    base: &Path,
    problems: &mut Vec<String>,
) -> Option<String> {
    match (inline, file) {
        (Some(value), None) => Some(value.clone()),
        (None, Some(file)) => std::fs::read_to_string(base.join(file))
            .map_err(|err| problems.push(format!("{file_key} {}: {err}", file.display())))
            .ok(),
        _ => {
            problems.push(format!(
                "needs exactly one of `{inline_key}` and `{file_key}`"
            ));
            None
        }
    }
}

impl SidecarConfig {
    /// Everything wrong with the configuration's values, in words.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let listen = &self.listen;
        if self.environment.trim().is_empty() {
            problems.push("environment is empty".to_string());
        }
        if listen.proxy.is_none()
            && listen.http.is_none()
            && listen.tls.is_none()
            && listen.dns.is_none()
            && listen.smtp.is_empty()
            && listen.smtps.is_empty()
        {
            problems.push(
                "listen names no listener; a sidecar that listens nowhere serves no one"
                    .to_string(),
            );
        }
        match (&listen.dns, &self.dns) {
            (Some(_), None) => {
                problems.push("listen.dns is set but the `dns` section is missing".to_string())
            }
            (Some(_), Some(dns)) => {
                if dns.answer_v4.is_none() && dns.answer_v6.is_none() {
                    problems.push("dns needs answer_v4 or answer_v6: the sidecar's address that outside names resolve to".to_string());
                }
                for name in dns.internal_names.iter().chain(&dns.internal_suffixes) {
                    if crate::dns::internal_name(name).is_none() {
                        problems.push(format!(
                            "dns names {name:?} as internal, which is not a host name (labels of letters, digits, `-` and `_`, joined by dots)"
                        ));
                    }
                }
                if (!dns.internal_names.is_empty() || !dns.internal_suffixes.is_empty())
                    && dns.upstream.is_none()
                {
                    problems.push(
                        "dns names internal names or suffixes but no upstream to forward them to"
                            .to_string(),
                    );
                }
            }
            (None, _) => {}
        }
        if self
            .control
            .workload_addresses
            .contains(&self.control.listen.ip())
        {
            problems.push(format!(
                "control.listen {} is one of the workload addresses; the control API must not be reachable from workloads",
                self.control.listen
            ));
        }
        let mut ports: Vec<SocketAddr> = [
            listen.proxy,
            listen.http,
            listen.tls,
            Some(self.control.listen),
        ]
        .into_iter()
        .flatten()
        .chain(listen.smtp.iter().copied())
        .chain(listen.smtps.iter().copied())
        .collect();
        ports.sort();
        for pair in ports.windows(2) {
            if pair[0] == pair[1] {
                problems.push(format!("{} is used by two TCP listeners", pair[0]));
            }
        }
        if self.log.max_bytes < 64 << 10 {
            problems.push(
                "log.max_bytes is below 64 KiB; the ring would hold almost nothing".to_string(),
            );
        }
        if self.limits.max_connections == 0 {
            problems.push(
                "limits.max_connections is 0; the sidecar would accept no workload's connection"
                    .to_string(),
            );
        }
        if self.limits.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            problems.push(format!(
                "limits.max_connections is {}; at most {} can be counted",
                self.limits.max_connections,
                tokio::sync::Semaphore::MAX_PERMITS
            ));
        }
        let resolver = &self.resolver;
        if resolver.cache_min_ttl_seconds > resolver.cache_max_ttl_seconds {
            problems.push(format!(
                "resolver.cache_min_ttl_seconds ({}) is above resolver.cache_max_ttl_seconds ({}); the floor must be at most the ceiling",
                resolver.cache_min_ttl_seconds, resolver.cache_max_ttl_seconds
            ));
        }
        if self.limits.worker_threads == 0 {
            problems.push(
                "limits.worker_threads is 0; the sidecar needs at least one thread to serve"
                    .to_string(),
            );
        }
        if self.limits.upstream_read_timeout_ms == 0 {
            problems.push(
                "limits.upstream_read_timeout_ms is 0; every origin would time out before it answers"
                    .to_string(),
            );
        }
        if self.inbox.max_entries == 0 {
            problems.push(
                "inbox.max_entries is 0; captured requests would be lost at once".to_string(),
            );
        }
        if self.limits.max_mail_bytes_in_flight < self.limits.max_mail_bytes {
            problems.push(format!(
                "limits.max_mail_bytes_in_flight ({}) is below limits.max_mail_bytes ({}); a message of the largest size accepted would never fit",
                self.limits.max_mail_bytes_in_flight, self.limits.max_mail_bytes
            ));
        }
        if self.limits.max_capture_bytes_in_flight < self.inbox.max_body_bytes {
            problems.push(format!(
                "limits.max_capture_bytes_in_flight ({}) is below inbox.max_body_bytes ({}); a captured body of the largest size kept would never fit",
                self.limits.max_capture_bytes_in_flight, self.inbox.max_body_bytes
            ));
        }
        if self.inbox.max_bytes < self.inbox.max_body_bytes {
            problems.push(format!(
                "inbox.max_bytes ({}) is below inbox.max_body_bytes ({}); an entry with a whole body would not fit",
                self.inbox.max_bytes, self.inbox.max_body_bytes
            ));
        }
        for (service, target) in &self.webhooks {
            let port = target
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse::<u16>().ok());
            if port.is_none() {
                problems.push(format!("webhooks.{service} {target:?} is not host:port"));
            }
        }
        problems
    }
}

/// The capture CA written inline in a configuration's text (the one a runtime wrote before), so a
/// runtime keeps the CA its services already trust; `None` when there is none or the text does not
/// parse.
pub fn inline_capture_ca(text: &str) -> Option<af_runtime::capture_trust::CaptureCaPem> {
    let config: SidecarConfig = serde_saphyr::from_str(text).ok()?;
    let tls = config.tls_capture?;
    Some(af_runtime::capture_trust::CaptureCaPem {
        cert: tls.ca_cert?,
        key: tls.ca_key?,
    })
}

/// A control token nobody can guess: 32 hex digits from the kernel's random source. Each runtime
/// makes one per environment and puts it in the sidecar's configuration.
pub fn new_control_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "environment: shop-main\nlisten: {proxy: 127.0.0.1:3128}\ncontrol: {listen: 127.0.0.1:9901, token: 0123456789abcdef}\nlog: {path: /tmp/x.jsonl}\n";

    /// Asserts that the minimal configuration with `extra` lines is refused, one problem naming
    /// `problem`.
    fn refuses(extra: &str, problem: &str) {
        let problems = parse_config(&format!("{MINIMAL}{extra}"), Path::new(".")).unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains(problem)),
            "{problem:?} not among {problems:?}"
        );
    }

    #[test]
    fn a_minimal_allowlist_proxy_configuration() {
        let loaded = parse_config(
            &format!("{MINIMAL}policy:\n  allow: [pypi.org, \"*.pythonhosted.org\"]\n"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(loaded.control_token, "0123456789abcdef");
        assert_eq!(loaded.config.policy.allow.len(), 2);
        assert!(loaded.config.policy.capture.is_empty());
        assert_eq!(loaded.config.limits.max_header_bytes, 64 << 10);
        assert_eq!(loaded.config.limits.worker_threads, 2);
    }

    #[test]
    fn the_runtime_takes_the_configured_threads_but_never_more_than_the_cores() {
        let limits = |worker_threads| Limits {
            worker_threads,
            ..Limits::default()
        };
        assert_eq!(limits(2).workers_for(64), 2);
        assert_eq!(limits(2).workers_for(1), 1);
        assert_eq!(limits(8).workers_for(4), 4);
        assert_eq!(limits(8).workers_for(16), 8);
        refuses(
            "limits: {worker_threads: 0}\n",
            "limits.worker_threads is 0",
        );
        refuses(
            "limits: {upstream_read_timeout_ms: 0}\n",
            "limits.upstream_read_timeout_ms is 0",
        );
    }

    #[test]
    fn the_inbox_and_mail_in_flight_are_bounded_by_bytes_that_hold_at_least_one_whole_item() {
        let loaded = parse_config(MINIMAL, Path::new(".")).unwrap();
        assert_eq!(loaded.config.inbox.max_bytes, 32 << 20);
        refuses(
            "inbox: {max_body_bytes: 1048576, max_bytes: 65536}\n",
            "inbox.max_bytes (65536) is below inbox.max_body_bytes (1048576)",
        );
        refuses(
            "limits: {max_mail_bytes: 2000, max_mail_bytes_in_flight: 1000}\n",
            "limits.max_mail_bytes_in_flight (1000) is below limits.max_mail_bytes (2000)",
        );
        refuses(
            "limits: {max_capture_bytes_in_flight: 1000}\ninbox: {max_body_bytes: 2000}\n",
            "limits.max_capture_bytes_in_flight (1000) is below inbox.max_body_bytes (2000)",
        );
    }

    #[test]
    fn connections_are_admitted_up_to_a_limit_that_admits_some() {
        let loaded = parse_config(MINIMAL, Path::new(".")).unwrap();
        assert_eq!(loaded.config.limits.max_connections, 1024);
        refuses(
            "limits: {max_connections: 0}\n",
            "limits.max_connections is 0",
        );
    }

    #[test]
    fn the_resolver_cache_keeps_answers_for_their_ttl_between_a_floor_and_a_ceiling() {
        let loaded = parse_config(MINIMAL, Path::new(".")).unwrap();
        let resolver = &loaded.config.resolver;
        assert_eq!(
            (
                resolver.cache_min_ttl_seconds,
                resolver.cache_max_ttl_seconds,
                resolver.cache_entries
            ),
            (5, 300, 1024)
        );
        refuses(
            "resolver: {cache_min_ttl_seconds: 60, cache_max_ttl_seconds: 30}\n",
            "resolver.cache_min_ttl_seconds (60) is above resolver.cache_max_ttl_seconds (30)",
        );
    }

    #[test]
    fn internal_dns_names_must_be_host_names() {
        let text = MINIMAL.replace(
            "listen: {proxy: 127.0.0.1:3128}",
            "listen: {dns: 127.0.0.1:53}\ndns: {answer_v4: 10.0.0.2, upstream: 10.0.0.53:53, internal_names: [web], internal_suffixes: ['a b.local']}",
        );
        let problems = parse_config(&text, Path::new(".")).unwrap_err();
        assert_eq!(
            problems,
            [
                "dns names \"a b.local\" as internal, which is not a host name (labels of letters, digits, `-` and `_`, joined by dots)"
            ]
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = "environment: ''\nlisten: {dns: 127.0.0.1:53}\ndns: {internal_names: [web]}\ncontrol: {listen: 10.0.0.2:9901, token: short, workload_addresses: [10.0.0.2]}\nlog: {path: /tmp/x, max_bytes: 10}\nwebhooks: {web: nowhere}\n";
        let problems = parse_config(text, Path::new(".")).unwrap_err();
        let all = problems.join("\n");
        for expected in [
            "environment is empty",
            "answer_v4",
            "no upstream",
            "workload addresses",
            "64 KiB",
            "not host:port",
            "shorter than 16",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
        }
    }

    #[test]
    fn unknown_keys_and_bad_rules_are_refused() {
        let err = parse_config(&format!("{MINIMAL}surprise: 1\n"), Path::new(".")).unwrap_err();
        assert!(err[0].contains("surprise"), "{err:?}");
        let err = parse_config(
            &format!("{MINIMAL}policy: {{allow: [\"*\"]}}\n"),
            Path::new("."),
        )
        .unwrap_err();
        assert!(err[0].contains("everything"), "{err:?}");
    }

    #[test]
    fn a_capture_ca_that_cannot_work_stops_the_sidecar_from_starting() {
        let err = parse_config(
            &format!("{MINIMAL}tls_capture: {{ca_cert: x}}\n"),
            Path::new("."),
        )
        .unwrap_err();
        assert!(
            err.iter()
                .any(|p| p.contains("`tls_capture.ca_key` and `tls_capture.ca_key_file`")),
            "{err:?}"
        );
        let err = parse_config(
            &format!("{MINIMAL}tls_capture: {{ca_cert: x, ca_key_file: /nonexistent/ca.key}}\n"),
            Path::new("."),
        )
        .unwrap_err();
        assert!(
            err.iter().any(|p| p.contains("/nonexistent/ca.key")),
            "{err:?}"
        );
        let af_runtime::capture_trust::CaptureCaPem { cert, key } =
            crate::tls_capture::new_ca("shop-main").unwrap();
        let yaml = |pem: &str| serde_json::to_string(pem).unwrap();
        let loaded = parse_config(
            &format!(
                "{MINIMAL}tls_capture: {{ca_cert: {}, ca_key: {}}}\n",
                yaml(&cert),
                yaml(&key)
            ),
            Path::new("."),
        )
        .unwrap();
        assert!(loaded.capture_ca.is_some());
        let written = inline_capture_ca(&format!(
            "{MINIMAL}tls_capture: {{ca_cert: {}, ca_key: {}}}\n",
            yaml(&cert),
            yaml(&key)
        ))
        .unwrap();
        assert_eq!((written.cert, written.key), (cert.clone(), key.clone()));
        assert!(inline_capture_ca(MINIMAL).is_none());
        let err = parse_config(
            &format!(
                "{MINIMAL}tls_capture: {{ca_cert: {}, ca_key: {}}}\n",
                yaml(&cert),
                yaml(&crate::tls_capture::new_ca("other").unwrap().key)
            ),
            Path::new("."),
        )
        .unwrap_err();
        assert!(err[0].starts_with("tls_capture: "), "{err:?}");
    }
}
