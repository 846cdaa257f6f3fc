//! `af up`, `af status`, `af down` as a person runs them, against the real Docker daemon. The
//! service is the engine image serving on a port, so nothing is pulled; every escape route is
//! pointed (through the AF_PROBE_* variables) at TEST-NET addresses nothing answers.

mod support;

use std::process::Command;

use support::{af, af_command, engine_image, objects_of};

/// A directory holding an `af.yaml` named `name` whose one service `web` is the engine serving as
/// a proxy on port 8080, and the engine image.
fn project(name: &str) -> (std::path::PathBuf, String) {
    let image = engine_image();
    let dir = std::env::temp_dir().join(format!("af-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = "environment: web\\npolicy: {}\\nlisten: {proxy: 0.0.0.0:8080}\\ncontrol: {listen: 127.0.0.1:9901, token: web-token-0123456789}\\nlog: {path: /tmp/web/log.jsonl}\\n";
    std::fs::write(
        dir.join("af.yaml"),
        format!("name: {name}\nruntime: {{provider: local}}\nservices:\n  web:\n    image: {image}\n    args: [serve]\n    port: 8080\n    resources: {{memory: 32Mi}}\n    env:\n      AF_PROXY_CONFIG_TEXT: \"{config}\"\n"),
    )
    .unwrap();
    (dir, image)
}

#[test]
fn up_status_down() {
    let (dir, image) = project("clitest");
    let env = format!("cli-{}", std::process::id());

    // AF_PROXY_IMAGE names the engine image; no static binary is needed then.
    let up = af_command(&dir, &["up", "--env", &env])
        .env("AF_PROXY_IMAGE", &image)
        .env("AF_PROXY_BINARY", "/nonexistent/af-proxy")
        .output()
        .unwrap();
    let status = af(&dir, &["--json", "status", "--env", &env]);
    // Follow the decision log while the webhook is delivered: the record arrives on the stream.
    let mut follower = Command::new(env!("CARGO_BIN_EXE_af"))
        .args(["--json", "net", "log", "--follow", "--env", &env])
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let follower_out = follower.stdout.take().unwrap();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(follower_out)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("\"protocol\":\"webhook\"") {
                let _ = seen_tx.send(line);
                return;
            }
        }
    });
    let webhook = af(
        &dir,
        &[
            "--json", "webhook", "trigger", "web", "/hooks/x", "--method", "GET", "--env", &env,
        ],
    );
    let followed = seen_rx.recv_timeout(std::time::Duration::from_secs(20));
    let _ = follower.kill();
    let _ = follower.wait();
    let net_log = af(
        &dir,
        &["--json", "net", "log", "--env", &env, "--verdict", "allow"],
    );
    let inbox = af(&dir, &["--json", "inbox", "--env", &env]);
    let no_such_entry = af(&dir, &["inbox", "000999", "--env", &env]);
    let logs = af(&dir, &["logs", "web", "--env", &env]);
    let down = af(&dir, &["down", "--env", &env]);
    let after = af(&dir, &["--json", "status", "--env", &env]);
    std::fs::remove_dir_all(&dir).unwrap();

    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let up_text = text(&up);
    for step in ["Probe", "Sidecar", "Services"] {
        assert!(up_text.contains(&format!("✓ {step}")), "{up_text}");
    }
    assert!(up_text.contains("containment: contained"), "{up_text}");
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["services"][0]["ready"], 1);
    assert_eq!(
        status["containment"]["contained"], true,
        "af status shows the last probe's verdict: {status}"
    );
    assert_eq!(status["services"][0]["applied_memory_bytes"], 32 << 20);
    // The webhook reached the service (itself an HTTP proxy, which answers an origin-form request
    // with 400 and says why), and the sidecar recorded it.
    assert_eq!(webhook.status.code(), Some(0), "{}", text(&webhook));
    let delivery: serde_json::Value = serde_json::from_slice(&webhook.stdout).unwrap();
    assert_eq!(delivery["status"], 400, "{delivery}");
    assert!(
        delivery["body"]
            .as_str()
            .unwrap()
            .contains("this is an HTTP proxy"),
        "{delivery}"
    );
    assert!(
        followed.is_ok(),
        "af net log --follow printed the webhook's record as it was made"
    );
    assert_eq!(net_log.status.code(), Some(0), "{}", text(&net_log));
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&net_log.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r["protocol"] == "webhook" && r["host"] == "web"),
        "{records:?}"
    );
    assert_eq!(inbox.status.code(), Some(0), "{}", text(&inbox));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&inbox.stdout).unwrap(),
        serde_json::json!([])
    );
    // An id that names nothing is a wrong argument, said so, not an empty listing.
    assert_eq!(
        no_such_entry.status.code(),
        Some(2),
        "{}",
        text(&no_such_entry)
    );
    assert!(
        String::from_utf8_lossy(&no_such_entry.stderr).contains("no entry with that id"),
        "{}",
        text(&no_such_entry)
    );
    assert_eq!(logs.status.code(), Some(0), "{}", text(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("sidecar serving"),
        "the service's own lines: {}",
        text(&logs)
    );
    assert_eq!(down.status.code(), Some(0), "{}", text(&down));
    let after: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(
        after["services"],
        serde_json::json!([]),
        "nothing left after down"
    );
}

