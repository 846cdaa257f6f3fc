//! The worker: keeps the orders, takes each order's payment from the payments API and mails the
//! customer a confirmation. In an environment both calls end at the sidecar: the payments API is
//! captured (answered by the sidecar, recorded in the inbox) and so is the mail.

use std::sync::Mutex;

use serde_json::{Value, json};

use crate::http::{self, Request, Response};
use crate::lock;
use crate::{form, smtp};

/// The migration that creates the order table; orders are refused until it has run.
pub const ORDERS_MIGRATION: &str = "0001_orders";

#[derive(Debug)]
pub struct Settings {
    pub payments_url: String,
    pub payments_key: String,
    pub smtp_server: String,
}

#[derive(Debug)]
pub struct Worker {
    settings: Settings,
    migrations: Mutex<Vec<String>>,
    orders: Mutex<Vec<Value>>,
}

impl Worker {
    pub fn new(settings: Settings) -> Worker {
        Worker {
            settings,
            migrations: Mutex::default(),
            orders: Mutex::default(),
        }
    }

    pub fn handle(&self, request: Request) -> Response {
        let path = request.path.split('?').next().unwrap_or("");
        match (request.method.as_str(), path) {
            ("GET", "/healthz") => Response::text(200, "ok\n"),
            ("GET", "/migrations") => Response::json(200, &json!(*lock(&self.migrations))),
            ("POST", p) if p.starts_with("/migrations/") => {
                self.migrate(&p["/migrations/".len()..])
            }
            ("GET", "/orders") => match self.migrated() {
                Ok(()) => Response::json(200, &Value::Array(lock(&self.orders).clone())),
                Err(refused) => refused,
            },
            ("POST", "/orders") => match self.migrated() {
                Ok(()) => self.place_order(&request.body),
                Err(refused) => refused,
            },
            _ => Response::text(404, "no such endpoint\n"),
        }
    }

    fn migrated(&self) -> Result<(), Response> {
        if lock(&self.migrations).iter().any(|m| m == ORDERS_MIGRATION) {
            Ok(())
        } else {
            Err(Response::text(
                409,
                format!(
                    "the orders table does not exist yet: migration {ORDERS_MIGRATION} has not run\n"
                ),
            ))
        }
    }

    /// Applies a migration once; asked again, says it was already applied.
    fn migrate(&self, name: &str) -> Response {
        if name != ORDERS_MIGRATION {
            return Response::text(404, format!("no migration named {name}\n"));
        }
        let mut applied = lock(&self.migrations);
        if applied.iter().any(|m| m == name) {
            return Response::json(
                200,
                &json!({"migration": name, "applied": false, "reason": "already applied"}),
            );
        }
        applied.push(name.to_string());
        Response::json(201, &json!({"migration": name, "applied": true}))
    }

    fn place_order(&self, body: &str) -> Response {
        let (Some(item), Some(email)) = (form::field(body, "item"), form::field(body, "email"))
        else {
            return Response::text(400, "an order needs item=...&email=...\n");
        };
        let id = lock(&self.orders).len() + 1;
        let charge = json!({"amount": 1200, "currency": "eur", "description": format!("order {id}: {item}")});
        let authorization = format!("Bearer {}", self.settings.payments_key);
        let payment = match http::send(
            "POST",
            &self.settings.payments_url,
            &[
                ("content-type", "application/json"),
                ("authorization", &authorization),
            ],
            &charge.to_string(),
        ) {
            Ok((status, body)) if (200..300).contains(&status) => {
                serde_json::from_str::<Value>(&body).unwrap_or_else(|_| json!({"raw": body}))
            }
            Ok((status, body)) => {
                return Response::text(
                    502,
                    format!("the payments API answered {status}: {body}\n"),
                );
            }
            Err(err) => {
                return Response::text(502, format!("the payments API is unreachable: {err}\n"));
            }
        };
        let confirmation = smtp::Mail {
            from: "orders@shop.example",
            to: &email,
            subject: &format!("Your order #{id}"),
            body: &format!(
                "Thank you for your order of {item}.\nPayment: {}\n",
                payment["id"].as_str().unwrap_or("unknown")
            ),
        };
        let email_status = match smtp::send(&self.settings.smtp_server, &confirmation) {
            Ok(()) => "sent".to_string(),
            Err(err) => format!("not sent: {err}"),
        };
        let order = json!({"id": id, "item": item, "email": email, "payment": payment, "confirmation": email_status});
        lock(&self.orders).push(order.clone());
        Response::json(201, &order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker() -> Worker {
        Worker::new(Settings {
            payments_url: "http://127.0.0.1:1/charges".into(),
            payments_key: "k".into(),
            smtp_server: "127.0.0.1:1".into(),
        })
    }

    fn request(method: &str, path: &str, body: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            body: body.into(),
        }
    }

    #[test]
    fn orders_wait_for_the_migration_which_applies_once() {
        let worker = worker();
        assert_eq!(worker.handle(request("GET", "/orders", "")).status, 409);
        assert_eq!(
            worker
                .handle(request("POST", "/migrations/0001_orders", ""))
                .status,
            201
        );
        let again = worker.handle(request("POST", "/migrations/0001_orders", ""));
        assert_eq!(again.status, 200);
        assert!(again.body.contains("already applied"));
        assert_eq!(worker.handle(request("GET", "/orders", "")).body, "[]\n");
        assert_eq!(
            worker.handle(request("POST", "/orders", "item=tea")).status,
            400
        );
        // The payments API is unreachable here: the order is refused, not half-placed.
        assert_eq!(
            worker
                .handle(request("POST", "/orders", "item=tea&email=a@b.example"))
                .status,
            502
        );
        assert_eq!(worker.handle(request("GET", "/orders", "")).body, "[]\n");
    }
}
