//! The CustomResourceDefinitions: the committed files are exactly what the types generate (CI
//! fails on drift: run `afe crdgen`); they pass `kubernetes-validate --strict` as
//! CustomResourceDefinition objects; and every example object validates against its CRD's
//! openAPIV3Schema.

mod support;

use std::process::Command;

use serde_json::Value;

#[test]
fn the_committed_crds_are_the_generated_ones() {
    let dir = support::repo().join(afe_config::crd::CRD_DIR);
    let mut committed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    committed.sort();
    let mut generated = afe_config::crd::files();
    generated.sort();
    assert_eq!(
        committed,
        generated.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        "the files in {} are not the generated set: run `afe crdgen`",
        dir.display()
    );
    for (name, text) in generated {
        let on_disk = std::fs::read_to_string(dir.join(&name)).unwrap();
        assert!(
            on_disk == text,
            "{name} differs from what the types generate: run `afe crdgen` and commit the result"
        );
    }
}

#[test]
fn the_crds_have_full_names_short_names_columns_and_a_status_subresource() {
    let crds = afe_config::crd::definitions();
    let names: Vec<(String, Vec<String>)> = crds
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                c.spec.names.short_names.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("schemas.afe.dev", vec!["afeschema"]),
            ("agents.afe.dev", vec!["afeagent"]),
            ("flows.afe.dev", vec!["afeflow"]),
            ("plugins.afe.dev", vec!["afeplugin"]),
            ("agentflowengines.afe.dev", vec!["afe"]),
        ]
        .map(|(n, s)| (n.to_string(), s.into_iter().map(String::from).collect()))
    );
    let engine = &crds[4].spec.versions[0];
    assert!(engine.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<&str> = engine
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Revision", "Ready", "Age"]);
    assert!(
        crds[1].spec.versions[0]
            .additional_printer_columns
            .is_some()
    );
}

#[test]
fn the_crds_pass_the_official_schemas_strictly() {
    let dir = support::repo().join(afe_config::crd::CRD_DIR);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // The oldest Kubernetes this project supports and the newest the package knows.
    for version in [Some("1.30.0"), None] {
        let mut command = Command::new("kubernetes-validate");
        command.args(["--strict", "--quiet"]);
        if let Some(version) = version {
            command.args(["-k", version]);
        }
        let out = command.args(&files).output().unwrap_or_else(|err| {
            panic!("kubernetes-validate cannot run ({err}); pip install kubernetes-validate (.ci/install does)")
        });
        assert!(
            out.status.success(),
            "Kubernetes {version:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A CRD's openAPIV3Schema, as JSON.
fn open_api_schema(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    let version = &crd.spec.versions[0];
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    serde_json::to_value(schema.expect("every afe CRD has a schema")).unwrap()
}

/// The CRD schema of each kind, as jsonschema validators.
fn validators() -> Vec<(String, jsonschema::Validator)> {
    afe_config::crd::definitions()
        .into_iter()
        .map(|crd| {
            (
                crd.spec.names.kind.clone(),
                jsonschema::validator_for(&open_api_schema(&crd)).unwrap(),
            )
        })
        .collect()
}

#[test]
fn every_example_object_validates_against_its_crd_schema() {
    let validators = validators();
    let mut files: Vec<_> = ["examples/afe/config", "examples/afe/cluster"]
        .iter()
        .flat_map(|d| std::fs::read_dir(support::repo().join(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut checked = Vec::new();
    for file in &files {
        for object in support::documents(file) {
            let kind = object["kind"].as_str().unwrap().to_string();
            let Some((_, validator)) = validators.iter().find(|(k, _)| *k == kind) else {
                assert!(
                    ["Runtime", "ConfigMap"].contains(&kind.as_str()),
                    "{kind} in {} has no CRD",
                    file.display()
                );
                continue;
            };
            let errors: Vec<String> = validator
                .iter_errors(&object)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{} {kind}: {errors:?}", file.display());
            checked.push(kind);
        }
    }
    for kind in ["Schema", "Agent", "Flow", "Plugin", "AgentFlowEngine"] {
        assert!(
            checked.iter().any(|k| k == kind),
            "no example {kind} was checked"
        );
    }
    // The check can fail: a wrong type in an example is caught.
    let mut wrong =
        support::documents(&support::repo().join("examples/afe/config/flows.yaml")).remove(0);
    wrong["spec"]["nodes"] = Value::from("clone");
    let (_, flow) = validators.iter().find(|(k, _)| k == "Flow").unwrap();
    assert!(!flow.is_valid(&wrong));
}

/// Kubernetes' rules for a structural schema (what the API server demands of a CRD): every node
/// has a type unless it keeps unknown fields or is int-or-string; `anyOf`/`oneOf`/`allOf`/`not`
/// branches set no type, description, default, nullable or additionalProperties; `properties`
/// and `additionalProperties` are not both set.
fn structural_problems(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(map) = node.as_object() else { return };
    let free = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if !map.contains_key("type") && !free {
        problems.push(format!("{path}: no type"));
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        problems.push(format!("{path}: properties and additionalProperties"));
    }
    for junction in ["anyOf", "oneOf", "allOf"] {
        for (i, branch) in map
            .get(junction)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            for key in [
                "type",
                "description",
                "default",
                "nullable",
                "additionalProperties",
            ] {
                if branch.get(key).is_some() {
                    problems.push(format!("{path}.{junction}[{i}]: sets {key}"));
                }
            }
        }
    }
    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            structural_problems(child, &format!("{path}.{name}"), problems);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get(key).filter(|c| c.is_object()) {
            structural_problems(child, &format!("{path}[{key}]"), problems);
        }
    }
}

#[test]
fn the_crd_schemas_are_structural() {
    for crd in afe_config::crd::definitions() {
        let mut problems = Vec::new();
        structural_problems(&open_api_schema(&crd), &crd.spec.names.kind, &mut problems);
        assert!(problems.is_empty(), "{problems:#?}");
    }
    // The rule catches what the first generation of these CRDs had: a string-or-mapping value
    // written as two empty anyOf branches under `type: object`.
    let mut problems = Vec::new();
    structural_problems(
        &serde_json::json!({"type": "object", "properties": {"f": {"anyOf": [{"type": "string"}, {}]}}}),
        "x",
        &mut problems,
    );
    assert_eq!(problems, ["x.f: no type", "x.f.anyOf[0]: sets type"]);
}
