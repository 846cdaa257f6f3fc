//! Revisions: the same config from a folder and from custom resources has one hash; reformatting
//! and reordering keys leave it alone; every change of meaning moves it; the Runtime does not
//! count; a pin that does not match is reported with both hashes.

mod support;

use std::path::Path;

use afe_config::{CfgCode, Revision, load_folder, load_objects};
use serde_json::Value;

fn hash_of(dir: &Path) -> String {
    Revision::of(&load_folder(dir).unwrap_or_else(|e| panic!("{e}"))).hash
}

fn example_hash() -> String {
    hash_of(&support::example_config())
}

#[test]
fn a_folder_and_the_equivalent_custom_resources_have_one_revision() {
    let (objects, data) = support::cluster_source();
    let from_cluster =
        load_objects(&objects, "afe-source", &data).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(Revision::of(&from_cluster).hash, example_hash());
    // The ConfigMap's manifest keys are read as manifests too: moving one object there changes
    // nothing.
    let (mut objects, mut data) = support::cluster_source();
    let plugin = objects.iter().position(|o| o["kind"] == "Plugin").unwrap();
    let mut moved = objects.remove(plugin);
    moved.as_object_mut().unwrap().remove("status");
    for key in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    ] {
        moved["metadata"].as_object_mut().unwrap().remove(key);
    }
    data.insert(
        "plugins.yaml".to_string(),
        serde_saphyr::to_string(&moved).unwrap(),
    );
    let mixed = load_objects(&objects, "afe-source", &data).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(Revision::of(&mixed).hash, example_hash());
}

