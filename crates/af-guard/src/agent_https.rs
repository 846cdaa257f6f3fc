//! The conformance agent's HTTPS request, made as a service's TLS stack makes it: the server is
//! verified against the trust store the environment names (`SSL_CERT_FILE`), so a captured host
//! answers only if the runtime told the service to trust the environment's capture CA.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::agent_actions::{failed, proxy_server};
use crate::agent_wire::{open_tunnel, read_answer};

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize)]
pub struct HttpsRequest {
    /// `https://host[:port]/path`.
    pub url: String,
    /// Through a CONNECT tunnel of the sidecar's proxy (`HTTPS_PROXY`), or straight to the host
    /// (which the sidecar's DNS answers with itself: a transparent client).
    #[serde(default)]
    pub via_proxy: bool,
    #[serde(default = "post")]
    pub method: String,
    #[serde(default)]
    pub body: String,
}

fn post() -> String {
    "POST".into()
}

/// One HTTPS request; `{"status", "body"}`, or `{"error"}` (a server the trust store does not
/// vouch for is an error, as it is for any client).
pub fn fetch_https(request: &HttpsRequest) -> Value {
    let Some((host, port, path)) = split_https_url(&request.url) else {
        return failed(format!("{} is not an https:// URL", request.url));
    };
    let attempt = || -> Result<Value, String> {
        let config = environment_trust()?;
        let target = format!("{host}:{port}");
        let tcp = if request.via_proxy {
            let proxy = proxy_server().ok_or("HTTPS_PROXY is not set")?;
            let (stream, status) =
                open_tunnel(&proxy, &target, TIMEOUT).map_err(|e| format!("{proxy}: {e}"))?;
            if status != 200 {
                return Ok(json!({"connect_status": status}));
            }
            stream
        } else {
            use std::net::ToSocketAddrs;
            let address = target
                .to_socket_addrs()
                .map_err(|e| format!("{target}: {e}"))?
                .next()
                .ok_or(format!("{target} resolves to nothing"))?;
            let stream = TcpStream::connect_timeout(&address, TIMEOUT)
                .map_err(|e| format!("{target}: {e}"))?;
            stream
                .set_read_timeout(Some(TIMEOUT))
                .map_err(|e| e.to_string())?;
            stream
        };
        let name = ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
        let connection = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        let mut tls = rustls::StreamOwned::new(connection, tcp);
        let message = format!(
            "{} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
            request.method,
            request.body.len(),
            request.body
        );
        tls.write_all(message.as_bytes())
            .map_err(|e| format!("tls to {host}: {e}"))?;
        let (status, body) =
            read_answer(BufReader::new(tls)).map_err(|e| format!("tls to {host}: {e}"))?;
        Ok(json!({"status": status, "body": String::from_utf8_lossy(&body)}))
    };
    attempt().unwrap_or_else(failed)
}

/// A TLS client that trusts what the environment tells its services to trust: `SSL_CERT_FILE`,
/// else `AF_CAPTURE_CA`.
pub(crate) fn environment_trust() -> Result<Arc<rustls::ClientConfig>, String> {
    client_config(
        std::env::var("SSL_CERT_FILE")
            .or_else(|_| std::env::var("AF_CAPTURE_CA"))
            .ok(),
    )
}

/// A client that trusts exactly the certificates of `file` (`SSL_CERT_FILE`).
fn client_config(file: Option<String>) -> Result<Arc<rustls::ClientConfig>, String> {
    let file = file.ok_or("neither SSL_CERT_FILE nor AF_CAPTURE_CA is set")?;
    let pem = std::fs::read(&file).map_err(|e| format!("{file}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots
        .add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok));
    if added == 0 {
        return Err(format!("{file} holds no certificate"));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `https://host[:port]/path` as (host, port, path).
fn split_https_url(url: &str) -> Option<(String, u16, String)> {
    let rest = url.strip_prefix("https://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !authority.ends_with(']') => (host, port.parse().ok()?),
        _ => (authority, 443),
    };
    let path = if path.is_empty() { "/" } else { path };
    Some((host.to_string(), port, path.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_urls() {
        assert_eq!(
            split_https_url("https://api.payments.test/v1/charges"),
            Some(("api.payments.test".into(), 443, "/v1/charges".into()))
        );
        assert_eq!(
            split_https_url("https://h.test:8443"),
            Some(("h.test".into(), 8443, "/".into()))
        );
        assert_eq!(split_https_url("http://h.test/"), None);
    }

    #[test]
    fn a_trust_store_is_needed_and_must_hold_certificates() {
        assert_eq!(
            client_config(None).unwrap_err(),
            "neither SSL_CERT_FILE nor AF_CAPTURE_CA is set"
        );
        let empty = std::env::temp_dir().join(format!("af-empty-store-{}", std::process::id()));
        std::fs::write(&empty, "nothing\n").unwrap();
        let err = client_config(Some(empty.display().to_string())).unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert!(err.ends_with("holds no certificate"), "{err}");
    }
}
