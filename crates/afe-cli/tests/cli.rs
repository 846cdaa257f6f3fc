//! The afe command as a person runs it: exit statuses, what it prints, what crdgen writes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn afe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_afe"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn validate_accepts_the_example_and_prints_its_revision() {
    let out = afe(&["validate", "-c", "examples/afe/config"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("is valid: 2 schema(s), 2 agent(s), 1 flow(s), 1 plugin(s), a Runtime"),
        "{stdout}"
    );
    let revision = afe(&["revision", "-c", "examples/afe/config"]);
    let hash = text(&revision.stdout).trim().to_string();
    assert_eq!(hash.len(), 64);
    assert!(stdout.contains(&format!("revision {hash}")));
}

#[test]
fn validate_reports_every_problem_with_code_place_and_help_and_exits_3() {
    let out = afe(&["validate", "-c", "examples/afe/broken/several-mistakes"]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    // Each problem quotes its file at the place, as `af validate` does.
    for expected in [
        "AFE-CFG-004",
        "several-mistakes/agents.yaml:7:3]",
        "spec.promt: \"promt\" is not a key here",
        " 7 │   promt: ",
        "help: did you mean \"prompt\"?",
        "AFE-CFG-016",
        "several-mistakes/flows.yaml:7:35]",
        "spec.sandbox.runtimeClassName: runtime class \"gvisor\"",
        "AFE-CFG-015",
        "several-mistakes/schemas.yaml:7:5]",
        "5 problems in the config; nothing was published.",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

#[test]
fn validate_json_lists_the_problems() {
    let out = afe(&[
        "validate",
        "--json",
        "-c",
        "examples/afe/broken/022-invalid-quantity",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["valid"], false);
    let problem = &result["problems"][0];
    assert_eq!(problem["code"], "AFE-CFG-022");
    assert_eq!(problem["path"], "spec.sandbox.memory");
    assert_eq!(
        (problem["line"].as_u64(), problem["column"].as_u64()),
        (Some(24), Some(22))
    );
}

#[test]
fn revision_explain_prints_the_normalized_document_with_prompts_inlined() {
    let out = afe(&["revision", "--explain", "-c", "examples/afe/config"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let (hash, document) = stdout.split_once('\n').unwrap();
    assert_eq!(hash.len(), 64);
    let document: serde_json::Value = serde_json::from_str(document).unwrap();
    assert!(
        document["agents"]["coder"]["prompt"]
            .as_str()
            .unwrap()
            .contains("Write a failing test first")
    );
    assert!(document["agents"]["coder"].get("promptRef").is_none());
    assert_eq!(
        document["flows"]["fix-bug"]["sandbox"]["memoryBytes"],
        4u64 << 30
    );
    assert!(document.get("runtime").is_none());
}

#[test]
fn a_pin_that_does_not_match_fails_revision_naming_both_hashes() {
    let out = afe(&[
        "revision",
        "-c",
        "examples/afe/broken/020-revision-mismatch",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("RevisionMismatch"), "{stderr}");
    assert!(stderr.contains("pins revision 000000000000"), "{stderr}");
}

#[test]
fn crdgen_writes_the_committed_crds() {
    let out_dir = std::env::temp_dir().join(format!("afe-crdgen-{}", std::process::id()));
    let out = afe(&["crdgen", "--out", out_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let committed = repo().join("deploy/operator/crds");
    let mut count = 0;
    for entry in std::fs::read_dir(&out_dir).unwrap() {
        let entry = entry.unwrap();
        let written = std::fs::read_to_string(entry.path()).unwrap();
        let kept = std::fs::read_to_string(committed.join(entry.file_name())).unwrap();
        assert_eq!(written, kept, "{:?}", entry.file_name());
        count += 1;
    }
    assert_eq!(count, 5);
    std::fs::remove_dir_all(&out_dir).unwrap();
}

#[test]
fn crdgen_into_a_place_it_cannot_write_says_so() {
    let out = afe(&["crdgen", "--out", "/proc/afe-cannot-write-here"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot write to /proc/afe-cannot-write-here"));
}

#[test]
fn the_cluster_objects_validate_with_objects_and_hash_as_the_folder_does() {
    let folder = afe(&["revision", "-c", "examples/afe/config"]);
    let objects = afe(&["revision", "--objects", "-c", "examples/afe/cluster"]);
    assert_eq!(objects.status.code(), Some(0), "{}", text(&objects.stderr));
    assert_eq!(text(&objects.stdout), text(&folder.stdout));
    let valid = afe(&["validate", "--objects", "-c", "examples/afe/cluster"]);
    assert_eq!(valid.status.code(), Some(0), "{}", text(&valid.stderr));
    // Read as a folder of files, the same objects are refused, and told about --objects.
    let as_files = afe(&["validate", "-c", "examples/afe/cluster"]);
    assert_eq!(as_files.status.code(), Some(3));
    assert!(text(&as_files.stderr).contains("afe validate --objects"));
    // A folder of objects needs exactly one ConfigMap.
    let none = afe(&["validate", "--objects", "-c", "examples/afe/config"]);
    assert_eq!(none.status.code(), Some(3));
    assert!(
        text(&none.stderr).contains("holds 0 ConfigMaps"),
        "{}",
        text(&none.stderr)
    );
}

#[test]
fn the_demo_config_is_valid() {
    let out = afe(&["validate", "-c", "examples/afe/demo"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A tracer that cannot start stops the worker before it takes a ticket: status 4, the code, and
/// never the headers' value.
#[test]
fn a_worker_whose_tracer_cannot_start_exits_4_with_the_code() {
    let missing = afe(&[
        "worker",
        "--store",
        "sqlite::memory:",
        "--otlp-endpoint",
        "http://127.0.0.1:9",
        "--otlp-headers-env",
        "AFE_TEST_NO_SUCH_HEADERS",
    ]);
    assert_eq!(missing.status.code(), Some(4));
    assert!(
        text(&missing.stderr).contains("AFE-TEL-001"),
        "{}",
        text(&missing.stderr)
    );

    let malformed = Command::new(env!("CARGO_BIN_EXE_afe"))
        .args(["worker", "--store", "sqlite::memory:"])
        .args(["--otlp-endpoint", "http://127.0.0.1:9"])
        .args(["--otlp-headers-env", "AFE_TEST_HEADERS"])
        .env("AFE_TEST_HEADERS", "secret-without-equals")
        .output()
        .unwrap();
    assert_eq!(malformed.status.code(), Some(4));
    let said = text(&malformed.stderr);
    assert!(said.contains("AFE-TEL-002"), "{said}");
    assert!(!said.contains("secret-without-equals"), "{said}");
}

/// On Kubernetes the engine image is named, never built, and the kubeconfig context is one that
/// exists: a worker that has neither stops before it takes a ticket, saying which.
#[test]
fn a_kubernetes_worker_needs_an_engine_image_and_a_context_that_exists() {
    let dir = afe_testkit::scratch("afe-kubeconfig");
    let store = format!("sqlite://{}", dir.join("afe.db").display());
    let no_image = Command::new(env!("CARGO_BIN_EXE_afe"))
        .args(["worker", "--store", &store, "--broker", "embedded"])
        .args(["--sandbox-platform", "kubernetes"])
        .env_remove("AF_PROXY_IMAGE")
        .output()
        .unwrap();
    assert_ne!(no_image.status.code(), Some(0));
    assert!(
        text(&no_image.stderr).contains("AFE-SBX-008"),
        "{}",
        text(&no_image.stderr)
    );
    let kubeconfig = dir.join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    let no_context = Command::new(env!("CARGO_BIN_EXE_afe"))
        .args(["worker", "--store", &store, "--broker", "embedded"])
        .args([
            "--sandbox-platform",
            "kubernetes",
            "--engine-image",
            "af-engine:test",
        ])
        .args(["--kube-context", "not-a-context"])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let said = text(&no_context.stderr);
    assert_ne!(no_context.status.code(), Some(0));
    assert!(
        said.contains("AFE-SBX-004") && said.contains("not-a-context"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
