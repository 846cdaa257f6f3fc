//! Every rendered object of the example environment passes `kubernetes-validate --strict` (the
//! official schemas, from PyPI) for Kubernetes 1.30 through the newest version the installed
//! package ships. `.ci/install` installs it; without it this fails, saying so.

mod support;

use std::process::Command;

use af_kube::render::to_yaml;

/// The Kubernetes versions the installed package has strict schemas for, from 1.30 on.
fn versions() -> Vec<String> {
    let listed = Command::new("python3")
        .args([
            "-c",
            "import kubernetes_validate, os\n\
             d = os.path.join(os.path.dirname(kubernetes_validate.__file__), 'kubernetes-json-schema')\n\
             print('\\n'.join(n[1:-len('-local-strict')] for n in os.listdir(d) if n.endswith('-local-strict')))",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        listed.status.success(),
        "kubernetes-validate is not installed (pip install kubernetes-validate; .ci/install does): {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let mut versions: Vec<(u32, u32, String)> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|v| {
            let mut parts = v.split('.');
            let major = parts.next()?.parse().ok()?;
            let minor = parts.next()?.parse().ok()?;
            Some((major, minor, v.to_string()))
        })
        .filter(|(major, minor, _)| (*major, *minor) >= (1, 30))
        .collect();
    versions.sort();
    versions.into_iter().map(|(_, _, v)| v).collect()
}

#[test]
fn every_rendered_object_passes_the_official_schemas_strictly() {
    let versions = versions();
    assert!(
        versions.first().map(String::as_str) == Some("1.30.0") && versions.len() >= 2,
        "schemas from 1.30 on: {versions:?}"
    );
    let dir = std::env::temp_dir().join(format!("af-kube-schemas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (name, manifest) in [
        ("shop", support::shop()),
        ("no-domain", support::without_domain(support::shop())),
        ("no-resources", support::without_resources(support::shop())),
        ("netlock", support::with_netlock(support::shop())),
    ] {
        // One file per object: a failure names the object.
        for (index, object) in support::rendered(&manifest)
            .in_apply_order()
            .iter()
            .enumerate()
        {
            let path = dir.join(format!("{name}-{index:02}.yaml"));
            std::fs::write(&path, to_yaml(std::slice::from_ref(object)).unwrap()).unwrap();
            files.push(path);
        }
    }
    for version in &versions {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "--quiet", "-k", version])
            .args(&files)
            .output()
            .expect("kubernetes-validate runs");
        assert!(
            out.status.success(),
            "Kubernetes {version}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!(
        "{} objects valid for Kubernetes {}",
        files.len(),
        versions.join(", ")
    );
}
