//! The node's API, which the API server proxies `pods/exec`, `pods/log` and `pods/portforward`
//! to (at the port the Node's status names, over TLS): only clients whose certificate the
//! cluster's CA signed are served — the API server's kubelet client among them — as a kubelet
//! with x509 authentication serves them. It listens on loopback only.

mod channel;
mod exec;
mod logs;
mod portforward;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bollard::query_parameters::ListContainersOptions;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::Shared;
use super::pods::create::labels;

/// An error answered as the kubelet answers one: a status and a line of text.
pub(crate) fn failure(status: StatusCode, text: String) -> Response {
    (status, text).into_response()
}

/// The query's pairs, decoded (`command` repeats).
pub(crate) fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(crate) fn flag(pairs: &[(String, String)], key: &str) -> bool {
    pairs
        .iter()
        .any(|(k, v)| k == key && matches!(v.as_str(), "1" | "true"))
}

pub(crate) fn value<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The Docker containers of `container` in Pod `namespace/pod`, newest instance first.
pub(crate) async fn instances(
    shared: &Shared,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Vec<bollard::models::ContainerSummary> {
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![
            format!("{}={}", crate::CLUSTER_LABEL, shared.config.cluster_id),
            format!("{}={namespace}/{pod}", labels::POD),
            format!("{}={container}", labels::CONTAINER),
        ],
    )]);
    let mut found = shared
        .docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .unwrap_or_default();
    let instance = |c: &bollard::models::ContainerSummary| {
        c.labels
            .as_ref()
            .and_then(|l| l.get(labels::INSTANCE))
            .and_then(|i| i.parse::<u32>().ok())
            .unwrap_or(0)
    };
    found.sort_by_key(|c| std::cmp::Reverse(instance(c)));
    found
}

fn server_config(ca: &[u8]) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile_certs(ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("the cluster CA: {e}"))?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| format!("the client verifier: {e}"))?;
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string()]).map_err(|e| e.to_string())?;
    params.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .map_err(|e| format!("the node's serving certificate: {e}"))
}

/// The certificates of a PEM file.
fn rustls_pemfile_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the cluster CA: {e}"))
}

/// Serves the node's API on a loopback port; the port and the task.
pub async fn serve(shared: Arc<Shared>) -> Result<(u16, tokio::task::JoinHandle<()>), String> {
    let ca = std::fs::read(&shared.config.cluster_ca)
        .map_err(|e| format!("{}: {e}", shared.config.cluster_ca.display()))?;
    let tls = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&ca)?));
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(logs::logs),
        )
        .route("/exec/{namespace}/{pod}/{container}", get(exec::exec))
        .route(
            "/portForward/{namespace}/{pod}",
            get(portforward::portforward),
        )
        .fallback(|| async { failure(StatusCode::NOT_FOUND, "not served by this node".into()) })
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("the node's API: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let tls = tls.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(stream) = tls.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Ok((port, task))
}
