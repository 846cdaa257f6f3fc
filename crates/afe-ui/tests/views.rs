//! The UI over HTTP, with JavaScript off (no browser: these are the pages as a server sends
//! them): signing in with a wrong token is refused and keeps nothing; the right one is kept in
//! an HTTP-only, SameSite=Strict cookie; the views show what the API says; an action without
//! the page's CSRF token or from another origin does nothing; a rerun needs its confirmation.

use std::sync::Arc;

use afe_api::{ApiState, LiveSettings, Token};
use afe_queue::{EmbeddedNotifier, EmbeddedQueue, QueueSettings};
use afe_store::{Admin, Completion, SqlStore, Store};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

const TOKEN: &str = "ui-test-token-0123456789abcdef";

struct Site {
    store: Arc<SqlStore>,
    app: Router,
    dir: std::path::PathBuf,
}

async fn site() -> Site {
    let dir = afe_testkit::scratch("afe-ui");
    let store = Arc::new(afe_testkit::published_chain_store(&dir, 3, Some(2.0)).await);
    let state = ApiState::new(
        store.clone(),
        Arc::new(EmbeddedQueue::new(QueueSettings::default())),
        Arc::new(EmbeddedNotifier::default()),
        LiveSettings::default(),
    );
    let api = afe_api::router(state, Token::required(TOKEN));
    Site {
        store,
        app: api.clone().merge(afe_ui::router(api)),
        dir,
    }
}

struct Answer {
    status: StatusCode,
    location: Option<String>,
    cookie: Option<String>,
    body: String,
}

fn cookie_of(token: &str) -> String {
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{}={hex}", afe_ui::COOKIE_NAME)
}

