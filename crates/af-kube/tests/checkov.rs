//! `checkov`'s Kubernetes checks on the rendered example environment: every failing check is
//! explained in docs/security.md's section on af's environments, and every explanation there is
//! of a check that does fail.
//! `.ci/install` installs checkov; without it this fails, saying so.

mod support;

use af_kube::render::to_yaml;

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
    afe_testkit::checkov::assert_explained(
        &dir,
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md"),
        "af's environments",
        100,
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
