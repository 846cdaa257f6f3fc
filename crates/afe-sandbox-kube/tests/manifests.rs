//! The ticket Pod and PVC as rendered, and the admin's objects in `deploy/kind/sandbox/`, under
//! the official schemas (`kubernetes-validate --strict`, every version from 1.30 the installed
//! package has) and checkov (every failing check explained in docs/security.md's section on the
//! sandbox, and every explanation there of a check that fails). `.ci/install` installs both;
//! without them this fails, saying so.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every object, one file each (a failure names it), in a fresh folder.
fn objects(dir: &Path) -> Vec<PathBuf> {
    let mut texts = Vec::new();
    let open = support::spec(&["pypi.org"]);
    for yaml in [
        support::rendered(&support::spec(&[]), None),
        support::rendered(&open, Some(&support::proxy_config(&open))),
    ] {
        texts.extend(
            yaml.split("---\n")
                .filter(|d| !d.trim().is_empty())
                .map(str::to_string),
        );
    }
    for file in [
        "namespace.yaml",
        "role.yaml",
        "rolebinding.yaml",
        "networkpolicy.yaml",
    ] {
        texts.push(std::fs::read_to_string(root().join("deploy/kind/sandbox").join(file)).unwrap());
    }
    afe_testkit::kubernetes_validate::write_each(dir, &texts)
}

#[test]
fn every_object_passes_the_official_schemas_strictly_on_every_version() {
    let dir = std::env::temp_dir().join(format!("afe-kube-schemas-{}", std::process::id()));
    afe_testkit::kubernetes_validate::assert_strict_on_every_version(&objects(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The checks docs/security.md explains for the sandbox: its `#### CKV_K8S_…` headings.
fn explained() -> BTreeSet<String> {
    std::fs::read_to_string(root().join("docs/security.md"))
        .unwrap()
        .lines()
        .filter(|line| line.starts_with("#### "))
        .flat_map(|line| {
            line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("CKV_K8S_"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_failing_check_is_explained_and_every_explanation_is_of_a_failing_check() {
    let dir = std::env::temp_dir().join(format!("afe-kube-checkov-{}", std::process::id()));
    objects(&dir);
    let out = Command::new("checkov")
        .args([
            "--framework",
            "kubernetes",
            "--quiet",
            "--output",
            "json",
            "--directory",
        ])
        .arg(&dir)
        .output()
        .expect("checkov is not installed (.ci/install installs it)");
    std::fs::remove_dir_all(&dir).unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let reports = match report {
        serde_json::Value::Array(reports) => reports,
        single => vec![single],
    };
    let failed: BTreeSet<String> = reports
        .iter()
        .flat_map(|r| {
            r["results"]["failed_checks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|check| check["check_id"].as_str().unwrap().to_string())
        .collect();
    let passed: u64 = reports
        .iter()
        .map(|r| r["summary"]["passed"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        passed > 30,
        "checkov looked at the objects: {passed} passed checks"
    );
    let explained = explained();
    let unexplained: Vec<_> = failed.difference(&explained).collect();
    let stale: Vec<_> = explained.difference(&failed).collect();
    assert!(
        unexplained.is_empty(),
        "failing checks docs/security.md does not explain for the sandbox: {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/security.md explains sandbox checks that pass now: {stale:?}"
    );
}
