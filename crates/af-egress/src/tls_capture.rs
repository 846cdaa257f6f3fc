//! HTTPS capture: a captured host reached over TLS — through a CONNECT tunnel or as a transparent
//! client on port 443 — is answered by the sidecar itself, behind a certificate for that name
//! signed by the environment's capture CA. The runtime makes one CA per environment and tells the
//! services to trust it; nothing of a captured request ever leaves. A sidecar without a CA refuses
//! such connections and records them as captured but unanswerable.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use af_manifest::CannedResponse;
use af_runtime::Verdict;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::body::ProxyBody;
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::http_proxy::capture;
use crate::policy::DenyReason;
use crate::refusal::Refusal;
use crate::request_host;

/// Certificates minted for captured names are kept for reuse; past this many the cache starts
/// over, so a workload naming endless hosts cannot grow the sidecar without bound.
const MAX_CACHED_NAMES: usize = 256;

/// Why a captured TLS connection could not be answered, as the decision log's rule says it.
pub const NO_CA_NOTE: &str = "tls not captured: this sidecar has no capture CA (tls_capture), so it answers captured hosts over http:// only";

/// The environment's capture CA, ready to sign a certificate for any captured name.
pub struct CaptureCa {
    issuer: Issuer<'static, KeyPair>,
    provider: Arc<CryptoProvider>,
    minted: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl std::fmt::Debug for CaptureCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CaptureCa").finish_non_exhaustive()
    }
}

