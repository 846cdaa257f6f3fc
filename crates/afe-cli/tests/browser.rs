//! The web UI in a real browser: `afe serve --ui` and a worker (the scripted executor; node n2
//! waits for a gate file the browser script opens; n1 and n3 write a file in the ticket's
//! workspace, checkpointed as real git bundles) on SQLite, and `tests/browser/ui.py` driving
//! Debian's headless Chromium through PyPI's Playwright (both installed by `.ci/install`). The
//! screenshots of every view are kept in `target/ui-screenshots/` (CI's artifacts).

mod engine;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TOKEN: &str = "browser-test-token-0123456789abcdef";

fn required(path: &str, what: &str) -> PathBuf {
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "{what} is not at {}: run `bash .ci/install`",
        path.display()
    );
    path
}

#[test]
fn the_ui_in_headless_chromium_starts_watches_cancels_and_reruns_with_no_console_error() {
    let python = std::env::var("AFE_PLAYWRIGHT_PYTHON")
        .unwrap_or_else(|_| "/var/lib/afe-playwright/bin/python".to_string());
    let python = required(&python, "Playwright's Python");
    let chromium = required(
        &std::env::var("AFE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string()),
        "Chromium",
    );
    let dir = afe_testkit::scratch("afe-browser");
    let config = dir.join("config");
    std::fs::create_dir_all(&config).unwrap();
    afe_testkit::chain_config(&config, 3, None);
    let store = format!("sqlite://{}", dir.join("afe.db").display());
    let gate = dir.join("gate");
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        serde_json::json!({
            "calls_file": dir.join("calls"),
            "default": {"sleep_ms": 200},
            "workspaces": dir.join("workspaces"),
            "nodes": {
                "n1": {"sleep_ms": 200, "write": {"notes.txt": "first\n"}},
                "n2": {"sleep_ms": 200, "until_file": gate},
                "n3": {"sleep_ms": 200, "write": {"notes.txt": "first\nthird\n"}},
            },
        })
        .to_string(),
    )
    .unwrap();
    let config_arg = config.display().to_string();
    let (mut serve, url) = engine::api::spawn_serve(
        &["--ui", "--store", &store, "-c", &config_arg],
        Some(TOKEN),
        &dir.join("serve.log"),
    );
    // The worker shares the store; with the embedded broker it finds tickets by its sweep.
    let mut worker = Command::new(env!("CARGO_BIN_EXE_afe"))
        .args(["worker", "--store", &store, "--broker", "embedded"])
        .args(["--executor", "scripted", "--script"])
        .arg(&script)
        .args(["--concurrency", "2", "--sweep-every", "200ms"])
        .args(["--requeue-queued-after", "0s"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("worker.log")).unwrap())
        .spawn()
        .unwrap();
    let screenshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    let out = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/ui.py"))
        .env("AFE_URL", &url)
        .env("AFE_TOKEN", TOKEN)
        .env("AFE_GATE", &gate)
        .env("AFE_SCREENSHOTS", &screenshots)
        .env("AFE_CHROMIUM", &chromium)
        .output()
        .unwrap();
    let _ = serve.kill();
    let _ = worker.kill();
    let _ = serve.wait();
    let _ = worker.wait();
    assert!(
        out.status.success(),
        "the browser script failed:\n{}\n{}\nserve:\n{}\nworker:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default(),
        std::fs::read_to_string(dir.join("worker.log")).unwrap_or_default()
    );
    for view in [
        "login-refused",
        "start",
        "ticket",
        "diff",
        "tickets",
        "revisions",
        "queue",
    ] {
        assert!(
            screenshots.join(format!("{view}.png")).exists(),
            "no screenshot of {view}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
