//! The `af` binary as a person and a script use it: exit statuses, diagnostics that point into the
//! YAML, JSON output, completion scripts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn af(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_af"))
        .args(args)
        .current_dir(repo())
        .env_remove("AF_MANIFEST")
        .env_remove("AF_ENV")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_example_validates() {
    let out = af(&["validate", "examples/shop/af.yaml", "--env", "main"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("examples/shop/af.yaml is valid: 3 services"),
        "{stdout}"
    );
    assert!(stdout.contains("environment id: shop-main"), "{stdout}");
}

#[test]
fn the_global_manifest_flag_and_its_variable_name_the_file() {
    let out = af(&[
        "--manifest",
        "examples/shop/af.yaml",
        "validate",
        "--env",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_af"))
        .args(["validate", "--env", "x"])
        .current_dir(repo())
        .env("AF_MANIFEST", "examples/shop/af.yaml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn each_broken_manifest_exits_3_with_its_code_at_its_place() {
    let dir = repo().join("crates/af-manifest/tests/broken");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let source = std::fs::read_to_string(&path).unwrap();
        let relative = path
            .strip_prefix(repo())
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let out = af(&["validate", &relative]);
        assert_eq!(out.status.code(), Some(3), "{relative}");
        let stderr = text(&out.stderr);
        for expected in source.lines().filter_map(|l| l.strip_prefix("# expect: ")) {
            let (code, place) = expected.split_once(' ').unwrap();
            assert!(
                stderr.contains(code),
                "{relative}: {code} missing from\n{stderr}"
            );
            assert!(
                stderr.contains(&format!("{relative}:{place}]")),
                "{relative}: {place} missing from\n{stderr}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 20);
}

#[test]
fn several_mistakes_are_all_reported_in_json() {
    let out = af(&[
        "--json",
        "validate",
        "crates/af-manifest/tests/broken/several-mistakes.yaml",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], false);
    let problems = json["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 8);
    assert_eq!(problems[0]["code"], "AF-MAN-005");
    assert_eq!(problems[0]["location"]["line"], 10);
    assert_eq!(problems[0]["location"]["column"], 7);
    assert!(
        problems
            .iter()
            .all(|p| !p["help"].as_str().unwrap().is_empty())
    );
}

#[test]
fn a_valid_manifest_in_json_carries_the_normalized_manifest() {
    let out = af(&[
        "validate",
        "--json",
        "examples/shop/af.yaml",
        "--env",
        "feature/Login",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], true);
    assert!(
        json["environment_id"]
            .as_str()
            .unwrap()
            .starts_with("shop-feature-login-")
    );
    assert_eq!(json["manifest"]["services"]["web"]["replicas"], 2);
}

#[test]
fn a_missing_file_is_af_man_023() {
    let out = af(&["validate", "no/such/af.yaml"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("AF-MAN-023"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn outside_a_git_branch_the_id_needs_env() {
    let dir = std::env::temp_dir().join(format!("af-cli-nogit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("af.yaml"),
        "name: shop\nruntime: {provider: local}\nservices: {web: {image: shop/web:dev}}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_af"))
        .args(["validate"])
        .current_dir(&dir)
        .env_remove("AF_ENV")
        .env_remove("AF_MANIFEST")
        .env("GIT_CEILING_DIRECTORIES", std::env::temp_dir())
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("pass --env NAME"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn completion_scripts_for_every_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = af(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(
            script.contains("validate"),
            "{shell} completion lacks the verbs"
        );
    }
    let out = af(&["--json", "completion", "fish"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["shell"], "fish");
    assert!(json["script"].as_str().unwrap().contains("validate"));
}

#[test]
fn verbose_says_what_it_reads_on_stderr() {
    let out = af(&["-vv", "validate", "examples/shop/af.yaml", "--env", "main"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("validating manifest"),
        "{}",
        text(&out.stderr)
    );
    let quiet = af(&["validate", "examples/shop/af.yaml", "--env", "main"]);
    assert!(text(&quiet.stderr).is_empty(), "{}", text(&quiet.stderr));
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(af(&["no-such-verb"]).status.code(), Some(2));
    assert_eq!(af(&["completion", "tcsh"]).status.code(), Some(2));
}

#[test]
fn render_prints_every_kubernetes_object_in_apply_order() {
    let render = |json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_af"));
        command
            .current_dir(repo())
            .env("AF_PROXY_IMAGE", "antifailure/proxy:rendered")
            .args(["--manifest", "examples/shop/af.yaml"]);
        if json {
            command.arg("--json");
        }
        command
            .args(["render", "--runtime", "kubernetes", "--env", "main"])
            .output()
            .unwrap()
    };
    let yaml = render(false);
    assert_eq!(yaml.status.code(), Some(0), "{}", text(&yaml.stderr));
    let yaml = text(&yaml.stdout);
    assert!(
        yaml.starts_with("apiVersion: v1\nkind: Namespace\n"),
        "{yaml}"
    );
    assert_eq!(
        yaml.matches("\n---\n").count() + 1,
        yaml.matches("\nkind: ").count(),
        "one document per object"
    );
    assert!(yaml.contains("image: antifailure/proxy:rendered"));
    assert!(
        yaml.contains("nameservers:\n      - 192.0.2.53") || yaml.contains("- 192.0.2.53"),
        "the stand-in sidecar address"
    );
    let json = render(true);
    let objects: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let kinds: Vec<&str> = objects
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"Namespace"));
    assert_eq!(kinds.iter().filter(|k| **k == "NetworkPolicy").count(), 6);
    let probe = kinds.iter().position(|k| *k == "Pod").unwrap();
    let deployments: Vec<usize> = (0..kinds.len())
        .filter(|i| kinds[*i] == "Deployment")
        .collect();
    assert!(
        deployments[0] < probe && probe < deployments[1],
        "the probe after the sidecar (its positive control) and before every service: {kinds:?}"
    );
}
