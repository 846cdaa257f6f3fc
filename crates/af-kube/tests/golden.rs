//! The example environment's objects as reviewed YAML under tests/golden/: with and without a
//! domain, with and without sizes, with netlock. A change to rendering shows up as a diff of these files; run
//! with AF_UPDATE_GOLDEN=1 to rewrite them, then review the diff.

mod support;

use af_kube::render::to_yaml;

fn check(name: &str, manifest: af_manifest::Manifest) {
    let yaml = to_yaml(&support::rendered(&manifest).in_apply_order()).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var("AF_UPDATE_GOLDEN").is_ok() {
        // CI compares with what was reviewed; rewriting there would pass any rendering.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "AF_UPDATE_GOLDEN is refused with CI=true"
        );
        std::fs::write(&path, &yaml).unwrap();
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing: run with AF_UPDATE_GOLDEN=1", path.display()));
    assert!(
        golden == yaml,
        "{} differs from the rendering; if the change is meant, rerun with AF_UPDATE_GOLDEN=1 and review the diff",
        path.display()
    );
}

#[test]
fn shop_with_a_domain() {
    check("shop.yaml", support::shop());
}

#[test]
fn shop_without_a_domain() {
    check(
        "shop-no-domain.yaml",
        support::without_domain(support::shop()),
    );
}

#[test]
fn shop_without_sizes() {
    check(
        "shop-no-resources.yaml",
        support::without_resources(support::shop()),
    );
}

#[test]
fn shop_with_netlock() {
    check("shop-netlock.yaml", support::with_netlock(support::shop()));
}
