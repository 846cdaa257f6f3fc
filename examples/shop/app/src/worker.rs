//! The worker: keeps the orders in the environment's PostgreSQL branch, takes each order's
//! payment from the payments API and mails the customer a confirmation. In an environment both
//! calls end at the sidecar: the payments API is captured (answered by the sidecar, recorded in the
//! inbox) and so is the mail; the database is the environment's own, on its internal network.

use serde_json::{Value, json};

use crate::http::{self, Request, Response};
use crate::store::Store;
use crate::{form, smtp};

#[derive(Debug)]
pub struct Settings {
    pub payments_url: String,
    pub payments_key: String,
    pub smtp_server: String,
}

#[derive(Debug)]
pub struct Worker {
    settings: Settings,
    store: Store,
}

impl Worker {
    pub fn new(settings: Settings, store: Store) -> Worker {
        Worker { settings, store }
    }

    pub fn handle(&self, request: Request) -> Response {
        let path = request.path.split('?').next().unwrap_or("");
        match (request.method.as_str(), path) {
            ("GET", "/healthz") => Response::text(200, "ok\n"),
            ("GET", "/orders") => match self.store.orders() {
                Ok(orders) => Response::json(200, &Value::Array(orders)),
                Err(err) => Response::text(503, format!("the orders cannot be read: {err}\n")),
            },
            ("POST", "/orders") => self.place_order(&request.body),
            _ => Response::text(404, "no such endpoint\n"),
        }
    }

    fn place_order(&self, body: &str) -> Response {
        let (Some(item), Some(email)) = (form::field(body, "item"), form::field(body, "email"))
        else {
            return Response::text(400, "an order needs item=...&email=...\n");
        };
        let unavailable = |err: String| Response::text(503, format!("the database: {err}\n"));
        let price = match self.store.price_of(&item) {
            Ok(Some(price)) => price,
            Ok(None) => return Response::text(404, format!("no product named {item}\n")),
            Err(err) => return unavailable(err),
        };
        let id = match self.store.next_order_id() {
            Ok(id) => id,
            Err(err) => return unavailable(err),
        };
        let charge = json!({"amount": price, "currency": "eur", "description": format!("order {id}: {item}")});
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
        match self
            .store
            .insert_order(id, &item, &email, &payment, &email_status)
        {
            Ok(order) => Response::json(201, &order),
            Err(err) => unavailable(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, body: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            body: body.into(),
        }
    }

    /// Without a database (nothing listens at its address), an incomplete order is still refused
    /// as such, and a complete one is refused as unavailable, not half-placed.
    #[test]
    fn orders_need_their_fields_and_a_database() {
        let worker = Worker::new(
            Settings {
                payments_url: "http://127.0.0.1:1/charges".into(),
                payments_key: "k".into(),
                smtp_server: "127.0.0.1:1".into(),
            },
            Store::new("postgres://app:pw@127.0.0.1:1/shop".into()),
        );
        assert_eq!(worker.handle(request("GET", "/healthz", "")).status, 200);
        assert_eq!(
            worker.handle(request("POST", "/orders", "item=tea")).status,
            400
        );
        let refused = worker.handle(request("POST", "/orders", "item=tea&email=a@b.example"));
        assert_eq!(refused.status, 503, "{}", refused.body);
        assert_eq!(worker.handle(request("GET", "/orders", "")).status, 503);
    }
}
