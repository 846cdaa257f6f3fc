//! The example shop (examples/shop): one static binary, four roles.
//!
//! - `shop web [--listen ADDR]`: the storefront (`WORKER_URL` names the worker).
//! - `shop worker [--listen ADDR]`: orders in PostgreSQL (`DATABASE_URL`), payments
//!   (`PAYMENTS_URL`, `PAYMENTS_API_KEY`) and confirmation mail (`SMTP_HOST`, `SMTP_PORT`).
//! - `shop migrate`: the web service's migration, applied to the database (`DATABASE_URL`) once.
//! - `shop report`: posts the number of orders to `REPORT_URL`; the cron job.

mod form;
mod http;
mod smtp;
mod store;
mod tls;
mod web;
mod worker;

use std::process::ExitCode;

use serde_json::json;

/// A poisoned lock only means another request panicked; the data is still whole.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn setting(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

fn listen_address(args: &[String], default: &str) -> String {
    args.windows(2)
        .find(|pair| pair[0] == "--listen")
        .map_or_else(|| default.to_string(), |pair| pair[1].clone())
}

fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("web") => {
            let web = web::Web::new(setting("WORKER_URL")?);
            http::serve(&listen_address(args, "0.0.0.0:8080"), move |r| {
                web.handle(r)
            })
            .map_err(|err| err.to_string())
        }
        Some("worker") => {
            let worker = worker::Worker::new(
                worker::Settings {
                    payments_url: setting("PAYMENTS_URL")?,
                    payments_key: setting("PAYMENTS_API_KEY")?,
                    smtp_server: format!("{}:{}", setting("SMTP_HOST")?, setting("SMTP_PORT")?),
                },
                store::Store::new(setting("DATABASE_URL")?),
            );
            http::serve(&listen_address(args, "0.0.0.0:9090"), move |r| {
                worker.handle(r)
            })
            .map_err(|err| err.to_string())
        }
        Some("migrate") => {
            println!("{}", store::migrate(&setting("DATABASE_URL")?)?);
            Ok(())
        }
        Some("report") => {
            let orders = format!("{}/orders", setting("WORKER_URL")?);
            let (status, body) = http::send("GET", &orders, &[], "")?;
            let count = match status {
                200 => serde_json::from_str::<Vec<serde_json::Value>>(&body)
                    .map_err(|err| format!("GET {orders}: {err}"))?
                    .len(),
                _ => return Err(format!("GET {orders} answered {status}: {body}")),
            };
            let report = json!({"text": format!("{count} orders so far")}).to_string();
            let (status, body) = http::send(
                "POST",
                &setting("REPORT_URL")?,
                &[("content-type", "application/json")],
                &report,
            )?;
            println!("report posted ({status}): {report} -> {}", body.trim_end());
            Ok(())
        }
        _ => Err("usage: shop web|worker [--listen ADDR] | shop migrate | shop report".to_string()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("shop: {err}");
            ExitCode::FAILURE
        }
    }
}
