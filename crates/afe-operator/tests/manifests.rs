//! `deploy/operator/` (the operator's install) and `deploy/operator/admin/` (the admin's examples)
//! as `kubectl apply -k` takes them — each kustomization exactly its files — under the official
//! schemas (`kubernetes-validate --strict`, every version from 1.30), and checkov on them and on
//! everything the operator builds: every failing check explained in docs/security.md's section
//! on the operator, and every explanation there of a check that fails.

use std::path::{Path, PathBuf};

use afe_config::engine::AgentFlowEngine;
use afe_operator::build::{self, Inputs};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files a kustomization lists (a listed folder is another kustomization, checked by its own
/// tests), after holding it to plain `resources`: what `kubectl apply -k` applies is these files.
fn listed(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    let kustomization: Value = serde_saphyr::from_str(&text).unwrap();
    let keys: Vec<&String> = kustomization.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["apiVersion", "kind", "resources"],
        "{}: resources only, so its files are what it applies",
        dir.display()
    );
    kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| dir.join(r.as_str().unwrap()))
        .filter(|path| !path.is_dir())
        .collect()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn each_kustomization_is_exactly_its_files() {
    for (dir, folders) in [
        (root().join("deploy/operator"), vec!["", "crds"]),
        (root().join("deploy/operator/admin"), vec![""]),
    ] {
        let mut on_disk: Vec<PathBuf> = folders
            .iter()
            .flat_map(|f| yaml_files(&dir.join(f)))
            .collect();
        on_disk.sort();
        let mut applied = listed(&dir);
        applied.sort();
        let applied: Vec<PathBuf> = applied
            .into_iter()
            .map(|p| {
                p.canonicalize()
                    .unwrap_or_else(|_| panic!("{} is listed and missing", p.display()))
            })
            .collect();
        let on_disk: Vec<PathBuf> = on_disk
            .into_iter()
            .map(|p| p.canonicalize().unwrap())
            .collect();
        assert_eq!(applied, on_disk, "{}", dir.display());
    }
}

/// Every document of every file `kubectl apply -k` would apply, of both kustomizations.
fn deployed() -> Vec<String> {
    [
        root().join("deploy/operator"),
        root().join("deploy/operator/admin"),
    ]
    .iter()
    .flat_map(|dir| listed(dir))
    .flat_map(|file| {
        let text = std::fs::read_to_string(&file).unwrap();
        serde_saphyr::from_multiple::<Value>(&text).unwrap()
    })
    .map(|object| serde_saphyr::to_string(&object).unwrap())
    .collect()
}

fn kind(document: &str) -> String {
    let object: Value = serde_saphyr::from_str(document).unwrap();
    object["kind"].as_str().unwrap().to_string()
}

#[test]
fn everything_deployed_passes_the_official_schemas_strictly_on_every_version() {
    // KEDA's kinds are not in the official schemas.
    let documents: Vec<String> = deployed()
        .into_iter()
        .filter(|d| kind(d) != "TriggerAuthentication")
        .collect();
    assert!(documents.len() > 15, "{}", documents.len());
    let dir = std::env::temp_dir().join(format!("afe-operator-deploy-{}", std::process::id()));
    afe_testkit::kubernetes_validate::assert_strict_on_every_version(
        &afe_testkit::kubernetes_validate::write_each(&dir, &documents),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn engine(managed: bool) -> AgentFlowEngine {
    let text = std::fs::read_to_string(root().join("examples/afe/cluster/engine.yaml")).unwrap();
    let mut engine: AgentFlowEngine = serde_saphyr::from_str(&text).unwrap();
    engine.metadata.uid = Some("0b6e2c1a-7f00-4c5e-9a61-000000000001".to_string());
    if managed {
        engine.spec.afe.store =
            serde_json::from_value(serde_json::json!({"managed": {"instances": 3}})).unwrap();
        engine.spec.afe.broker =
            serde_json::from_value(serde_json::json!({"managed": {}})).unwrap();
    }
    engine
}

#[test]
fn every_failing_check_on_the_operators_objects_is_explained() {
    let files = std::collections::BTreeMap::from([("flow.yaml".to_string(), String::new())]);
    let mut documents: Vec<String> = deployed()
        .into_iter()
        .filter(|d| kind(d) != "CustomResourceDefinition")
        .collect();
    for managed in [false, true] {
        let engine = engine(managed);
        let inputs = Inputs {
            engine: &engine,
            revision: "04cf1cc0ea69d0ee",
            files: &files,
            keda: true,
            cloudnative_pg: true,
        };
        documents.extend(
            build::desired(&inputs)
                .iter()
                .map(|o| serde_saphyr::to_string(o).unwrap()),
        );
    }
    let dir = std::env::temp_dir().join(format!("afe-operator-checkov-{}", std::process::id()));
    afe_testkit::kubernetes_validate::write_each(&dir, &documents);
    afe_testkit::checkov::assert_explained(
        &dir,
        &root().join("docs/security.md"),
        "afe's operator",
        50,
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
