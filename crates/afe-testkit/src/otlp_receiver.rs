//! An OTLP/HTTP receiver the tests start: it takes `POST /v1/traces` (protobuf), decodes each
//! export with the protocol's own message types, and keeps every span — its name, its
//! attributes as text, its trace and parent — with the headers the export came with. A request
//! without the header it requires is refused (401) and kept out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// One span as it arrived.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedSpan {
    pub name: String,
    pub attributes: BTreeMap<String, String>,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
}

/// What the receiver has seen.
#[derive(Debug, Default)]
pub struct Received {
    pub spans: Vec<ReceivedSpan>,
    /// The bodies of every export, undecoded: where a leaked secret would show.
    pub bodies: Vec<Vec<u8>>,
    pub refused: usize,
}

impl Received {
    /// Keeps an export: its body, and each of its spans.
    fn keep(&mut self, export: ExportTraceServiceRequest, body: &[u8]) {
        self.bodies.push(body.to_vec());
        for span in export
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
        {
            self.spans.push(ReceivedSpan {
                name: span.name,
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| {
                        let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                        (kv.key.clone(), text_of(value))
                    })
                    .collect(),
                trace_id: span.trace_id,
                span_id: span.span_id,
                parent_span_id: span.parent_span_id,
            });
        }
    }
}

#[derive(Debug)]
pub struct OtlpReceiver {
    pub address: std::net::SocketAddr,
    pub received: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

fn text_of(value: Option<&AnyValue>) -> String {
    match value {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

impl OtlpReceiver {
    /// Starts on a port of its own, requiring `header: value` on every export.
    pub async fn start(header: &'static str, value: &'static str) -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Received::default()));
        let kept = received.clone();
        let task = crate::serve_http(
            listener,
            move |request: hyper::Request<hyper::body::Incoming>| {
                let kept = kept.clone();
                async move {
                    let allowed = request
                        .headers()
                        .get(header)
                        .is_some_and(|v| v.as_bytes() == value.as_bytes());
                    let path_ok = request.uri().path() == "/v1/traces";
                    let body = match request.into_body().collect().await {
                        Ok(body) => body.to_bytes(),
                        Err(_) => Bytes::new(),
                    };
                    let status = if !allowed {
                        kept.lock().unwrap().refused += 1;
                        401
                    } else if !path_ok {
                        404
                    } else {
                        match ExportTraceServiceRequest::decode(body.as_ref()) {
                            Ok(export) => {
                                kept.lock().unwrap().keep(export, &body);
                                200
                            }
                            Err(_) => 400,
                        }
                    };
                    hyper::Response::builder()
                        .status(status)
                        .header("content-type", "application/x-protobuf")
                        .body(Full::new(Bytes::new()))
                        .unwrap()
                }
            },
        );
        OtlpReceiver {
            address,
            received,
            task,
        }
    }

    /// The endpoint a Runtime's `tracer.otlp.endpoint` names.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