#[test]
fn an_interrupted_up_leaves_nothing_down_cannot_remove() {
    use std::os::unix::process::ExitStatusExt;
    let (dir, image) = project("clistop");
    // A service that runs and never listens on its port: `up` waits on its readiness (for a
    // minute) — a step the test holds it at, rather than a moment it hopes to catch. (A busy
    // machine once finished a whole `up` before the signal arrived.)
    std::fs::write(
        dir.join("af.yaml"),
        format!("name: clistop\nruntime: {{provider: local}}\nservices:\n  web:\n    image: {image}\n    args: [hold]\n    port: 8080\n"),
    )
    .unwrap();
    let env = format!("stop-{}", std::process::id());
    let id = af_manifest::EnvironmentId::derive("clistop", &env);

    // Interrupt as a person does (SIGINT, as Ctrl-C sends), once the service's container exists:
    // mid-way, up waiting for it to be ready, the rest of up still to come.
    let mut up = af_command(&dir, &["up", "--env", &env])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut created = Vec::new();
    while !created.iter().any(|name: &String| name.ends_with("-web-0")) {
        assert!(
            up.try_wait().unwrap().is_none(),
            "up ended before its service existed: {created:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        created = objects_of(&id);
    }
    let status = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let up_status = up.wait().unwrap();
    let down = af(&dir, &["down", "--env", &env]);
    let left = objects_of(&id);
    std::fs::remove_dir_all(&dir).unwrap();

    assert!(
        !created.is_empty(),
        "up created objects before it was interrupted"
    );
    assert_eq!(
        up_status.signal(),
        Some(2),
        "up was interrupted mid-way, not finished: {up_status:?}"
    );
    assert_eq!(
        down.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&down.stdout),
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(left, Vec::<String>::new(), "down removed everything");
}

/// A kubeconfig whose one context points at a loopback port nothing listens on: `af` reads it,
/// says which context and cluster it is about to change, and fails at its first request.
fn unreachable_cluster(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: staging\nclusters:\n- name: nowhere\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\ncontexts:\n- name: staging\n  context: {cluster: nowhere, user: nobody}\nusers:\n- name: nobody\n  user: {token: t}\n",
    )
    .unwrap();
    path
}

#[test]
fn a_kubernetes_up_says_which_context_and_cluster_it_changes_and_names_what_failed() {
    let dir = std::env::temp_dir().join(format!("af-cli-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("af.yaml"),
        "name: k\nruntime: {provider: kubernetes}\nservices: {web: {image: x}}\n",
    )
    .unwrap();
    let kubeconfig = unreachable_cluster(&dir);
    let up = af_command(&dir, &["up", "--env", "x"])
        .env("KUBECONFIG", &kubeconfig)
        .env("AF_PROXY_IMAGE", "registry.example/antifailure/proxy:1")
        .output()
        .unwrap();
    let up_json = af_command(&dir, &["up", "--env", "x", "--json"])
        .env("KUBECONFIG", &kubeconfig)
        .env("AF_PROXY_IMAGE", "registry.example/antifailure/proxy:1")
        .output()
        .unwrap();
    let net_log = af_command(&dir, &["net", "log", "--env", "x"])
        .env("KUBECONFIG", &kubeconfig)
        .env("AF_PROXY_IMAGE", "registry.example/antifailure/proxy:1")
        .output()
        .unwrap();
    let webhook = af_command(&dir, &["webhook", "trigger", "web", "/x", "--env", "x"])
        .env("KUBECONFIG", &kubeconfig)
        .env("AF_PROXY_IMAGE", "registry.example/antifailure/proxy:1")
        .output()
        .unwrap();
    let no_kubeconfig = af_command(&dir, &["up", "--env", "x"])
        .env("KUBECONFIG", dir.join("missing"))
        .env("HOME", &dir)
        .env("AF_PROXY_IMAGE", "registry.example/antifailure/proxy:1")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let up_text = String::from_utf8_lossy(&up.stderr);
    assert!(
        up_text.contains(
            "af up is about to change context staging (cluster nowhere, https://127.0.0.1:1"
        ),
        "{up_text}"
    );
    assert_eq!(up.status.code(), Some(4), "{up_text}");
    assert!(
        // The first thing up asks the cluster: its version (older than af supports is refused).
        up_text.contains("AF-RUN-001") && up_text.contains("reading the API server's version"),
        "{up_text}"
    );
    // A failed up says what it leaves and what removes it; other verbs have nothing to leave.
    assert!(
        up_text.contains("left: anything this af up made before it stopped")
            && up_text.contains("af down removes all of it"),
        "{up_text}"
    );
    // The decision log is read through a port-forward to the sidecar: here, the cluster's refusal.
    let log_text = String::from_utf8_lossy(&net_log.stderr);
    assert_eq!(net_log.status.code(), Some(4), "{log_text}");
    assert!(
        log_text.contains("GET /v1/decisions on the sidecar's control API in af-k-x"),
        "{log_text}"
    );
    assert!(!log_text.contains("left:"), "{log_text}");
    let up_json = String::from_utf8_lossy(&up_json.stdout);
    let error: serde_json::Value = up_json
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v.get("error").cloned())
        .unwrap_or_else(|| panic!("no error document in {up_json}"));
    assert_eq!(error["code"], "AF-RUN-001", "{error}");
    assert_eq!(error["category"], "platform", "{error}");
    assert!(
        error["left"]
            .as_str()
            .is_some_and(|l| l.ends_with("af down removes all of it")),
        "{error}"
    );
    // Webhooks too: delivered by the sidecar, asked through the same port-forward.
    let webhook_text = String::from_utf8_lossy(&webhook.stderr);
    assert_eq!(webhook.status.code(), Some(4), "{webhook_text}");
    assert!(
        webhook_text.contains("POST /v1/webhooks on the sidecar's control API in af-k-x"),
        "{webhook_text}"
    );
    let missing = String::from_utf8_lossy(&no_kubeconfig.stderr);
    assert_eq!(no_kubeconfig.status.code(), Some(4), "{missing}");
    assert!(missing.contains("reading the kubeconfig"), "{missing}");
}
