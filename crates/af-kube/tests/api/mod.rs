//! A scripted API server (`tower-test`): the exact exchanges a test expects, in order. A request
//! the script does not expect fails the client's call, so a write nobody expected fails the test.
#![allow(dead_code)] // each test binary uses its own part

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;

/// (method, path, status, response body) for each expected request.
pub type Script = Vec<(&'static str, &'static str, u16, serde_json::Value)>;

/// A client whose API server answers `script`.
pub fn scripted(script: Script) -> kube::Client {
    scripted_with_bodies(script).0
}

/// [`scripted`], also keeping the body of each request.
pub fn scripted_with_bodies(script: Script) -> (kube::Client, Arc<Mutex<Vec<Vec<u8>>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    tokio::spawn(async move {
        for (method, path, status, body) in script {
            let (request, respond) = handle.next_request().await.expect("a request");
            assert_eq!(request.method().as_str(), method);
            assert_eq!(request.uri().path(), path);
            let (_, sent) = request.into_parts();
            let sent = sent.collect_bytes().await.unwrap().to_vec();
            kept.lock().unwrap().push(sent);
            respond.send_response(response(status, body));
        }
    });
    (kube::Client::new(service, "default"), bodies)
}

/// An answer of the API server: a string as it is (a pod's log), anything else as JSON.
pub fn response(status: u16, body: serde_json::Value) -> Response<Body> {
    let bytes = match body {
        serde_json::Value::String(text) => text.into_bytes(),
        other => serde_json::to_vec(&other).unwrap(),
    };
    Response::builder()
        .status(status)
        .body(Body::from(bytes))
        .unwrap()
}

/// A Status body, as the API server sends with an error.
pub fn status(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "code": code, "message": message})
}
