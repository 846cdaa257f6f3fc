//! An external database (`database: {provider: external}`) as data: its URL read from af's
//! environment and checked, the sidecar's relay to it, and the connection string the services
//! get.
//!
//! How the services reach it. No service has a route to the database's host (containment stays as
//! it is); the sidecar listens on the database's port on the services' network and relays each
//! connection to the host and port of the URL, which af fixed — the services name nothing the
//! sidecar goes by. The services' connection string keeps the URL's host name: inside the
//! environment every outside name resolves to the sidecar (its DNS responder answers them all
//! with its own address), so that name already reaches the relay, and a TLS client still checks
//! the server's certificate against the database's real name (`sslmode=verify-full` works). An IP
//! literal cannot be answered by DNS, so the string names the sidecar's address instead; then
//! `verify-full` fails, since the certificate does not name the sidecar (`require` and
//! `verify-ca` do not check the name). The sidecar never terminates TLS: PostgreSQL's
//! SSLRequest and the handshake pass through it as bytes.

use std::net::Ipv4Addr;

use af_manifest::{EgressPolicy, HostRule, RuleMatch, parse_host_rule};
use af_runtime::{RuntimeError, RuntimeErrorKind};

/// PostgreSQL's port, when the URL names none.
pub const DEFAULT_PORT: u16 = 5432;

/// What the record of a relay the manifest named says decided it.
pub const NAMED_BY: &str = "database.host";

/// The external database's URL, read and checked. Its `Debug` shows the host and port only: the
/// URL carries the password.
#[derive(Clone)]
pub struct ExternalUrl {
    url: url::Url,
    /// The host as the sidecar decides it: a lower-case name, or an IP address without brackets.
    pub host: String,
    pub port: u16,
    /// The host is an IP literal (DNS cannot send it to the sidecar).
    pub literal: bool,
}

impl std::fmt::Debug for ExternalUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// Query parameters with which libpq would connect somewhere other than the URL's authority.
const REDIRECTING_PARAMETERS: [&str; 3] = ["host", "hostaddr", "port"];

/// Reads the URL held in `variable`. Every problem is said without quoting the URL (it holds the
/// password): AF-RUN-070.
pub fn parse_url(variable: &str, text: &str) -> Result<ExternalUrl, RuntimeError> {
    let refuse = |problem: &str| -> RuntimeError {
        RuntimeErrorKind::ExternalDatabaseUrl {
            variable: variable.to_string(),
            problem: problem.to_string(),
        }
        .into()
    };
    let text = text.trim();
    let authority = text
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
        .unwrap_or("");
    if authority.rsplit('@').next().unwrap_or("").contains(',') {
        return Err(refuse(
            "it names several hosts; the sidecar relays to one, so name the one this environment uses",
        ));
    }
    let url = url::Url::parse(text).map_err(|err| refuse(&format!("it is not a URL ({err})")))?;
    if !matches!(url.scheme(), "postgres" | "postgresql") {
        return Err(refuse(&format!(
            "its scheme is {:?}, not postgres or postgresql",
            url.scheme()
        )));
    }
    if let Some((key, _)) = url
        .query_pairs()
        .find(|(key, _)| REDIRECTING_PARAMETERS.contains(&key.as_ref()))
    {
        return Err(refuse(&format!(
            "its query sets `{key}`, which would send the client somewhere the sidecar does not relay to; put the host and port in the URL's authority"
        )));
    }
    let written = url.host_str().unwrap_or("");
    if written.is_empty() {
        return Err(refuse(
            "it names no host (a Unix socket is on this machine, not reachable from the environment)",
        ));
    }
    let bare = written
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(written);
    let host =
        one_host(bare).ok_or_else(|| refuse("its host is not a host name or an IP address"))?;
    let port = url.port().unwrap_or(DEFAULT_PORT);
    if port == 0 {
        return Err(refuse("its port is 0"));
    }
    Ok(ExternalUrl {
        literal: matches!(host, HostRule::Ip(_)),
        host: host.to_string(),
        port,
        url,
    })
}

