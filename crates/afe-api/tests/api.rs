//! The API in process, on SQLite and the in-process queue: every route refuses a request without
//! the token (the list of routes read from the generated document, so a new route cannot be
//! forgotten), tickets are started, listed, cancelled, paused, resumed and rerun through HTTP,
//! and the checked-in OpenAPI document is the one the code generates.

use std::sync::Arc;

use afe_api::{ApiState, LiveSettings, PUBLIC_PATHS, Token};
use afe_queue::{EmbeddedNotifier, EmbeddedQueue, Queue, QueueSettings};
use afe_store::{Admin, Completion, SqlStore, Store};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "a-long-test-token-0123456789";

struct Api {
    store: Arc<SqlStore>,
    queue: Arc<EmbeddedQueue>,
    router: Router,
    dir: std::path::PathBuf,
}

async fn api() -> Api {
    let dir = afe_testkit::scratch("afe-api");
    let store = Arc::new(afe_testkit::published_chain_store(&dir, 3, Some(2.0)).await);
    let queue = Arc::new(EmbeddedQueue::new(QueueSettings::default()));
    let state = ApiState::new(
        store.clone(),
        queue.clone(),
        Arc::new(EmbeddedNotifier::default()),
        LiveSettings::default(),
    );
    Api {
        store,
        queue,
        router: afe_api::router(state, Token::required(TOKEN)),
        dir,
    }
}

