//! The UI's only way to the data: the API's own router, called in process with the person's
//! token, exactly as a client over HTTP would call it. The UI has no back door to the store.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// What the API answered that was not a success: its status and its problem (`code`, `message`,
/// `help`), shown to the person as they are.
#[derive(Debug, Clone)]
pub struct Refused {
    pub status: StatusCode,
    pub problem: Value,
}

#[derive(Clone, Debug)]
pub struct Api {
    router: Router,
}

impl Api {
    pub fn new(router: Router) -> Api {
        Api { router }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Result<Value, Refused> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"));
        let request = match body {
            Some(body) => request
                .header("content-type", "application/json")
                .body(Body::from(body.to_string())),
            None => request.body(Body::empty()),
        }
        .map_err(|e| internal(&e.to_string()))?;
        let answer = self
            .router
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| internal(&e.to_string()))?;
        let status = answer.status();
        let bytes = answer
            .into_body()
            .collect()
            .await
            .map_err(|e| internal(&e.to_string()))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            Ok(value)
        } else {
            Err(Refused {
                status,
                problem: value,
            })
        }
    }

    pub async fn get(&self, path: &str, token: &str) -> Result<Value, Refused> {
        self.call(Method::GET, path, token, None).await
    }
}

fn internal(detail: &str) -> Refused {
    Refused {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        problem: serde_json::json!({"code": "AFE-UI-001", "message": detail, "help": "report it"}),
    }
}