/// `text` as one host the sidecar decides by: a lower-case name, or an IP address; `None` for
/// anything else (a wildcard, a network, not a host at all).
fn one_host(text: &str) -> Option<HostRule> {
    parse_host_rule(text)
        .ok()
        .filter(|rule| matches!(rule, HostRule::Exact(_) | HostRule::Ip(_)))
}

/// The sidecar's relay to the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    pub host: String,
    pub port: u16,
    /// Where the sidecar listens on the services' network: the database's own port, unless the
    /// sidecar already serves that port itself ([`crate::plan::sidecar::SERVED_PORTS`]).
    pub listen_port: u16,
    /// [`NAMED_BY`] when the manifest names the host; otherwise the egress policy decides it.
    pub named_by: Option<String>,
}

/// The relay for `url`, refused (AF-RUN-071) when the sidecar would refuse every connection: the
/// manifest names another host, or names none and the egress policy does not allow this one —
/// matched by the policy's own rule matching, as the sidecar matches it, so `af up` and the
/// sidecar never disagree on the rule (the sidecar still judges the addresses it resolves).
pub fn relay(
    variable: &str,
    url: &ExternalUrl,
    named: Option<&str>,
    policy: &EgressPolicy,
) -> Result<Relay, RuntimeError> {
    let refuse = |named: Option<&str>, reason: String| -> RuntimeError {
        RuntimeErrorKind::ExternalDatabaseHostNotAllowed {
            variable: variable.to_string(),
            host: url.host.clone(),
            named: named.map(str::to_string),
            reason,
        }
        .into()
    };
    let host = one_host(&url.host).ok_or_else(|| refuse(None, "invalid-host".into()))?;
    if let Some(named) = named
        && one_host(named).as_ref() != Some(&host)
    {
        return Err(refuse(Some(named), String::new()));
    }
    let named_by = named.map(|_| NAMED_BY);
    if named_by.is_none() {
        // What the sidecar's relay decides for a host the manifest does not name, by the same
        // matching; the reasons are spelled as its records spell them.
        let matched = match &host {
            HostRule::Ip(ip) => policy.match_address(*ip),
            _ => policy.match_name(&url.host),
        };
        let refused = match matched {
            RuleMatch::Allow { .. } => None,
            RuleMatch::Capture { .. } => Some("captured-host-not-relayed"),
            RuleMatch::NotListed => Some("not-listed"),
            RuleMatch::IpLiteral => Some("ip-literal"),
        };
        if let Some(reason) = refused {
            return Err(refuse(None, reason.to_string()));
        }
    }
    let listen_port = if crate::plan::sidecar::SERVED_PORTS.contains(&url.port) {
        DEFAULT_PORT
    } else {
        url.port
    };
    Ok(Relay {
        host: url.host.clone(),
        port: url.port,
        listen_port,
        named_by: named_by.map(str::to_string),
    })
}

/// An environment's external database: where the sidecar relays to, and the URL as read.
#[derive(Clone, Debug)]
pub struct External {
    /// The services' variable (`database.env`).
    pub variable: String,
    pub url: ExternalUrl,
    pub relay: Relay,
}

