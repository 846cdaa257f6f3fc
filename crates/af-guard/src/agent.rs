//! The conformance agent: the workload the conformance suite deploys as a service, so that every
//! guarantee is judged from inside a running service, at the application layer. It answers HTTP
//! (reached through the runtime's webhook delivery, like a third party would reach a service) and
//! does, from inside its own network namespace, what it is asked: try escape routes, fetch a URL
//! through the sidecar or around it, open a tunnel and send a ClientHello, ask a DNS server, send
//! mail, try to tamper with the filter. It also keeps marks other workloads post to it, so the
//! suite can see the order in which migrations and services ran.
//!
//! Not for production use: it is a test workload, shipped in the engine image so that the suite
//! needs no image of its own.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::agent_wire::{Incoming, read_request, write_response};
use crate::route::{Route, RouteKind, parse_route, try_route, try_routes};

/// How the agent starts.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub listen: SocketAddr,
    /// The status `/healthz` answers.
    pub health_status: u16,
    /// Before anything else, a UDP DNS query here (the startup window, E18).
    pub first_udp_dns: Option<SocketAddr>,
    /// URLs posted to once listening (marks in another agent: "I started").
    pub announce: Vec<String>,
    /// Wait this long before listening (readiness must wait for the port).
    pub listen_after: Duration,
}

/// What the agent remembers.
#[derive(Debug, Default)]
struct State {
    boot: String,
    first_udp: Option<Value>,
    announced: Vec<Value>,
    seen: Vec<String>,
    marks: Vec<String>,
}

/// Runs the agent until the process is stopped.
pub fn serve(settings: &AgentSettings) -> io::Result<()> {
    // The very first network action, before the listener exists: nothing may get out even here.
    let first_udp = settings.first_udp_dns.map(|resolver| {
        let route = Route {
            name: "first-udp-dns".into(),
            kind: RouteKind::DnsUdp(resolver),
        };
        json!(try_route(&route, Duration::from_secs(2)))
    });
    std::thread::sleep(settings.listen_after);
    let listener = TcpListener::bind(settings.listen)?;
    let state = Arc::new(Mutex::new(State {
        boot: boot_id(),
        first_udp,
        ..State::default()
    }));
    for url in &settings.announce {
        let answer = crate::agent_actions::post_with_retries(url, Duration::from_secs(30));
        lock(&state).announced.push(answer);
    }
    eprintln!("af-proxy agent: listening on {}", settings.listen);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let state = state.clone();
        let health_status = settings.health_status;
        std::thread::spawn(move || answer(&stream, &state, health_status));
    }
    Ok(())
}

fn boot_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", std::process::id(), nanos)
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn answer(stream: &TcpStream, state: &Mutex<State>, health_status: u16) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(request) = read_request(stream) else {
        return;
    };
    let (status, body) = handle(&request, state, health_status);
    let _ = write_response(stream, status, format!("{body}\n").as_bytes());
}

/// A request's JSON body as `T`, or a 400 answer saying why not.
fn parsed<T: serde::de::DeserializeOwned>(body: &Value) -> Result<T, (u16, Value)> {
    T::deserialize(body).map_err(|err| (400, json!({"error": err.to_string()})))
}

#[derive(Deserialize)]
struct TryRequest {
    routes: Vec<String>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_timeout_ms() -> u64 {
    1500
}

/// Dispatches one request. Everything the agent answers is JSON.
fn handle(request: &Incoming, state: &Mutex<State>, health_status: u16) -> (u16, Value) {
    let path = request.path.split('?').next().unwrap_or_default();
    if path != "/seen" {
        lock(state)
            .seen
            .push(format!("{} {}", request.method, path));
    }
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let result = match (request.method.as_str(), path) {
        ("GET", "/healthz") => Ok((health_status, json!({"health": health_status}))),
        ("GET", "/boot") => {
            let state = lock(state);
            Ok((
                200,
                json!({"boot": state.boot, "first_udp": state.first_udp, "announced": state.announced}),
            ))
        }
        ("GET", "/seen") => Ok((200, json!(lock(state).seen))),
        ("GET", "/marks") => Ok((200, json!(lock(state).marks))),
        ("POST", p) if p.starts_with("/mark/") => {
            let mut state = lock(state);
            state.marks.push(p["/mark/".len()..].to_string());
            Ok((200, json!({"marks": state.marks.len()})))
        }
        ("GET", p) if p.starts_with("/env/") => Ok((
            200,
            json!({"value": std::env::var(&p["/env/".len()..]).ok()}),
        )),
        ("POST", "/try") => parsed(&body).and_then(|request: TryRequest| {
            let routes = request
                .routes
                .iter()
                .map(|spec| parse_route(spec))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| (400, json!({"error": err})))?;
            let results = try_routes(&routes, Duration::from_millis(request.timeout_ms));
            Ok((200, json!(results)))
        }),
        ("POST", "/fetch") => parsed(&body).map(|r| (200, crate::agent_actions::fetch(&r))),
        ("POST", "/connect") => {
            parsed(&body).map(|r| (200, crate::agent_actions::connect_and_hello(&r)))
        }
        ("POST", "/https") => parsed(&body).map(|r| (200, crate::agent_https::fetch_https(&r))),
        ("POST", "/dns") => parsed(&body).map(|r| (200, crate::agent_actions::ask_dns(&r))),
        ("POST", "/mail") => parsed(&body).map(|r| (200, crate::agent_actions::send_mail(&r))),
        ("POST", "/tamper") => Ok((200, crate::agent_actions::tamper())),
        _ => Ok((
            404,
            json!({"error": format!("no endpoint {} {path}", request.method)}),
        )),
    };
    result.unwrap_or_else(|refused| refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, body: &str) -> Incoming {
        Incoming {
            method: method.into(),
            path: path.into(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn marks_keep_their_order_and_requests_are_remembered() {
        let state = Mutex::new(State::default());
        for name in ["migrate-b", "b"] {
            assert_eq!(
                handle(&request("POST", &format!("/mark/{name}"), ""), &state, 200).0,
                200
            );
        }
        assert_eq!(
            handle(&request("GET", "/marks", ""), &state, 200).1,
            json!(["migrate-b", "b"])
        );
        assert_eq!(
            handle(&request("GET", "/seen", ""), &state, 200).1,
            json!(["POST /mark/migrate-b", "POST /mark/b", "GET /marks"])
        );
    }

    #[test]
    fn health_answers_the_configured_status_and_bad_input_is_400() {
        let state = Mutex::new(State::default());
        assert_eq!(handle(&request("GET", "/healthz", ""), &state, 500).0, 500);
        assert_eq!(handle(&request("POST", "/try", "{}"), &state, 200).0, 400);
        let bad_route = handle(
            &request("POST", "/try", r#"{"routes":["nonsense"]}"#),
            &state,
            200,
        );
        assert_eq!(bad_route.0, 400, "{}", bad_route.1);
        assert_eq!(handle(&request("GET", "/nothing", ""), &state, 200).0, 404);
    }

    #[test]
    fn routes_are_tried_from_here() {
        // A listener on loopback answers: the route escapes (from here, which is not contained).
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let state = Mutex::new(State::default());
        let (status, results) = handle(
            &request(
                "POST",
                "/try",
                &format!(r#"{{"routes":["open=tcp:{address}"]}}"#),
            ),
            &state,
            200,
        );
        assert_eq!(status, 200);
        assert_eq!(results[0]["outcome"], "escaped", "{results}");
    }
}
