//! `kubernetes-validate --strict` (PyPI; `.ci/install` installs it) on rendered objects, for every
//! Kubernetes version from 1.30 that the installed package has strict schemas for.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The versions the installed package has strict schemas for, from 1.30 on, oldest first.
pub fn versions() -> Vec<String> {
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
        "kubernetes-validate is not installed (.ci/install installs it): {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let mut versions: Vec<(u32, u32, String)> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|v| {
            let mut parts = v.split('.');
            Some((
                parts.next()?.parse().ok()?,
                parts.next()?.parse().ok()?,
                v.to_string(),
            ))
        })
        .filter(|(major, minor, _)| (*major, *minor) >= (1, 30))
        .collect();
    versions.sort();
    versions.into_iter().map(|(_, _, v)| v).collect()
}

/// Writes each YAML document to its own file in `dir` (a failure names the object).
pub fn write_each(dir: &Path, documents: &[String]) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    documents
        .iter()
        .enumerate()
        .map(|(n, text)| {
            let path = dir.join(format!("object-{n:02}.yaml"));
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect()
}

/// Fails unless every file passes on every version (three at least).
pub fn assert_strict_on_every_version(files: &[PathBuf]) {
    let versions = versions();
    assert!(
        versions.len() >= 3,
        "three Kubernetes versions at least: {versions:?}"
    );
    for version in &versions {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "--quiet", "-k", version])
            .args(files)
            .output()
            .expect("kubernetes-validate runs");
        assert!(
            out.status.success(),
            "Kubernetes {version}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
