//! Paths of the examples, and reading a cluster's YAML as the objects an API server returns.

#![allow(dead_code)] // each test binary uses a part

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn example_config() -> PathBuf {
    repo().join("examples/afe/config")
}

pub fn cluster_dir() -> PathBuf {
    repo().join("examples/afe/cluster")
}

/// Every document of a YAML file, as JSON.
pub fn documents(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// The example's custom resources (as a server returns them: with server metadata and status
/// added) and its ConfigMap's data.
pub fn cluster_source() -> (Vec<Value>, BTreeMap<String, String>) {
    let mut objects = documents(&cluster_dir().join("resources.yaml"));
    for (i, object) in objects.iter_mut().enumerate() {
        let metadata = object["metadata"].as_object_mut().unwrap();
        metadata.insert(
            "uid".into(),
            Value::from(format!("00000000-0000-0000-0000-{i:012}")),
        );
        metadata.insert("resourceVersion".into(), Value::from("4711"));
        metadata.insert("generation".into(), Value::from(1));
        metadata.insert(
            "creationTimestamp".into(),
            Value::from("2026-11-30T12:00:00Z"),
        );
        metadata.insert("namespace".into(), Value::from("afe"));
        metadata.insert(
            "managedFields".into(),
            serde_json::json!([{"manager": "kubectl", "operation": "Apply"}]),
        );
        object["status"] = serde_json::json!({});
    }
    let config_map = documents(&cluster_dir().join("configmap.yaml")).remove(0);
    let data = config_map["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    (objects, data)
}

/// A fresh empty folder of its own (tests of one binary run in parallel).
pub fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("afe-config-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Copies the example config folder (prompts included) into `dir`.
pub fn copy_example(dir: &std::path::Path) {
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.path().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    copy(&example_config(), dir);
}
