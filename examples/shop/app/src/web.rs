//! The storefront: a page listing the orders with a form to place one, which it hands to the
//! worker, and the endpoint the payments provider calls back (`af webhook trigger web
//! /webhooks/payments`).

use std::sync::Mutex;

use serde_json::{Value, json};

use crate::http::{self, Request, Response};
use crate::lock;

#[derive(Debug)]
pub struct Web {
    worker_url: String,
    payment_events: Mutex<Vec<Value>>,
}

impl Web {
    pub fn new(worker_url: String) -> Web {
        Web {
            worker_url,
            payment_events: Mutex::default(),
        }
    }

    pub fn handle(&self, request: Request) -> Response {
        let path = request.path.split('?').next().unwrap_or("");
        match (request.method.as_str(), path) {
            ("GET", "/healthz") => Response::text(200, "ok\n"),
            ("GET", "/") => self.front_page(),
            ("POST", "/orders") => self.relay("POST", "/orders", &request.body),
            ("GET", "/orders") => self.relay("GET", "/orders", ""),
            ("POST", "/webhooks/payments") => self.payment_event(&request.body),
            ("GET", "/webhooks/payments") => {
                Response::json(200, &Value::Array(lock(&self.payment_events).clone()))
            }
            _ => Response::text(404, "no such page\n"),
        }
    }

    fn relay(&self, method: &str, path: &str, body: &str) -> Response {
        match http::send(method, &format!("{}{path}", self.worker_url), &[], body) {
            Ok((status, body)) => Response {
                status,
                content_type: "application/json",
                body,
            },
            Err(err) => Response::text(502, format!("the worker is unreachable: {err}\n")),
        }
    }

    fn front_page(&self) -> Response {
        let orders = match http::send("GET", &format!("{}/orders", self.worker_url), &[], "") {
            Ok((200, body)) => serde_json::from_str::<Vec<Value>>(&body).unwrap_or_default(),
            Ok((status, body)) => {
                return Response::text(502, format!("the worker answered {status}: {body}"));
            }
            Err(err) => return Response::text(502, format!("the worker is unreachable: {err}\n")),
        };
        let rows: String = orders
            .iter()
            .map(|order| {
                format!(
                    "<li>#{} {} for {} — payment {}</li>\n",
                    order["id"],
                    escape(order["item"].as_str().unwrap_or("")),
                    escape(order["email"].as_str().unwrap_or("")),
                    escape(order["payment"]["status"].as_str().unwrap_or("unknown")),
                )
            })
            .collect();
        Response {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: format!(
                "<!doctype html>\n<title>Shop</title>\n<h1>Shop</h1>\n<ul>\n{rows}</ul>\n\
                 <form method=post action=/orders>\n<input name=item placeholder=item>\n\
                 <input name=email placeholder=email>\n<button>Order</button>\n</form>\n"
            ),
        }
    }

    fn payment_event(&self, body: &str) -> Response {
        let event = serde_json::from_str::<Value>(body).unwrap_or_else(|_| json!({"raw": body}));
        let mut events = lock(&self.payment_events);
        events.push(event);
        Response::json(202, &json!({"received": events.len()}))
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payment_events_are_kept_in_order() {
        let web = Web::new("http://127.0.0.1:1".into());
        let post = |body: &str| {
            web.handle(Request {
                method: "POST".into(),
                path: "/webhooks/payments".into(),
                body: body.into(),
            })
        };
        assert_eq!(
            post(r#"{"type":"charge.succeeded"}"#).body,
            "{\"received\":1}\n"
        );
        assert_eq!(post("not json").status, 202);
        let list = web.handle(Request {
            method: "GET".into(),
            path: "/webhooks/payments".into(),
            body: String::new(),
        });
        assert_eq!(
            list.body,
            "[{\"type\":\"charge.succeeded\"},{\"raw\":\"not json\"}]\n"
        );
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(escape("<b>&"), "&lt;b&gt;&amp;");
    }
}
