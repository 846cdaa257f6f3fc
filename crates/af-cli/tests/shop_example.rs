//! The example of the README, `examples/shop`, as a person uses it, against the real Docker daemon:
//! `af up` brings every service ready, the storefront answers on its URL, an order's payment call
//! and confirmation mail are captured (`af net log`, `af inbox`), the order is a row of the
//! environment's database branch (`af db psql`) and not of a second environment's, `af db reset`
//! takes the branch back to the seed, a payments webhook reaches the storefront (`af webhook
//! trigger`), and `af down` leaves no labelled object behind.
//!
//! The images carry the shop's static binary: `examples/shop/build` (which `.ci/test` runs) puts it
//! in the build context. Every probe target is a TEST-NET address nothing answers.

mod support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use support::{af_command, engine_image, objects_of};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// One HTTP/1.1 request to `url` (`http://127.0.0.1:PORT`), as curl would send it: status and body.
fn http(method: &str, url: &str, path: &str, body: &str) -> (u16, String) {
    let authority = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

fn json_lines(output: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn the_shop_comes_up_takes_an_order_and_goes_away() {
    let binary = repo().join("examples/shop/image/shop");
    assert!(
        binary.exists(),
        "{} is missing: run examples/shop/build (.ci/test does)",
        binary.display()
    );
    engine_image();
    let dir = repo().join("examples/shop");
    let env = format!("shop-{}", std::process::id());
    let id = af_manifest::EnvironmentId::derive("shop", &env);
    let other_env = format!("shop-{}-other", std::process::id());
    let other_id = af_manifest::EnvironmentId::derive("shop", &other_env);
    let af_in = |env: &str, args: &[&str], input: &str| {
        // `--env` before psql's own arguments (after `--`), if any.
        let mut all = args.to_vec();
        let at = all.iter().position(|a| *a == "--").unwrap_or(all.len());
        all.splice(at..at, ["--env", env]);
        let mut child = af_command(&dir, &all)
            .env("SHOP_PAYMENTS_TEST_KEY", "sk_test_conformance")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let af = |args: &[&str]| af_in(&env, args, "");
    let orders_in = |env: &str| {
        af_in(
            env,
            &["db", "psql", "--", "-At"],
            "SELECT item || ' for ' || email FROM orders ORDER BY id;",
        )
    };

    let up = af(&["up"]);
    let status = af(&["--json", "status"]);
    let url = serde_json::from_slice::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|s| {
            s["services"]
                .as_array()?
                .iter()
                .find(|service| service["name"] == "web")?["urls"][0]
                .as_str()
                .map(str::to_string)
        });
    let (front, order) = match &url {
        Some(url) => (
            http("GET", url, "/", ""),
            http(
                "POST",
                url,
                "/orders",
                "item=green+tea&email=ana%40example.com",
            ),
        ),
        None => ((0, String::new()), (0, String::new())),
    };
    // The order is a row of this environment's branch; a second environment starts from the
    // seed, with a branch of its own; a reset takes this one back to the seed.
    let rows = orders_in(&env);
    let other_up = af_in(&other_env, &["up"], "");
    let other_rows = orders_in(&other_env);
    let other_down = af_in(&other_env, &["down"], "");
    let reset = af(&["db", "reset"]);
    let after_reset = orders_in(&env);
    let listed_after_reset = url.as_ref().map(|url| http("GET", url, "/orders", ""));
    let captured = af(&["--json", "net", "log", "--verdict", "capture"]);
    let inbox = af(&["--json", "inbox"]);
    let webhook = af(&[
        "--json",
        "webhook",
        "trigger",
        "web",
        "/webhooks/payments",
        "--body",
        r#"{"type":"charge.succeeded","id":"ch_twin"}"#,
    ]);
    let down = af(&["down"]);
    let left = objects_of(&id);
    let other_left = objects_of(&other_id);

    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    assert!(
        text(&up).contains("containment: contained"),
        "{}",
        text(&up)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for service in status["services"].as_array().unwrap() {
        assert_eq!(service["ready"], service["wanted"], "{service}");
    }
    assert_eq!(status["services"].as_array().unwrap().len(), 3, "{status}");
    assert!(url.is_some(), "the storefront has a URL: {status}");

    assert_eq!(front.0, 200, "{}", front.1);
    assert!(front.1.contains("<h1>Shop</h1>"), "{}", front.1);
    // The order went web → worker → payments API over https (captured behind the environment's
    // capture CA, which the worker trusted: its canned answer came back) → mail (captured) → the
    // branch.
    assert_eq!(order.0, 201, "{}", order.1);
    let order: serde_json::Value = serde_json::from_str(&order.1).unwrap();
    assert_eq!(order["payment"]["id"], "ch_twin", "{order}");
    assert_eq!(order["confirmation"], "sent", "{order}");

    assert_eq!(rows.status.code(), Some(0), "{}", text(&rows));
    assert_eq!(
        String::from_utf8_lossy(&rows.stdout).trim(),
        "green tea for ana@example.com",
        "the order is in the branch"
    );
    let database = &status["database"];
    assert_eq!(
        database["branch"],
        id.as_str().replace('-', "_"),
        "{status}"
    );
    assert_eq!(database["running"], true, "{status}");
    assert_eq!(other_up.status.code(), Some(0), "{}", text(&other_up));
    assert_eq!(other_rows.status.code(), Some(0), "{}", text(&other_rows));
    assert_eq!(
        String::from_utf8_lossy(&other_rows.stdout).trim(),
        "",
        "the second environment's branch has only the seed"
    );
    assert_eq!(other_down.status.code(), Some(0), "{}", text(&other_down));
    assert_eq!(other_left, Vec::<String>::new());
    assert_eq!(reset.status.code(), Some(0), "{}", text(&reset));
    assert_eq!(
        (
            after_reset.status.code(),
            String::from_utf8_lossy(&after_reset.stdout)
                .trim()
                .to_string()
        ),
        (Some(0), String::new()),
        "reset: the seed's branch again"
    );
    assert_eq!(
        listed_after_reset.map(|(status, body)| (status, body.trim().to_string())),
        Some((200, "[]".to_string())),
        "the worker reads the fresh branch"
    );

    assert_eq!(captured.status.code(), Some(0), "{}", text(&captured));
    let captured = json_lines(&captured);
    assert!(
        captured.iter().any(|r| r["host"] == "api.payments.example"
            && r["protocol"] == "connect"
            && r["method"] == "POST"),
        "the payments call, through a tunnel, is in the decision log: {captured:?}"
    );
    assert!(
        captured.iter().any(|r| r["protocol"] == "smtp"),
        "so is the mail: {captured:?}"
    );

    assert_eq!(inbox.status.code(), Some(0), "{}", text(&inbox));
    let inbox: serde_json::Value = serde_json::from_slice(&inbox.stdout).unwrap();
    let items = inbox.as_array().unwrap();
    let charge = items
        .iter()
        .find(|i| i["host"] == "api.payments.example")
        .unwrap_or_else(|| panic!("the charge is in the inbox: {inbox}"));
    assert_eq!(charge["path"], "/v1/charges");
    assert_eq!(
        charge["headers"]["authorization"], "Bearer sk_test_conformance",
        "the key came from af's environment"
    );
    let mail = items
        .iter()
        .find(|i| i["kind"] == "mail")
        .unwrap_or_else(|| panic!("the confirmation is in the inbox: {inbox}"));
    assert_eq!(mail["to"][0], "ana@example.com");
    assert_eq!(mail["subject"], "Your order #1");
    assert!(
        mail["body"].as_str().unwrap().contains("green tea"),
        "{mail}"
    );

    assert_eq!(webhook.status.code(), Some(0), "{}", text(&webhook));
    let delivery: serde_json::Value = serde_json::from_slice(&webhook.stdout).unwrap();
    assert_eq!(delivery["status"], 202, "{delivery}");
    assert!(
        delivery["body"].as_str().unwrap().contains("received"),
        "the storefront took the event: {delivery}"
    );

    assert_eq!(down.status.code(), Some(0), "{}", text(&down));
    assert_eq!(left, Vec::<String>::new(), "down removed everything");
}