impl Api {
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => request
                .header("content-type", "application/json")
                .body(Body::from(body.to_string())),
            None => request.body(Body::empty()),
        }
        .unwrap();
        let answer = self.router.clone().oneshot(request).await.unwrap();
        let status = answer.status();
        // A live stream never ends: its status is the answer.
        if answer
            .headers()
            .get("content-type")
            .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
        {
            return (status, Value::Null);
        }
        let bytes = answer.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call(method, path, Some(TOKEN), body).await
    }

    async fn start(&self, n: i64) -> String {
        let (status, ticket) = self
            .ok(
                "POST",
                "/v1/tickets",
                Some(json!({"flow": "work", "input": {"n": n}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{ticket}");
        ticket["id"].as_str().unwrap().to_string()
    }

    /// The ticket, held as a worker would hold it.
    async fn claim(&self, id: &str) -> afe_store::Lease {
        let held = self
            .store
            .claim(id, "w", std::time::Duration::from_secs(60))
            .await
            .unwrap();
        held.unwrap().0
    }

    async fn close(self) {
        self.store.close().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every operation of the generated document, with its path's parameters filled in.
fn operations() -> Vec<(String, String)> {
    let document = serde_json::to_value(afe_api::openapi()).unwrap();
    let mut out = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                let filled = path
                    .replace("{id}", "some-ticket")
                    .replace("{hash}", "abc")
                    .replace("{checkpoint}", "1");
                out.push((method.to_uppercase(), filled));
            }
        }
    }
    out
}

#[tokio::test]
async fn every_route_but_health_refuses_a_missing_or_wrong_token() {
    let api = api().await;
    let operations = operations();
    // The document is the router's: it has every route the issue names.
    assert!(operations.len() >= 20, "{operations:?}");
    for (method, path) in &operations {
        for token in [None, Some("wrong-token"), Some(&TOKEN[..TOKEN.len() - 1])] {
            let (status, body) = api.call(method, path, token, None).await;
            if PUBLIC_PATHS.contains(&path.as_str()) {
                assert_ne!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
            } else {
                assert_eq!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} with {token:?}: {body}"
                );
                assert_eq!(body["code"], "AFE-API-001", "{method} {path}");
            }
        }
        // The right token gets past the gate (whatever the route then says of "some-ticket").
        let (status, body) = api.call(method, path, Some(TOKEN), None).await;
        assert_ne!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {body}");
    }
    // A path no route has is refused before routing: the gate is in front of everything.
    let (status, _) = api.call("GET", "/v1/nothing-here", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    api.close().await;
}

#[tokio::test]
async fn health_is_public_and_readiness_checks_the_store_and_broker() {
    let api = api().await;
    let (status, body) = api.call("GET", "/healthz", None, None).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let (status, body) = api.call("GET", "/readyz", None, None).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    // With the store closed, not ready, and every store route answers 503 with the store's code.
    api.store.close().await;
    let (status, body) = api.call("GET", "/readyz", None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("AFE-STO-001")
    );
    let (status, body) = api.ok("GET", "/v1/tickets", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["code"], "AFE-STO-001");
    let _ = std::fs::remove_dir_all(&api.dir);
}

#[tokio::test]
async fn a_ticket_starts_only_on_input_its_schema_accepts() {
    let api = api().await;
    let (status, body) = api
        .ok(
            "POST",
            "/v1/tickets",
            Some(json!({"flow": "work", "input": {"n": "three"}})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["code"], "AFE-API-002");
    assert!(
        body["problems"][0].as_str().unwrap().contains("/n"),
        "{body}"
    );
    let (status, body) = api
        .ok(
            "POST",
            "/v1/tickets",
            Some(json!({"flow": "nope", "input": {}})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("AFE-API-003"))
    );
    let (status, body) = api
        .ok("POST", "/v1/tickets", Some(json!({"flow": 3})))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("AFE-API-005"))
    );
    assert_eq!(api.queue.depth().await.unwrap(), 0, "nothing was queued");
    let id = api.start(3).await;
    let (status, ticket) = api.ok("GET", &format!("/v1/tickets/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ticket["state"], "queued");
    assert_eq!(ticket["budgetMicros"], 2_000_000);
    let current = api.store.current_revision().await.unwrap().unwrap();
    assert_eq!(ticket["revision"], json!(current.hash));
    assert_eq!(api.queue.depth().await.unwrap(), 1, "queued for a worker");
    api.close().await;
}

#[tokio::test]
async fn tickets_are_listed_by_cursor_and_filter_and_stopped_as_their_state_allows() {
    let api = api().await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(api.start(n).await);
    }
    let mut seen = Vec::new();
    let mut path = "/v1/tickets?limit=2".to_string();
    loop {
        let (status, page) = api.ok("GET", &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        seen.extend(
            page["tickets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_string()),
        );
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/tickets?limit=2&cursor={next}"),
            None => break,
        }
    }
    seen.sort();
    let mut all = ids.clone();
    all.sort();
    assert_eq!(seen, all, "every ticket once");
    let (status, body) = api.ok("GET", "/v1/tickets?cursor=nonsense", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("AFE-API-005"))
    );
    let (status, body) = api.ok("GET", "/v1/tickets?limit=0", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = api.ok("GET", "/v1/tickets?state=sleeping", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Cancel one, pause and resume another.
    let (status, body) = api
        .ok(
            "POST",
            &format!("/v1/tickets/{}/cancel", ids[0]),
            Some(json!({"reason": "not needed"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["state"].as_str(), body["reason"].as_str()),
        (Some("cancelled"), Some("not needed"))
    );
    let (status, body) = api
        .ok("POST", &format!("/v1/tickets/{}/cancel", ids[0]), None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("AFE-STO-008"))
    );
    let (status, body) = api
        .ok("POST", &format!("/v1/tickets/{}/pause", ids[1]), None)
        .await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("paused"))
    );
    let (_, listed) = api.ok("GET", "/v1/tickets?state=paused", None).await;
    assert_eq!(listed["tickets"].as_array().unwrap().len(), 1);
    let (status, body) = api
        .ok("POST", &format!("/v1/tickets/{}/resume", ids[1]), None)
        .await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("queued"))
    );
    let (status, body) = api
        .ok("POST", &format!("/v1/tickets/{}/resume", ids[1]), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = api.ok("POST", "/v1/tickets/no-such/cancel", None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("AFE-STO-004"))
    );
    let (status, events) = api
        .ok(
            "GET",
            &format!("/v1/tickets/{}/events?after=0", ids[0]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ticket.created", "ticket.cancelled"]);
    api.close().await;
}

#[tokio::test]
async fn a_rerun_from_a_completed_node_is_a_new_ticket_that_keeps_the_nodes_before_it() {
    let api = api().await;
    let id = api.start(1).await;
    // A worker ran n1 and n2 of the ticket, then it failed at n3.
    let lease = api.claim(&id).await;
    for node in ["n1", "n2"] {
        api.store.start_node(&lease, node).await.unwrap();
        api.store
            .complete_node(
                &lease,
                Completion::output_only(node, json!({"by": node}), "t"),
            )
            .await
            .unwrap();
    }
    api.store.start_node(&lease, "n3").await.unwrap();
    api.store.fail_node(&lease, "n3", "it broke").await.unwrap();
    let (status, body) = api
        .ok(
            "POST",
            &format!("/v1/tickets/{id}/rerun"),
            Some(json!({"from": "n7"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("AFE-API-006"))
    );
    let (status, body) = api
        .ok(
            "POST",
            &format!("/v1/tickets/{id}/rerun"),
            Some(json!({"from": "n3"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("AFE-STO-008")),
        "n3 never completed"
    );
    let (status, rerun) = api
        .ok(
            "POST",
            &format!("/v1/tickets/{id}/rerun"),
            Some(json!({"from": "n2"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{rerun}");
    let new_id = rerun["id"].as_str().unwrap();
    assert_ne!(new_id, id);
    let (_, nodes) = api
        .ok("GET", &format!("/v1/tickets/{new_id}/nodes"), None)
        .await;
    let kept: Vec<(&str, &str)> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["node"].as_str().unwrap(), n["state"].as_str().unwrap()))
        .collect();
    assert_eq!(kept, [("n1", "completed")]);
    let (_, ledger) = api
        .ok("GET", &format!("/v1/tickets/{new_id}/ledger"), None)
        .await;
    assert_eq!(ledger["budgetMicros"], 2_000_000);
    assert_eq!(ledger["entries"].as_array().unwrap().len(), 0);
    api.close().await;
}

#[tokio::test]
async fn revisions_are_listed_and_the_current_one_has_its_document() {
    let api = api().await;
    let (status, current) = api.ok("GET", "/v1/revisions/current", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(current["current"], true);
    assert!(current["document"]["flows"]["work"].is_object());
    let hash = current["hash"].as_str().unwrap();
    let (status, one) = api.ok("GET", &format!("/v1/revisions/{hash}"), None).await;
    assert_eq!((status, one["hash"].as_str()), (StatusCode::OK, Some(hash)));
    let (status, _) = api.ok("GET", "/v1/revisions/0000", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, all) = api.ok("GET", "/v1/revisions", None).await;
    assert_eq!(all.as_array().unwrap().len(), 1);
    let (status, text) = api.ok("GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.as_str()
            .unwrap()
            .contains("afe_tickets{state=\"queued\"} 0"),
        "{text}"
    );
    api.close().await;
}

/// The document in the repository is the one the code generates; `AFE_UPDATE_OPENAPI=1`
/// rewrites it.
#[test]
fn the_checked_in_openapi_document_is_the_generated_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let generated = afe_api::openapi_text();
    if std::env::var_os("AFE_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/openapi.json is not what the code generates: run `AFE_UPDATE_OPENAPI=1 cargo test -p afe-api --test api` and commit it"
    );
}

/// A subscriber that does not read while more than its buffer of events arrive is dropped with
/// TooSlow (never buffered without bound) after handing out what it had, in order; one that
/// keeps up sees every event once.
#[tokio::test]
async fn a_subscriber_that_falls_behind_its_buffer_is_dropped_and_one_that_keeps_up_is_not() {
    let api = api().await;
    let notifier = Arc::new(EmbeddedNotifier::default());
    let hub = afe_api::Hub::new(
        api.store.clone(),
        notifier.clone(),
        LiveSettings {
            buffer: 4,
            ..LiveSettings::default()
        },
    );
    let id = api.start(1).await;
    let mut slow = hub.subscribe(&id, 0).await.unwrap();
    let mut fast = hub.subscribe(&id, 0).await.unwrap();
    // The fast one catches up with the log as it is (ticket.created).
    assert_eq!(fast.next().await.unwrap().kind, "ticket.created");
    let lease = api.claim(&id).await;
    for n in 0..10 {
        let event = api
            .store
            .record(&lease, "test.tick", json!({"n": n}))
            .await
            .unwrap();
        afe_queue::Notifier::publish(
            notifier.as_ref(),
            &afe_queue::Notice {
                ticket: id.clone(),
                seq: event.seq,
                kind: event.kind,
            },
        )
        .await
        .unwrap();
        // The fast one reads as they come.
        loop {
            let got = fast.next().await.unwrap();
            if got.seq == event.seq {
                break;
            }
        }
    }
    assert_eq!(fast.last(), api.store.last_seq(&id).await.unwrap());
    assert_eq!(hub.subscribers(), 2);
    // The slow one gets what the store has, in order, then is told it fell behind.
    let mut seqs = Vec::new();
    let ended = loop {
        match slow.next().await {
            Ok(event) => seqs.push(event.seq),
            Err(ended) => break ended,
        }
    };
    assert!(
        matches!(ended, afe_api::live::Ended::TooSlow { .. }),
        "{ended:?}"
    );
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, expected, "in order, once each");
    drop(slow);
    assert_eq!(hub.subscribers(), 1);
    api.close().await;
}

/// The stream of every ticket: what was written since a time is replayed first, then new events
/// of any ticket arrive live, each once.
#[tokio::test]
async fn the_all_tickets_stream_replays_since_a_time_then_goes_live_once_each() {
    let api = api().await;
    let notifier = Arc::new(EmbeddedNotifier::default());
    let hub = afe_api::Hub::new(api.store.clone(), notifier.clone(), LiveSettings::default());
    let first = api.start(1).await;
    let second = api.start(2).await;
    let mut all = hub.subscribe_all(Some(0));
    let mut replayed = Vec::new();
    for _ in 0..2 {
        let event = all.next().await.unwrap();
        replayed.push((event.ticket.clone(), event.kind.clone()));
    }
    replayed.sort();
    let mut expected = vec![
        (first.clone(), "ticket.created".to_string()),
        (second.clone(), "ticket.created".to_string()),
    ];
    expected.sort();
    assert_eq!(replayed, expected);
    // Live: an event of the second ticket, announced twice (a duplicate notice) — seen once.
    let lease = api.claim(&second).await;
    let event = api
        .store
        .record(&lease, "test.live", json!({}))
        .await
        .unwrap();
    for _ in 0..2 {
        afe_queue::Notifier::publish(
            notifier.as_ref(),
            &afe_queue::Notice {
                ticket: second.clone(),
                seq: event.seq,
                kind: event.kind.clone(),
            },
        )
        .await
        .unwrap();
    }
    let mut live = Vec::new();
    while live
        .last()
        .map(|(_, kind): &(String, String)| kind.as_str())
        != Some("test.live")
    {
        let got = all.next().await.unwrap();
        live.push((got.ticket.clone(), got.kind.clone()));
    }
    assert_eq!(
        live,
        [
            (second.clone(), "ticket.claimed".to_string()),
            (second.clone(), "test.live".to_string())
        ]
    );
    api.close().await;
}

/// A browser signed in to the UI reads with its session cookie (a WebSocket cannot carry a
/// header), only with GET and only from this server's pages; a change needs the header.
#[tokio::test]
async fn the_session_cookie_reads_from_this_origin_only_and_changes_nothing() {
    let api = api().await;
    let id = api.start(1).await;
    let hex: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
    let ask = |method: &str, origin: Option<&str>, cookie: &str| {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("/v1/tickets/{id}"))
            .header("host", "afe.test")
            .header("cookie", format!("{}={cookie}", afe_api::SESSION_COOKIE));
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        api.router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
    };
    assert_eq!(
        ask("GET", None, &hex).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        ask("GET", Some("http://afe.test"), &hex)
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    for (method, origin, cookie) in [
        ("GET", Some("https://evil.example"), hex.as_str()),
        ("GET", None, "77726f6e67"),
        ("GET", None, "not-hex"),
        ("POST", None, hex.as_str()),
    ] {
        let status = ask(method, origin, cookie).await.unwrap().status();
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {origin:?} {cookie}"
        );
    }
    api.close().await;
}

/// Runs git in `repo`; its stdout.
fn git(repo: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A node's checkpoint as a diff, from real bundles: the second against the first; the first
/// (a clone's) as the files it holds.
#[tokio::test]
async fn a_checkpoint_is_shown_as_what_its_node_changed() {
    let api = api().await;
    let id = api.start(1).await;
    let repo = afe_testkit::scratch("afe-diff-repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let first = String::from_utf8(git(&repo, &["rev-parse", "HEAD"]))
        .unwrap()
        .trim()
        .to_string();
    let whole = git(&repo, &["bundle", "create", "-q", "-", "refs/heads/main"]);
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    std::fs::write(repo.join("b.txt"), "new\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "second"]);
    let second = String::from_utf8(git(&repo, &["rev-parse", "HEAD"]))
        .unwrap()
        .trim()
        .to_string();
    let delta = git(
        &repo,
        &[
            "bundle",
            "create",
            "-q",
            "-",
            "refs/heads/main",
            &format!("^{first}"),
        ],
    );
    let lease = api.claim(&id).await;
    let mut parent = None;
    for (node, head, bundle) in [("n1", &first, whole), ("n2", &second, delta)] {
        api.store.start_node(&lease, node).await.unwrap();
        api.store
            .complete_node(
                &lease,
                Completion {
                    checkpoint: Some(afe_store::NewCheckpoint {
                        git_ref: "refs/heads/main".into(),
                        head: head.clone(),
                        parent,
                        bundle,
                    }),
                    ..Completion::output_only(node, json!({}), "t")
                },
            )
            .await
            .unwrap();
        parent = api
            .store
            .checkpoints(&id)
            .await
            .unwrap()
            .last()
            .map(|c| c.id);
    }
    let (status, listed) = api
        .ok("GET", &format!("/v1/tickets/{id}/checkpoints"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<i64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    let (status, changed) = api
        .ok(
            "GET",
            &format!("/v1/tickets/{id}/checkpoints/{}/diff", ids[1]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    let text = changed["diff"].as_str().unwrap();
    for shown in ["-one", "+two", "b.txt", "+new"] {
        assert!(text.contains(shown), "{shown} in {text}");
    }
    assert_eq!(changed["from"], json!(first));
    assert_eq!(
        (changed["node"].as_str(), changed["truncated"].as_bool()),
        (Some("n2"), Some(false))
    );
    let (_, cloned) = api
        .ok(
            "GET",
            &format!("/v1/tickets/{id}/checkpoints/{}/diff", ids[0]),
            None,
        )
        .await;
    assert!(
        cloned["diff"].as_str().unwrap().contains("a.txt"),
        "{cloned}"
    );
    assert!(cloned["from"].is_null());
    let (status, _) = api
        .ok(
            "GET",
            &format!("/v1/tickets/{id}/checkpoints/999999/diff"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = api
        .ok("GET", &format!("/v1/tickets/{id}/checkpoints/x/diff"), None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("AFE-API-005"))
    );
    let _ = std::fs::remove_dir_all(&repo);
    api.close().await;
}
