//! The ticket Pod and PVC as rendered, and the admin's objects in `deploy/kind/sandbox/`, under
//! the official schemas (`kubernetes-validate --strict`, every version from 1.30 the installed
//! package has) and checkov (every failing check explained in docs/security.md's section on the
//! sandbox, and every explanation there of a check that fails). `.ci/install` installs both;
//! without them this fails, saying so.

mod support;

use std::path::{Path, PathBuf};

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

#[test]
fn every_failing_check_is_explained_and_every_explanation_is_of_a_failing_check() {
    let dir = std::env::temp_dir().join(format!("afe-kube-checkov-{}", std::process::id()));
    objects(&dir);
    afe_testkit::checkov::assert_explained(
        &dir,
        &root().join("docs/security.md"),
        "afe's ticket sandbox",
        30,
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