/// Rebuilds every mapping with its keys in reverse order.
fn reversed(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map.iter().rev() {
                out.insert(k.clone(), reversed(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

#[test]
fn reformatting_and_reordering_keys_do_not_change_the_revision() {
    let dir = support::scratch("reformatted");
    support::copy_example(&dir);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        // Block style instead of flow style, no comments, other quoting, keys in another order,
        // blank lines between documents.
        let rewritten: Vec<String> = support::documents(&path)
            .iter()
            .map(|doc| serde_saphyr::to_string(&reversed(doc)).unwrap())
            .collect();
        let text = rewritten.join("\n\n---\n\n");
        assert_ne!(text, std::fs::read_to_string(&path).unwrap());
        std::fs::write(&path, text).unwrap();
    }
    assert_eq!(hash_of(&dir), example_hash());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A copy of the example with one textual change in one file.
fn changed(name: &str, file: &str, from: &str, to: &str) -> String {
    let dir = support::scratch(name);
    support::copy_example(&dir);
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    let hash = hash_of(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    hash
}

#[test]
fn every_change_of_meaning_changes_the_revision() {
    let base = example_hash();
    let changes = [
        (
            "prompt",
            "prompts/coder.md",
            "failing test",
            "failing  test",
        ),
        ("model", "agents.yaml", "temperature: 0", "temperature: 0.2"),
        (
            "tools",
            "agents.yaml",
            "ws.test, code-search",
            "code-search",
        ),
        ("budget", "agents.yaml", "usd: 2.00", "usd: 2.50"),
        ("when", "flows.yaml", "triage.risk <= 3", "triage.risk <= 2"),
        (
            "needs",
            "flows.yaml",
            "needs: [review, test]",
            "needs: [test]",
        ),
        (
            "egress",
            "flows.yaml",
            "egress: [pypi.org,",
            "egress: [files.pypi.org,",
        ),
        ("cpus", "flows.yaml", "cpus: 2", "cpus: 3"),
        (
            "image",
            "flows.yaml",
            "afe-sandbox-python",
            "afe-sandbox-go",
        ),
        ("exec", "flows.yaml", "[make, test]", "[make, check]"),
        (
            "field",
            "schemas.yaml",
            "minimum: 1, maximum: 5",
            "minimum: 0, maximum: 5",
        ),
        (
            "optional",
            "schemas.yaml",
            "optional: [labels]",
            "optional: []",
        ),
        (
            "description",
            "flows.yaml",
            "Clone, triage, fix, review, test, push",
            "Clone, triage, fix, test, push",
        ),
        ("plugin", "plugins.yaml", "--stdio", "--serve"),
    ];
    for (name, file, from, to) in changes {
        assert_ne!(
            changed(name, file, from, to),
            base,
            "{name}: {from:?} -> {to:?}"
        );
    }
}

#[test]
fn what_means_the_same_hashes_the_same() {
    let base = example_hash();
    let same = [
        // Sets written in another order, a size in other units, a default written out.
        (
            "egress-order",
            "flows.yaml",
            "[pypi.org, \"*.pythonhosted.org\"]",
            "[\"*.pythonhosted.org\", pypi.org]",
        ),
        (
            "tools-order",
            "agents.yaml",
            "[ws.read, code-search.search]",
            "[code-search.search, ws.read]",
        ),
        (
            "needs-order",
            "flows.yaml",
            "needs: [review, test]",
            "needs: [test, review]",
        ),
        (
            "memory-units",
            "flows.yaml",
            "memory: 4Gi",
            "memory: 4096Mi",
        ),
        ("cpus-float", "flows.yaml", "cpus: 2", "cpus: 2.0"),
        (
            "runtime-class-default",
            "flows.yaml",
            "memory: 4Gi",
            "memory: 4Gi\n    runtimeClassName: runc",
        ),
        (
            "field-shorthand",
            "schemas.yaml",
            "branch: string",
            "branch: {type: string}",
        ),
        // The Runtime is not part of a revision.
        (
            "runtime",
            "runtime.yaml",
            "path: .afe/afe.db",
            "path: /var/lib/afe/afe.db",
        ),
    ];
    for (name, file, from, to) in same {
        assert_eq!(
            changed(name, file, from, to),
            base,
            "{name}: {from:?} -> {to:?}"
        );
    }
}

#[test]
fn the_example_engine_pins_the_example_revision() {
    let pin = support::documents(&support::cluster_dir().join("engine.yaml"))[0]
        .pointer("/spec/config/revision")
        .and_then(Value::as_str)
        .unwrap()
        .to_string();
    let revision = Revision::of(&load_folder(&support::example_config()).unwrap());
    assert!(
        revision.matches_pin(&pin),
        "examples/afe/cluster/engine.yaml pins {pin}; the example config is {} — update the pin",
        revision.hash
    );
}

#[test]
fn a_pin_that_differs_is_reported_with_both_hashes() {
    let dir = support::scratch("pinned");
    support::copy_example(&dir);
    let engine = std::fs::read_to_string(support::cluster_dir().join("engine.yaml")).unwrap();
    let pin = "0123456789ab";
    std::fs::write(
        dir.join("engine.yaml"),
        engine.replace("revision: 04cf1cc0ea69", &format!("revision: \"{pin}\"")),
    )
    .unwrap();
    let config = load_folder(&dir).unwrap();
    let revision = Revision::of(&config);
    let problems = revision.pin_problems(&config);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].code, CfgCode::RevisionMismatch);
    assert!(problems[0].message.contains("RevisionMismatch"));
    assert!(problems[0].message.contains(pin));
    assert!(problems[0].message.contains(&revision.hash));
    assert_eq!(problems[0].place.path, "spec.config.revision");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The canonical form is a contract with every ticket already pinned to a revision: a known
/// config has a known hash, written here by hand. A change to how configs are normalized or
/// hashed that would re-hash stored revisions fails this test; if the change is meant, it needs
/// a migration of the stored pins, not a new literal.
#[test]
fn a_known_config_has_a_known_revision_hash() {
    let dir = support::scratch("known");
    std::fs::write(
        dir.join("flow.yaml"),
        "apiVersion: afe.dev/v1alpha1\nkind: Flow\nmetadata: {name: work}\nspec:\n  input: job\n  nodes:\n    - {id: n1, exec: [step, \"1\"]}\n    - {id: n2, exec: [step, \"2\"], needs: [n1]}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("schema.yaml"),
        "apiVersion: afe.dev/v1alpha1\nkind: Schema\nmetadata: {name: job}\nspec:\n  fields: {n: integer}\n",
    )
    .unwrap();
    let revision = Revision::of(&load_folder(&dir).unwrap_or_else(|e| panic!("{e}")));
    std::fs::remove_dir_all(&dir).unwrap();
    // What the config means, written out: its flow and schema as written, the sandbox's
    // defaults filled in.
    assert_eq!(
        afe_config::revision::canonical_json(&revision.normalized),
        r#"{"agents":{},"apiVersion":"afe.dev/v1alpha1","flows":{"work":{"input":"job","nodes":[{"exec":["step","1"],"id":"n1"},{"exec":["step","2"],"id":"n2","needs":["n1"]}],"sandbox":{"cpus":1.0,"egress":[],"env":[],"image":"afe-sandbox","memoryBytes":2147483648,"runtimeClassName":"runc"}}},"plugins":{},"schemas":{"job":{"schema":{"additionalProperties":false,"properties":{"n":{"type":"integer"}},"required":["n"],"type":"object"}}}}"#
    );
    // `printf '%s' '<the text above>' | sha256sum`, computed outside the code under test.
    assert_eq!(
        revision.hash,
        "152d409587df4c6f7a83705931c68ab8ef0fc2c018d37ec0709fd3739166c4a4"
    );
}
