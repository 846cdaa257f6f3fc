//! afe's traces. Every process logs to stderr through `tracing` (`AFE_LOG` filters it); when a
//! Runtime names an OTLP tracer, the same spans — a ticket, each node, each model call, each tool
//! call, with token counts and cost as attributes and no prompt text unless the Runtime asks — are
//! also exported over OTLP/HTTP (protobuf) to `<endpoint>/v1/traces`, with the headers a variable
//! holds (`key=value,…`, as `OTEL_EXPORTER_OTLP_HEADERS` writes them: Langfuse's
//! `Authorization=Basic …`). Batched; flushed by [`Telemetry::shutdown`].

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Where spans go.
#[derive(Clone, Debug, PartialEq)]
pub struct Otlp {
    /// The collector's base URL; spans are posted to `<endpoint>/v1/traces`.
    pub endpoint: String,
    pub headers: HashMap<String, String>,
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "AFE-TEL-001 the tracer's headers variable {variable} is not set in this process's environment"
    )]
    NoHeaders { variable: String },
    #[error("AFE-TEL-002 the tracer's headers variable {variable} is not `key=value,…`: {why}")]
    BadHeaders { variable: String, why: String },
    #[error("AFE-TEL-003 the OTLP exporter for {endpoint} cannot be made: {why}")]
    Exporter { endpoint: String, why: String },
}

impl TelemetryError {
    pub fn help(&self) -> &'static str {
        match self {
            TelemetryError::NoHeaders { .. } => {
                "set the variable the Runtime's tracer.otlp.headersEnv names (e.g. OTEL_HEADERS=Authorization=Basic%20…), or remove headersEnv"
            }
            TelemetryError::BadHeaders { .. } => {
                "write the headers as OTEL_EXPORTER_OTLP_HEADERS does: key=value pairs separated by commas, values percent-encoded"
            }
            TelemetryError::Exporter { .. } => {
                "check the Runtime's tracer.otlp.endpoint: the collector's base URL, e.g. http://localhost:4318"
            }
        }
    }

    /// Every code of its own, for docs/errors.md.
    pub const CODES: [&'static str; 3] = ["AFE-TEL-001", "AFE-TEL-002", "AFE-TEL-003"];
}

/// Headers written as `OTEL_EXPORTER_OTLP_HEADERS` writes them: `key=value` pairs separated by
/// commas, values percent-encoded (`%20` for a space). Pure.
pub fn parse_headers(text: &str) -> Result<HashMap<String, String>, String> {
    let mut headers = HashMap::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| "a pair without `=`".to_string())?;
        let key = key.trim();
        if key.is_empty() {
            return Err("a pair without a key".to_string());
        }
        headers.insert(key.to_string(), percent_decode(value.trim())?);
    }
    Ok(headers)
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a `%` not followed by two hex digits".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a value that is not UTF-8".to_string())
}

/// The tracer's settings read from the environment: the endpoint and the headers the named
/// variable holds.
pub fn otlp_from_env(endpoint: &str, headers_env: Option<&str>) -> Result<Otlp, TelemetryError> {
    let headers = match headers_env {
        None => HashMap::new(),
        Some(variable) => {
            let text = std::env::var(variable).map_err(|_| TelemetryError::NoHeaders {
                variable: variable.to_string(),
            })?;
            // The value is a secret: the error says what is wrong, not what it holds.
            parse_headers(&text).map_err(|why| TelemetryError::BadHeaders {
                variable: variable.to_string(),
                why,
            })?
        }
    };
    Ok(Otlp {
        endpoint: endpoint.to_string(),
        headers,
    })
}

/// The exporter's HTTP client: hyper with rustls (ring, the machine's roots), its requests run
/// on the process's tokio runtime whichever thread the batch exporter calls from.
#[derive(Debug, Clone)]
struct HyperClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for HyperClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let response = client
                .request(Request::from_parts(parts, Full::new(body)))
                .await?;
            let (parts, body) = response.into_parts();
            // A collector's answer is small; a large one is not read whole.
            let body = Limited::new(body, 1 << 20)
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        });
        sent.await.map_err(|e| Box::new(e) as HttpError)?
    }
}

/// The process's telemetry, to shut down (flushing spans) before it exits.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Logs to stderr filtered by `AFE_LOG` (else `default_filter`); with `otlp`, spans exported
    /// too, their requests run on `runtime`.
    pub fn init(
        default_filter: &str,
        otlp: Option<Otlp>,
        runtime: tokio::runtime::Handle,
    ) -> Result<Telemetry, TelemetryError> {
        let filter = tracing_subscriber::EnvFilter::try_from_env("AFE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
        let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let Some(otlp) = otlp else {
            let _ = tracing_subscriber::registry()
                .with(log.with_filter(filter))
                .try_init();
            return Ok(Telemetry { provider: None });
        };
        let provider = provider(&otlp, runtime)?;
        let tracer = provider.tracer("afe");
        // Spans go to the collector whatever the log's filter: the log is for a person at the
        // terminal, the trace for the collector.
        let spans = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.is_span() && m.target().starts_with("afe")
            }));
        let _ = tracing_subscriber::registry()
            .with(log.with_filter(filter))
            .with(spans)
            .try_init();
        Ok(Telemetry {
            provider: Some(provider),
        })
    }

    /// Sends what is batched and stops exporting.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = provider.shutdown();
        }
    }
}

fn provider(
    otlp: &Otlp,
    runtime: tokio::runtime::Handle,
) -> Result<SdkTracerProvider, TelemetryError> {
    let failed = |why: String| TelemetryError::Exporter {
        endpoint: otlp.endpoint.clone(),
        why,
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| failed(e.to_string()))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let client = HyperClient {
        client: Client::builder(TokioExecutor::new()).build(connector),
        runtime,
    };
    let endpoint = format!("{}/v1/traces", otlp.endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(endpoint)
        .with_headers(otlp.headers.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("afe")
                .build(),
        )
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_as_the_otlp_variable_writes_them() {
        let headers = parse_headers("Authorization=Basic%20cGs6c2s=, x-team = core").unwrap();
        assert_eq!(headers["Authorization"], "Basic cGs6c2s=");
        assert_eq!(headers["x-team"], "core");
        assert!(parse_headers("novalue").is_err());
        assert!(parse_headers("a=%zz").is_err());
        assert!(parse_headers("=v").is_err());
    }
}