impl CaptureCa {
    /// Loads a CA from its certificate and key, and proves the two belong together by signing a
    /// certificate and verifying it against the CA certificate as a client would: a sidecar whose
    /// CA cannot work refuses to start rather than fail every captured handshake later.
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, String> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| {
            format!("the capture CA key is not a PEM private key rcgen can use: {e}")
        })?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)
            .map_err(|e| format!("the capture CA certificate is not a PEM certificate: {e}"))?;
        let ca_der = pem_certificate(cert_pem)?;
        let ca = CaptureCa {
            issuer,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            minted: Mutex::new(HashMap::new()),
        };
        ca.self_check(ca_der)?;
        Ok(ca)
    }

    fn self_check(&self, ca_der: CertificateDer<'static>) -> Result<(), String> {
        const NAME: &str = "capture-self-check.invalid";
        let (leaf, _) = self.mint(NAME)?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(ca_der)
            .map_err(|e| format!("the capture CA certificate is not usable as a root: {e}"))?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            self.provider.clone(),
        )
        .build()
        .map_err(|e| format!("the capture CA certificate is not usable as a root: {e}"))?;
        let name = ServerName::try_from(NAME).map_err(|e| e.to_string())?;
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .map_err(|e| {
                format!(
                    "a certificate signed with the capture CA key does not verify against the capture CA certificate ({e}); are they a pair?"
                )
            })?;
        Ok(())
    }

    /// A certificate for `name` (a DNS name or an IP address) and its new key.
    fn mint(
        &self,
        name: &str,
    ) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), String> {
        let mut params = CertificateParams::new(vec![name.to_string()])
            .map_err(|e| format!("{name} cannot be named in a certificate: {e}"))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(|e| format!("making a key for {name}: {e}"))?;
        let certificate = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("signing a certificate for {name}: {e}"))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((certificate.der().clone(), key))
    }

    /// The TLS server configuration that presents a certificate for `name`, minted on first use.
    pub fn server_config(&self, name: &str) -> Result<Arc<ServerConfig>, String> {
        let name = name.to_ascii_lowercase();
        if let Some(config) = self.lock().get(&name) {
            return Ok(config.clone());
        }
        let (certificate, key) = self.mint(&name)?;
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(vec![certificate], key)
            .map_err(|e| format!("the certificate for {name}: {e}"))?;
        // The answers are HTTP/1.1 (the inbox's requests are HTTP/1.1 requests).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut minted = self.lock();
        if minted.len() >= MAX_CACHED_NAMES {
            minted.clear();
        }
        minted.insert(name, config.clone());
        Ok(config)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ServerConfig>>> {
        // A poisoned cache only lost an insertion; its entries are still whole.
        self.minted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn pem_certificate(pem: &str) -> Result<CertificateDer<'static>, String> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| format!("the capture CA certificate is not a PEM certificate: {e}"))
}

/// A TLS connection to a captured host, from its first byte: where it came from and how it is to
/// be recorded.
#[derive(Debug)]
pub struct CapturedConnection {
    pub peer: SocketAddr,
    /// `connect` or `tls-transparent`: the way in, as the decision log names it.
    pub protocol: &'static str,
    /// The captured name: the CONNECT host or the ClientHello's server name.
    pub host: String,
    pub port: u16,
    pub rule: String,
    pub response: CannedResponse,
}

/// Terminates TLS on `client` (whose ClientHello, already read, is `hello`) with a certificate for
/// the captured name, and answers every request on it as a captured request: stored in the inbox,
/// answered with the canned response, one decision each. A client that does not trust the CA
/// ends the handshake; that is recorded too, with what to do about it.
pub async fn answer<C>(client: C, hello: Vec<u8>, captured: CapturedConnection, shared: Arc<Shared>)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let record = |note: &str| {
        Pending::new(
            &shared.environment,
            captured.peer,
            captured.protocol,
            "TLS",
            &captured.host,
            captured.port,
        )
        .finish(
            &shared.log,
            Verdict::Capture,
            &format!("{} ({note})", captured.rule),
            0,
            0,
        )
    };
    let Some(ca) = shared.capture_ca.clone() else {
        return record(NO_CA_NOTE);
    };
    let config = match ca.server_config(&captured.host) {
        Ok(config) => config,
        Err(err) => return record(&format!("tls not captured: {err}")),
    };
    let handshake = tokio_rustls::TlsAcceptor::from(config).accept(Replayed::new(hello, client));
    let tls = match bounded_handshake(&shared, handshake).await {
        Ok(tls) => tls,
        Err(note) => return record(&note),
    };
    let captured = Arc::new(captured);
    let service_shared = shared.clone();
    let service = service_fn(move |req| {
        let captured = captured.clone();
        let shared = service_shared.clone();
        async move { Ok::<_, Infallible>(answer_request(req, &captured, &shared).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.header_read_timeout())
        .max_buf_size(shared.limits.max_header_bytes.max(8192))
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(err) = served {
        tracing::debug!(error = %err, "captured TLS connection ended with an error");
    }
}

/// A captured name's handshake, bounded by the ClientHello timeout: the secured stream, or the
/// note its decision record carries — a client that fails it is told to trust the environment's
/// capture CA. Shared by HTTPS capture and the SMTP sink's STARTTLS.
pub async fn bounded_handshake<T, E: std::fmt::Display>(
    shared: &Shared,
    handshake: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(shared.limits.client_hello_timeout(), handshake).await {
        Ok(Ok(secured)) => Ok(secured),
        Ok(Err(err)) => Err(format!(
            "tls handshake failed: {err}; a client must trust the environment's capture CA"
        )),
        Err(_) => Err("tls handshake timed out".to_string()),
    }
}

/// One request inside a captured TLS connection. Its Host header, when it has one, must name the
/// host the connection was captured for: the certificate was made for that name alone, so another
/// name is a misdirected request (RFC 9110 section 15.5.20), refused and recorded; so is a request
/// that names its host ambiguously (two Host fields, userinfo), as on the proxy's listeners.
async fn answer_request(
    req: Request<Incoming>,
    captured: &CapturedConnection,
    shared: &Shared,
) -> Response<ProxyBody> {
    let pending = Pending::new(
        &shared.environment,
        captured.peer,
        captured.protocol,
        req.method().as_str(),
        &captured.host,
        captured.port,
    );
    match request_host::inside_captured(req.uri(), req.headers(), &captured.host) {
        Ok(None) => {}
        Ok(Some(other)) => {
            pending.finish(
                &shared.log,
                Verdict::Deny,
                &format!("misdirected:{other}"),
                0,
                0,
            );
            return Refusal::misdirected(&captured.host, &other).into_response();
        }
        Err(ambiguous) => {
            let reason = DenyReason::AmbiguousHost(ambiguous);
            pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
            return Refusal::ambiguous_host(&reason).into_response();
        }
    }
    capture(req, pending, shared, &captured.rule, &captured.response).await
}

/// A stream whose first bytes, already read to decide the connection, are read again: the TLS
/// handshake must see the ClientHello the sidecar peeked at.
struct Replayed<S> {
    already_read: Vec<u8>,
    position: usize,
    inner: S,
}

impl<S> Replayed<S> {
    fn new(already_read: Vec<u8>, inner: S) -> Self {
        Replayed {
            already_read,
            position: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Replayed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.position < this.already_read.len() {
            let rest = &this.already_read[this.position..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.position += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replayed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_ca_loads_and_mints_certificates_for_names_and_addresses() {
        let af_sidecar_api::CaptureCaPem { cert, key } =
            af_sidecar_api::new_ca("shop-main").unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        let ca = CaptureCa::load(&cert, &key).unwrap();
        let first = ca.server_config("API.Payments.test").unwrap();
        let again = ca.server_config("api.payments.test").unwrap();
        assert!(Arc::ptr_eq(&first, &again), "minted once per name");
        ca.server_config("203.0.113.10").unwrap();
        assert!(format!("{ca:?}").contains("CaptureCa"));
        assert!(
            !format!("{ca:?}").contains("PRIVATE"),
            "the key never shows"
        );
    }

    #[test]
    fn a_certificate_and_a_key_that_are_not_a_pair_are_refused() {
        let cert = af_sidecar_api::new_ca("one").unwrap().cert;
        let other_key = af_sidecar_api::new_ca("two").unwrap().key;
        let err = CaptureCa::load(&cert, &other_key).unwrap_err();
        assert!(err.contains("are they a pair"), "{err}");
        let err = CaptureCa::load("not a certificate", &other_key).unwrap_err();
        assert!(err.contains("not a PEM certificate"), "{err}");
        let err = CaptureCa::load(&cert, "not a key").unwrap_err();
        assert!(err.contains("not a PEM private key"), "{err}");
    }
}
