//! `checkov`'s Kubernetes checks on the rendered example environment: every failing check is
//! explained in docs/security.md, and every explanation there is of a check that does fail.
//! `.ci/install` installs checkov; without it this fails, saying so.

mod support;

use std::collections::BTreeSet;
use std::process::Command;

use af_kube::render::to_yaml;

fn explained() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md"),
    )
    .unwrap();
    doc.lines()
        .filter(|line| line.starts_with("### "))
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
    let dir = std::env::temp_dir().join(format!("af-kube-checkov-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, manifest) in [
        ("shop", support::shop()),
        ("no-domain", support::without_domain(support::shop())),
        ("no-resources", support::without_resources(support::shop())),
        ("netlock", support::with_netlock(support::shop())),
    ] {
        let yaml = to_yaml(&support::rendered(&manifest).in_apply_order()).unwrap();
        std::fs::write(dir.join(format!("{name}.yaml")), yaml).unwrap();
    }
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
        .expect("checkov is not installed (pip install checkov; .ci/install does)");
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
    let passed = reports
        .iter()
        .map(|r| r["summary"]["passed"].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert!(
        passed > 100,
        "checkov looked at the objects: {passed} passed checks"
    );
    let explained = explained();
    let unexplained: Vec<_> = failed.difference(&explained).collect();
    let stale: Vec<_> = explained.difference(&failed).collect();
    assert!(
        unexplained.is_empty(),
        "failing checks docs/security.md does not explain: {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/security.md explains checks that pass now; remove them: {stale:?}"
    );
}
