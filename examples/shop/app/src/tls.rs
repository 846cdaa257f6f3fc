//! TLS for the client, as an application built on OpenSSL gets it: the server's certificate is
//! verified against the trust store `SSL_CERT_FILE` names, or the system's. In an environment the
//! runtime points `SSL_CERT_FILE` at a bundle that also holds the environment's capture CA, which
//! is how a captured https:// host is answered by the sidecar. Where the machine af runs on has no
//! trust store to bundle, af sets only `AF_CAPTURE_CA` (the CA alone), which the shop then uses:
//! every https:// host it calls is captured.

use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Where the trust store is when `SSL_CERT_FILE` is not set (Debian's and Alpine's place).
const SYSTEM_STORE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub type Stream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Opens TLS to `host` over `tcp`.
pub fn connect(host: &str, tcp: TcpStream) -> Result<Stream, String> {
    let store = std::env::var("SSL_CERT_FILE")
        .or_else(|_| std::env::var("AF_CAPTURE_CA"))
        .unwrap_or_else(|_| SYSTEM_STORE.to_string());
    let pem = std::fs::read(&store).map_err(|e| format!("the trust store {store}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok));
    if roots.is_empty() {
        return Err(format!("the trust store {store} holds no certificate"));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    let connection =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    Ok(rustls::StreamOwned::new(connection, tcp))
}