impl Site {
    async fn ask(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        form: Option<&str>,
    ) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "afe.test");
        if let Some(token) = token {
            request = request.header("cookie", cookie_of(token));
        }
        let request = match form {
            Some(form) => request
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Body::from(form.to_string())),
            None => request.body(Body::empty()),
        }
        .unwrap();
        let answer = self.app.clone().oneshot(request).await.unwrap();
        let header = |name: &str| {
            answer
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
        };
        let (status, location, cookie) =
            (answer.status(), header("location"), header("set-cookie"));
        let bytes = answer.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            location,
            cookie,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// An action's form posted from the ticket's page (the session's CSRF token, or `csrf`).
    async fn act(&self, id: &str, action: &str, form: &str) -> Answer {
        let form = if form.contains("csrf=") {
            form.to_string()
        } else {
            format!("csrf={}&{form}", afe_ui::csrf_for(TOKEN))
        };
        self.ask(
            "POST",
            &format!("/ui/tickets/{id}/{action}"),
            Some(TOKEN),
            Some(&form),
        )
        .await
    }

    /// The ticket, held as worker `w1` would hold it.
    async fn claim(&self, id: &str) -> afe_store::Lease {
        let held = self
            .store
            .claim(id, "w1", std::time::Duration::from_secs(60))
            .await
            .unwrap();
        held.unwrap().0
    }

    async fn state(&self, id: &str) -> afe_store::TicketState {
        self.store.ticket(id).await.unwrap().state
    }

    async fn ticket(&self) -> String {
        let revision = self.store.current_revision().await.unwrap().unwrap().hash;
        self.store
            .create_ticket(&afe_store::NewTicket {
                flow: "work".into(),
                input: json!({"n": 1}),
                revision,
                budget_micros: Some(2_000_000),
            })
            .await
            .unwrap()
            .id
    }

    async fn close(self) {
        self.store.close().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn signing_in_keeps_the_right_token_only_in_a_strict_http_only_cookie() {
    let site = site().await;
    let page = site.ask("GET", "/ui", None, None).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location.as_deref(), Some("/ui/login"));
    let form = site.ask("GET", "/ui/login", None, None).await;
    assert!(
        form.body.contains(r#"<label for="token">"#),
        "a labelled field"
    );
    let wrong = site
        .ask("POST", "/ui/login", None, Some("token=not-the-token"))
        .await;
    assert_eq!(wrong.status, StatusCode::OK, "the form again");
    assert!(wrong.cookie.is_none(), "nothing kept");
    assert!(wrong.body.contains("AFE-API-001"));
    let right = site
        .ask("POST", "/ui/login", None, Some(&format!("token={TOKEN}")))
        .await;
    assert_eq!(right.status, StatusCode::SEE_OTHER);
    let cookie = right.cookie.unwrap();
    assert!(cookie.starts_with(&cookie_of(TOKEN)), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    // A cookie with a wrong token opens nothing: the API refuses it.
    let forged = site.ask("GET", "/ui", Some("forged"), None).await;
    assert!(forged.body.contains("AFE-API-001"), "{}", forged.body);
    assert!(!forged.body.contains("<table"));
    site.close().await;
}

#[tokio::test]
async fn the_views_show_what_the_api_says_without_javascript() {
    let site = site().await;
    let id = site.ticket().await;
    // A worker ran n1.
    let lease = site.claim(&id).await;
    site.store.start_node(&lease, "n1").await.unwrap();
    site.store
        .complete_node(
            &lease,
            Completion::output_only("n1", json!({"said": "hello"}), "t"),
        )
        .await
        .unwrap();
    site.store.start_node(&lease, "n2").await.unwrap();
    let list = site.ask("GET", "/ui", Some(TOKEN), None).await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(
        list.body.contains(&format!("/ui/tickets/{id}")),
        "{}",
        list.body
    );
    assert!(list.body.contains("state-running"));
    // The script only patches what the page already shows, live.
    assert!(
        list.body
            .contains(r#"<script src="/ui/static/app.js" defer>"#)
    );
    assert!(list.body.contains(r#"data-live="tickets""#));
    let filtered = site.ask("GET", "/ui?state=done", Some(TOKEN), None).await;
    assert!(!filtered.body.contains(&format!("/ui/tickets/{id}")));
    let page = site
        .ask("GET", &format!("/ui/tickets/{id}"), Some(TOKEN), None)
        .await;
    assert_eq!(page.status, StatusCode::OK);
    for shown in [
        r#"id="node-n1""#,
        r#"id="node-n3""#,
        "hello",
        "$2.0000",
        "node.completed",
        // The graph: every node with its state as text, and n1 → n2 → n3.
        r#"<g id="graph-n1" class="graph-node">"#,
        r#"class="state state-completed">completed</text>"#,
        r#"class="state state-started">started</text>"#,
        r#"class="state state-pending">pending</text>"#,
    ] {
        assert!(page.body.contains(shown), "{shown} in {}", page.body);
    }
    assert_eq!(page.body.matches(r#"class="edge""#).count(), 2);
    // n2 was given the ticket's input under its Schema's name and n1's output.
    let n2 = &page.body[page.body.find(r#"<li id="node-n2""#).unwrap()..];
    let n2 = &n2[..n2.find("</li>").unwrap()];
    let input = &n2[n2.find("<summary>Input</summary>").expect(n2)..];
    assert!(
        input.contains("&quot;job&quot;: {")
            && input.contains("&quot;said&quot;: &quot;hello&quot;"),
        "{input}"
    );
    let queue = site.ask("GET", "/ui/queue", Some(TOKEN), None).await;
    assert!(
        queue.body.contains("<code>w1</code>"),
        "the worker holding it: {}",
        queue.body
    );
    assert!(queue.body.contains("ends in"), "{}", queue.body);
    let revisions = site.ask("GET", "/ui/revisions", Some(TOKEN), None).await;
    assert!(revisions.body.contains("current"));
    assert!(page.body.contains(&format!(r#"data-ticket="{id}""#)));
    for asset in ["/ui/static/app.css", "/ui/static/app.js"] {
        assert_eq!(
            site.ask("GET", asset, None, None).await.status,
            StatusCode::OK
        );
    }
    let missing = site
        .ask("GET", "/ui/tickets/no-such-ticket", Some(TOKEN), None)
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("AFE-STO-004"));
    site.close().await;
}

#[tokio::test]
async fn actions_need_the_pages_csrf_token_and_a_rerun_its_confirmation() {
    use afe_store::TicketState::{Cancelled, Paused, Queued};
    let site = site().await;
    let id = site.ticket().await;
    let forged = site.act(&id, "cancel", "csrf=0000").await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_eq!(site.state(&id).await, Queued, "nothing done");
    let paused = site.act(&id, "pause", "").await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER);
    assert_eq!(site.state(&id).await, Paused);
    // The API's refusal is shown with its code.
    let again = site.act(&id, "pause", "").await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.body.contains("AFE-STO-008"));
    let unconfirmed = site.act(&id, "rerun", "from=n1").await;
    assert_eq!(unconfirmed.status, StatusCode::BAD_REQUEST);
    let cancelled = site.act(&id, "cancel", "").await;
    assert_eq!(cancelled.status, StatusCode::SEE_OTHER);
    assert_eq!(site.state(&id).await, Cancelled);
    site.close().await;
}

#[tokio::test]
async fn a_ticket_starts_from_the_form_its_input_schema_makes() {
    let site = site().await;
    let choose = site.ask("GET", "/ui/start", Some(TOKEN), None).await;
    assert!(
        choose.body.contains(r#"href="/ui/start?flow=work""#),
        "{}",
        choose.body
    );
    let form = site
        .ask("GET", "/ui/start?flow=work", Some(TOKEN), None)
        .await;
    assert!(
        form.body
            .contains(r#"<label for="in.n">n (required)</label>"#),
        "{}",
        form.body
    );
    assert!(form.body.contains(r#"type="number""#));
    let csrf = afe_ui::csrf_for(TOKEN);
    let wrong = site
        .ask(
            "POST",
            "/ui/start",
            Some(TOKEN),
            Some(&format!("csrf={csrf}&flow=work&in.n=three")),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(wrong.body.contains("is not a whole number"));
    let forged = site
        .ask(
            "POST",
            "/ui/start",
            Some(TOKEN),
            Some("csrf=00&flow=work&in.n=3"),
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let started = site
        .ask(
            "POST",
            "/ui/start",
            Some(TOKEN),
            Some(&format!("csrf={csrf}&flow=work&in.n=3")),
        )
        .await;
    assert_eq!(started.status, StatusCode::SEE_OTHER, "{}", started.body);
    let id = started
        .location
        .unwrap()
        .strip_prefix("/ui/tickets/")
        .unwrap()
        .to_string();
    let ticket = site.store.ticket(&id).await.unwrap();
    assert_eq!(ticket.input, json!({"n": 3}));
    site.close().await;
}

#[tokio::test]
async fn two_revisions_are_compared_line_by_line() {
    let site = site().await;
    let old = site.store.current_revision().await.unwrap().unwrap().hash;
    let newer = afe_testkit::chain_revision(4, Some(2.0));
    site.store
        .put_revision(&newer.hash, &newer.normalized)
        .await
        .unwrap();
    site.store.publish_revision(&newer.hash).await.unwrap();
    let list = site.ask("GET", "/ui/revisions", Some(TOKEN), None).await;
    assert!(
        list.body.contains(r#"type="radio" name="a""#),
        "{}",
        list.body
    );
    let diff = site
        .ask(
            "GET",
            &format!("/ui/revisions?a={old}&b={}", newer.hash),
            Some(TOKEN),
            None,
        )
        .await;
    assert_eq!(diff.status, StatusCode::OK);
    assert!(diff.body.contains("<ins>+ "), "{}", diff.body);
    // A node appended to the chain: lines added (n4 and its punctuation), none removed.
    let changed: Vec<&str> = diff
        .body
        .lines()
        .filter(|l| l.contains("<ins>") || l.contains("<del>"))
        .collect();
    assert!(
        changed.iter().all(|l| l.starts_with("<ins>")),
        "{changed:#?}"
    );
    assert!(
        changed.iter().any(|l| l.contains("&quot;n4&quot;")),
        "{changed:#?}"
    );
    site.close().await;
}

/// A node that saved the workspace links to its diff, which shows what the node changed.
#[tokio::test]
async fn a_nodes_workspace_diff_is_one_click_away() {
    let site = site().await;
    let id = site.ticket().await;
    let repo = afe_testkit::scratch("afe-ui-diff");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        out.stdout
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("hello.txt"), "hello\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "first"]);
    let head = String::from_utf8(git(&["rev-parse", "HEAD"]))
        .unwrap()
        .trim()
        .to_string();
    let bundle = git(&["bundle", "create", "-q", "-", "refs/heads/main"]);
    let lease = site.claim(&id).await;
    site.store.start_node(&lease, "n1").await.unwrap();
    site.store
        .complete_node(
            &lease,
            Completion {
                checkpoint: Some(afe_store::NewCheckpoint {
                    git_ref: "refs/heads/main".into(),
                    head,
                    parent: None,
                    bundle,
                }),
                ..Completion::output_only("n1", json!({}), "t")
            },
        )
        .await
        .unwrap();
    let page = site
        .ask("GET", &format!("/ui/tickets/{id}"), Some(TOKEN), None)
        .await;
    let link = page
        .body
        .split(&format!(r#"href="/ui/tickets/{id}/checkpoints/"#))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no diff link in {}", page.body))
        .to_string();
    let diff = site
        .ask(
            "GET",
            &format!("/ui/tickets/{id}/checkpoints/{link}"),
            Some(TOKEN),
            None,
        )
        .await;
    assert_eq!(diff.status, StatusCode::OK, "{}", diff.body);
    assert!(diff.body.contains("hello.txt"), "{}", diff.body);
    let _ = std::fs::remove_dir_all(&repo);
    site.close().await;
}
