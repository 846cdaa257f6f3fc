//! The sidecar's configuration: one file (the Secret's content on Kubernetes), read and validated
//! before anything is served. A sidecar that cannot load its configuration serves nothing: it is
//! the environment's only way out, and a half-configured way out is worse than none.

//!
//! The file's shape is [`af_sidecar_api::config`], the one definition the runtimes write; what
//! is checked here is what the sidecar will accept of it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use af_runtime::{RuntimeError, RuntimeErrorKind};
pub use af_sidecar_api::config::*;

use crate::tls_capture::CaptureCa;

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
    let mut problems = problems(&config);
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

/// Everything wrong with the configuration's values, in words.
fn problems(config: &SidecarConfig) -> Vec<String> {
    let mut problems = Vec::new();
    let listen = &config.listen;
    if config.environment.trim().is_empty() {
        problems.push("environment is empty".to_string());
    }
    if listen.proxy.is_none()
        && listen.http.is_none()
        && listen.tls.is_none()
        && listen.dns.is_none()
        && listen.smtp.is_empty()
        && listen.smtps.is_empty()
        && config.relays.is_empty()
    {
        problems.push(
            "listen names no listener; a sidecar that listens nowhere serves no one".to_string(),
        );
    }
    match (&listen.dns, &config.dns) {
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
    if config
        .control
        .workload_addresses
        .contains(&config.control.listen.ip())
    {
        problems.push(format!(
                "control.listen {} is one of the workload addresses; the control API must not be reachable from workloads",
                config.control.listen
            ));
    }
    let mut ports: Vec<SocketAddr> = [
        listen.proxy,
        listen.http,
        listen.tls,
        Some(config.control.listen),
    ]
    .into_iter()
    .flatten()
    .chain(listen.smtp.iter().copied())
    .chain(listen.smtps.iter().copied())
    .chain(config.relays.iter().map(|relay| relay.listen))
    .collect();
    ports.sort();
    for pair in ports.windows(2) {
        if pair[0] == pair[1] {
            problems.push(format!("{} is used by two TCP listeners", pair[0]));
        }
    }
    if config.log.max_bytes < 64 << 10 {
        problems
            .push("log.max_bytes is below 64 KiB; the ring would hold almost nothing".to_string());
    }
    if config.limits.max_connections == 0 {
        problems.push(
            "limits.max_connections is 0; the sidecar would accept no workload's connection"
                .to_string(),
        );
    }
    if config.limits.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
        problems.push(format!(
            "limits.max_connections is {}; at most {} can be counted",
            config.limits.max_connections,
            tokio::sync::Semaphore::MAX_PERMITS
        ));
    }
    let resolver = &config.resolver;
    if resolver.cache_min_ttl_seconds > resolver.cache_max_ttl_seconds {
        problems.push(format!(
                "resolver.cache_min_ttl_seconds ({}) is above resolver.cache_max_ttl_seconds ({}); the floor must be at most the ceiling",
                resolver.cache_min_ttl_seconds, resolver.cache_max_ttl_seconds
            ));
    }
    if config.limits.worker_threads == 0 {
        problems.push(
            "limits.worker_threads is 0; the sidecar needs at least one thread to serve"
                .to_string(),
        );
    }
    if config.limits.upstream_read_timeout_ms == 0 {
        problems.push(
            "limits.upstream_read_timeout_ms is 0; every origin would time out before it answers"
                .to_string(),
        );
    }
    if config.inbox.max_entries == 0 {
        problems
            .push("inbox.max_entries is 0; captured requests would be lost at once".to_string());
    }
    if config.limits.max_mail_bytes_in_flight < config.limits.max_mail_bytes {
        problems.push(format!(
                "limits.max_mail_bytes_in_flight ({}) is below limits.max_mail_bytes ({}); a message of the largest size accepted would never fit",
                config.limits.max_mail_bytes_in_flight, config.limits.max_mail_bytes
            ));
    }
    if config.limits.max_capture_bytes_in_flight < config.inbox.max_body_bytes {
        problems.push(format!(
                "limits.max_capture_bytes_in_flight ({}) is below inbox.max_body_bytes ({}); a captured body of the largest size kept would never fit",
                config.limits.max_capture_bytes_in_flight, config.inbox.max_body_bytes
            ));
    }
    if config.inbox.max_bytes < config.inbox.max_body_bytes {
        problems.push(format!(
                "inbox.max_bytes ({}) is below inbox.max_body_bytes ({}); an entry with a whole body would not fit",
                config.inbox.max_bytes, config.inbox.max_body_bytes
            ));
    }
    for relay in &config.relays {
        if crate::policy::Target::parse(&relay.host).is_none() {
            problems.push(format!(
                "relays: {:?} is not a host name or an IP address",
                relay.host
            ));
        }
        if relay.port == 0 {
            problems.push(format!("relays: {} has port 0 to relay to", relay.host));
        }
        if relay
            .named_by
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            problems.push(format!(
                "relays: {} has an empty named_by; leave it out to let the policy decide",
                relay.host
            ));
        }
    }
    for (service, target) in &config.webhooks {
        let port = target
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok());
        if port.is_none() {
            problems.push(format!("webhooks.{service} {target:?} is not host:port"));
        }
    }
    problems
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
    fn a_relay_needs_a_host_a_port_and_a_listener_of_its_own() {
        let loaded = parse_config(
            &format!("{MINIMAL}relays:\n- {{listen: 127.0.0.1:5432, host: db.example.com, port: 6543, named_by: database.host}}\n"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(loaded.config.relays[0].port, 6543);
        refuses(
            "relays:\n- {listen: 127.0.0.1:5432, host: \"db example\", port: 5432}\n",
            "not a host name or an IP address",
        );
        refuses(
            "relays:\n- {listen: 127.0.0.1:5432, host: db.example.com, port: 0}\n",
            "port 0",
        );
        refuses(
            "relays:\n- {listen: 127.0.0.1:3128, host: db.example.com, port: 5432}\n",
            "127.0.0.1:3128 is used by two TCP listeners",
        );
        refuses(
            "relays:\n- {listen: 127.0.0.1:5432, host: db.example.com, port: 5432, named_by: \" \"}\n",
            "empty named_by",
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
            af_sidecar_api::new_ca("shop-main").unwrap();
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
        let err = parse_config(
            &format!(
                "{MINIMAL}tls_capture: {{ca_cert: {}, ca_key: {}}}\n",
                yaml(&cert),
                yaml(&af_sidecar_api::new_ca("other").unwrap().key)
            ),
            Path::new("."),
        )
        .unwrap_err();
        assert!(err[0].starts_with("tls_capture: "), "{err:?}");
    }
}
