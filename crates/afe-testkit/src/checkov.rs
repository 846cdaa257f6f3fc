//! checkov on rendered Kubernetes objects, held to docs/security.md: every check that fails is
//! explained under the section of the objects' owner (`## <title>`, one `#### CKV_K8S_…` heading
//! per check), and every check explained there does fail — an explanation of a check that now
//! passes is stale. `.ci/install` installs checkov; without it this fails, saying so.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The checks that fail on the objects in `dir`, and how many passed.
pub fn failed_checks(dir: &Path) -> (BTreeSet<String>, u64) {
    let out = Command::new("checkov")
        .args([
            "--framework",
            "kubernetes",
            "--quiet",
            "--output",
            "json",
            "--directory",
        ])
        .arg(dir)
        .output()
        .expect("checkov is not installed (.ci/install installs it)");
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
    let failed = reports
        .iter()
        .flat_map(|r| {
            r["results"]["failed_checks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|check| check["check_id"].as_str().map(str::to_string))
        .collect();
    let passed = reports
        .iter()
        .map(|r| r["summary"]["passed"].as_u64().unwrap_or(0))
        .sum();
    (failed, passed)
}

/// The checks docs/security.md explains in the section whose `## ` heading starts with `title`:
/// its `#### ` headings' CKV_K8S ids.
pub fn explained(security_md: &Path, title: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(security_md).expect("docs/security.md");
    let heading = format!("## {title}");
    text.lines()
        .skip_while(|line| !line.starts_with(&heading))
        .skip(1)
        .take_while(|line| !line.starts_with("## "))
        .filter(|line| line.starts_with("#### "))
        .flat_map(|line| {
            line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("CKV_K8S_"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Runs checkov on `dir` and holds its failures to the section `title` of `security_md`.
pub fn assert_explained(dir: &Path, security_md: &Path, title: &str, min_passed: u64) {
    let (failed, passed) = failed_checks(dir);
    assert!(
        passed >= min_passed,
        "checkov looked at the objects: {passed} passed checks"
    );
    let explained = explained(security_md, title);
    assert!(
        !explained.is_empty(),
        "docs/security.md has no section \"## {title}\" with #### CKV_K8S_… headings"
    );
    let unexplained: Vec<_> = failed.difference(&explained).collect();
    let stale: Vec<_> = explained.difference(&failed).collect();
    assert!(
        unexplained.is_empty(),
        "failing checks docs/security.md does not explain under \"{title}\": {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/security.md explains checks under \"{title}\" that pass now: {stale:?}"
    );
}
