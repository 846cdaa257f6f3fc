//! An API server that answers a script (`tower-test`): the exact exchanges of a Kubernetes client,
//! in order, with their queries — a request nobody scripted fails the test — keeping what each
//! request sent.

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use serde_json::Value;

/// One exchange: the expected `METHOD path?query`, the status, and the answer (`null` with 200:
/// the request's own body, as a server returns an applied object).
pub type Step = (String, u16, Value);

/// What the server saw of one request.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `METHOD path?query`.
    pub line: String,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Seen {
    /// The body as JSON (`null` when it is empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Everything seen so far, shared with the server's task.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// A client (default namespace `namespace`) whose API server answers `script` in order.
pub fn scripted(script: Vec<Step>, namespace: &str) -> (kube::Client, Log) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen: Log = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    tokio::spawn(async move {
        for (expected, status, answer) in script {
            let (request, respond) = handle.next_request().await.expect("a request");
            let line = format!(
                "{} {}",
                request.method(),
                request.uri().path_and_query().expect("a path")
            );
            let content_type = request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let sent = request
                .into_body()
                .collect_bytes()
                .await
                .expect("a body")
                .to_vec();
            kept.lock().expect("not poisoned").push(Seen {
                line: line.clone(),
                content_type,
                body: sent.clone(),
            });
            assert_eq!(line, expected, "the request the script expected next");
            let answer = if status == 200 && answer.is_null() {
                sent
            } else {
                serde_json::to_vec(&answer).expect("JSON")
            };
            respond.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(answer))
                    .expect("a response"),
            );
        }
    });
    (kube::Client::new(service, namespace), seen)
}