/// The manifest's external database, read from af's environment through `lookup` and checked
/// (AF-RUN-060 when the variable is not set, AF-RUN-070, AF-RUN-071); `None` without one.
pub fn wanted(
    manifest: &af_manifest::Manifest,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<External>, RuntimeError> {
    let Some(af_manifest::Database {
        provider: af_manifest::DatabaseProvider::External { url_from_env, host },
        env,
        ..
    }) = &manifest.database
    else {
        return Ok(None);
    };
    let text = lookup(url_from_env).ok_or_else(|| RuntimeErrorKind::EnvValueMissing {
        missing: vec![format!("the database's URL from {url_from_env}")],
    })?;
    let url = parse_url(url_from_env, &text)?;
    let relay = relay(url_from_env, &url, host.as_deref(), &manifest.egress)?;
    Ok(Some(External {
        variable: env.clone(),
        url,
        relay,
    }))
}

/// The connection string the services get: the URL as written — user, password, database and
/// parameters untouched — with its host the sidecar's address when it was an IP literal, and its
/// port the relay's.
pub fn services_url(url: &ExternalUrl, relay: &Relay, sidecar_ip: Ipv4Addr) -> String {
    let mut services = url.url.clone();
    if url.literal {
        // Cannot fail: the URL has a host already, so it can carry another.
        let _ = services.set_host(Some(&sidecar_ip.to_string()));
    }
    if relay.listen_port != url.port {
        let _ = services.set_port(Some(relay.listen_port));
    }
    services.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use af_manifest::parse_host_rule;

    const VAR: &str = "STAGING_DB";

    fn problem(text: &str) -> String {
        let err = parse_url(VAR, text).unwrap_err();
        assert_eq!(err.code().as_str(), "AF-RUN-070");
        let message = err.to_string();
        assert!(
            !message.contains("s3cret"),
            "the password is never quoted: {message}"
        );
        message
    }

    fn policy(allow: &[&str]) -> EgressPolicy {
        EgressPolicy {
            allow: allow.iter().map(|r| parse_host_rule(r).unwrap()).collect(),
            ..EgressPolicy::default()
        }
    }

    #[test]
    fn a_url_is_read_for_its_one_host_and_port() {
        let url = parse_url(VAR, "postgres://app:s3cret@DB.Staging.Example.com/orders").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.literal),
            ("db.staging.example.com", 5432, false)
        );
        let url = parse_url(
            VAR,
            "postgresql://app:s3cret@10.0.4.12:6543/orders?sslmode=require",
        )
        .unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.literal),
            ("10.0.4.12", 6543, true)
        );
        let url = parse_url(VAR, "postgres://app:s3cret@[fd00::5]:5433/x").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("fd00::5", 5433));
        assert!(!format!("{url:?}").contains("s3cret"));
    }

    #[test]
    fn a_url_the_sidecar_cannot_relay_is_refused_without_quoting_it() {
        let rows = [
            ("not a url s3cret", "not a URL"),
            ("mysql://app:s3cret@db.example.com/x", "scheme is \"mysql\""),
            (
                "postgres://app:s3cret@h1.example.com:5432,h2.example.com:5433/x",
                "several hosts",
            ),
            (
                "postgres://app:s3cret@h1.example.com,h2.example.com/x",
                "several hosts",
            ),
            (
                "postgres://app:s3cret@db.example.com/x?host=/var/run/postgresql",
                "query sets `host`",
            ),
            ("postgres://app:s3cret@/x", "empty host"),
            (
                "postgres://app:s3cret@db.example.com/x?hostaddr=10.0.0.5",
                "query sets `hostaddr`",
            ),
            (
                "postgres://app:s3cret@db.example.com/x?port=6000",
                "query sets `port`",
            ),
            ("postgres:///x", "names no host"),
            ("postgres://app:s3cret@db.example.com:0/x", "port is 0"),
        ];
        for (text, expected) in rows {
            let message = problem(text);
            assert!(message.contains(expected), "{text}: {message}");
            assert!(message.contains(VAR), "{message}");
        }
    }

    #[test]
    fn the_host_is_named_by_the_manifest_or_allowed_by_the_policy() {
        let url = parse_url(VAR, "postgres://app:s3cret@db.staging.example.com:6543/x").unwrap();
        let named = relay(VAR, &url, Some("DB.staging.example.com"), &policy(&[])).unwrap();
        assert_eq!(
            named,
            Relay {
                host: "db.staging.example.com".into(),
                port: 6543,
                listen_port: 6543,
                named_by: Some(NAMED_BY.into()),
            }
        );
        let allowed = relay(VAR, &url, None, &policy(&["*.example.com"])).unwrap();
        assert_eq!(allowed.named_by, None);

        let other = relay(
            VAR,
            &url,
            Some("db.prod.example.com"),
            &policy(&["*.example.com"]),
        )
        .unwrap_err();
        assert_eq!(other.code().as_str(), "AF-RUN-071");
        assert!(
            other
                .to_string()
                .contains("database.host names db.prod.example.com"),
            "{other}"
        );
        let unlisted = relay(VAR, &url, None, &policy(&["api.example.org"])).unwrap_err();
        assert_eq!(unlisted.code().as_str(), "AF-RUN-071");
        assert!(unlisted.to_string().contains("(not-listed)"), "{unlisted}");
        assert!(
            unlisted
                .help()
                .contains("database.host: db.staging.example.com")
        );
        assert!(!unlisted.to_string().contains("s3cret"));
    }

    #[test]
    fn the_manifest_s_external_database_is_read_from_af_s_environment() {
        let manifest = af_manifest::parse(
            "name: app\nruntime: {provider: local}\nservices: {api: {image: a}}\ndatabase: {provider: external, url_from_env: STAGING_DB, host: db.example.com, env: PG_URL}\n",
            "af.yaml",
        )
        .unwrap();
        let missing = wanted(&manifest, |_| None).unwrap_err();
        assert_eq!(missing.code().as_str(), "AF-RUN-060");
        assert!(
            missing
                .to_string()
                .contains("the database's URL from STAGING_DB"),
            "{missing}"
        );
        let external = wanted(&manifest, |name| {
            (name == "STAGING_DB")
                .then(|| "postgres://app:s3cret@db.example.com/orders".to_string())
        })
        .unwrap()
        .unwrap();
        assert_eq!(external.variable, "PG_URL");
        assert_eq!(external.relay.named_by.as_deref(), Some(NAMED_BY));
        let container = af_manifest::parse(
            "name: app\nruntime: {provider: local}\nservices: {api: {image: a}}\ndatabase: {provider: container}\n",
            "af.yaml",
        )
        .unwrap();
        assert!(wanted(&container, |_| None).unwrap().is_none());
    }

    #[test]
    fn the_services_keep_the_name_and_get_the_sidecar_for_an_address() {
        let sidecar = Ipv4Addr::new(172, 30, 5, 2);
        let by_name = parse_url(
            VAR,
            "postgres://app:s%40cret@db.example.com/orders?sslmode=verify-full",
        )
        .unwrap();
        let relay_by_name = relay(VAR, &by_name, Some("db.example.com"), &policy(&[])).unwrap();
        assert_eq!(
            services_url(&by_name, &relay_by_name, sidecar),
            "postgres://app:s%40cret@db.example.com/orders?sslmode=verify-full"
        );
        let literal = parse_url(VAR, "postgres://app:pw@10.0.4.12:6543/orders").unwrap();
        let relay_literal = relay(VAR, &literal, Some("10.0.4.12"), &policy(&[])).unwrap();
        assert_eq!(
            services_url(&literal, &relay_literal, sidecar),
            "postgres://app:pw@172.30.5.2:6543/orders"
        );
        // A port the sidecar serves itself (its TLS listener) is relayed from PostgreSQL's.
        let on_443 = parse_url(VAR, "postgres://app:pw@db.example.com:443/orders").unwrap();
        let relay_443 = relay(VAR, &on_443, Some("db.example.com"), &policy(&[])).unwrap();
        assert_eq!((relay_443.port, relay_443.listen_port), (443, 5432));
        assert_eq!(
            services_url(&on_443, &relay_443, sidecar),
            "postgres://app:pw@db.example.com:5432/orders"
        );
    }
}
