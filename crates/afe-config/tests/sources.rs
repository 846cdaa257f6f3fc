//! The two sources and their prompt references: a folder resolves `file`, a cluster resolves
//! `configMapKey`; each refuses the other's, and a file may not leave the folder. A cluster's
//! problems name the object; a ConfigMap key's YAML problems name the key and the line.

mod support;

use afe_config::{CfgCode, Origin, load_folder, load_objects};

#[test]
fn a_custom_resource_cannot_name_a_file() {
    let (mut objects, data) = support::cluster_source();
    let triager = objects
        .iter_mut()
        .find(|o| o["metadata"]["name"] == "triager")
        .unwrap();
    triager["spec"]["promptRef"] = serde_json::json!({"file": "prompts/triager.md"});
    let invalid = load_objects(&objects, "afe-source", &data).unwrap_err();
    assert_eq!(invalid.codes(), [CfgCode::Prompt]);
    let problem = &invalid.diagnostics[0];
    assert_eq!(problem.place.origin, Origin::Object("Agent/triager".into()));
    assert_eq!(problem.place.path, "spec.promptRef");
    assert_eq!(problem.place.line_column, None);
    assert!(problem.help.contains("configMapKey"), "{problem}");
}

#[test]
fn a_missing_config_map_key_is_named_with_the_keys_there_are() {
    let (objects, mut data) = support::cluster_source();
    data.remove("coder.md");
    let invalid = load_objects(&objects, "afe-source", &data).unwrap_err();
    assert_eq!(invalid.codes(), [CfgCode::Prompt]);
    assert!(
        invalid.diagnostics[0]
            .message
            .contains("no key \"coder.md\"")
    );
    assert!(invalid.diagnostics[0].help.contains("triager.md"));
}

#[test]
fn a_folder_cannot_name_a_config_map_key_nor_a_file_outside_it() {
    let dir = support::scratch("sources");
    support::copy_example(&dir);
    let agents = std::fs::read_to_string(dir.join("agents.yaml")).unwrap();
    let agents = agents
        .replace(
            "promptRef: {file: prompts/triager.md}",
            "promptRef: {configMapKey: triager.md}",
        )
        .replace(
            "promptRef: {file: prompts/coder.md}",
            "promptRef: {file: ../../etc/passwd}",
        );
    std::fs::write(dir.join("agents.yaml"), agents).unwrap();
    let invalid = load_folder(&dir).unwrap_err();
    assert_eq!(
        invalid.codes(),
        [CfgCode::Prompt, CfgCode::Prompt],
        "{invalid}"
    );
    let messages: Vec<&str> = invalid
        .diagnostics
        .iter()
        .map(|d| d.message.as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("leaves the config folder")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("this config is a folder")),
        "{messages:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_config_map_manifest_with_bad_yaml_is_placed_by_key_and_line() {
    let (objects, mut data) = support::cluster_source();
    data.insert("extra.yaml".into(), "kind: Flow\nspec: [unclosed\n".into());
    let invalid = load_objects(&objects, "afe-source", &data).unwrap_err();
    assert_eq!(invalid.codes(), [CfgCode::Syntax]);
    let place = &invalid.diagnostics[0].place;
    assert_eq!(
        place.origin,
        Origin::Object("ConfigMap/afe-source[extra.yaml]".into())
    );
    assert!(place.line_column.is_some());
}

#[test]
fn unknown_keys_in_a_custom_resource_are_refused_with_the_object_and_path() {
    let (mut objects, data) = support::cluster_source();
    let flow = objects.iter_mut().find(|o| o["kind"] == "Flow").unwrap();
    flow["spec"]["nodes"][0]["retries"] = serde_json::json!(3);
    let invalid = load_objects(&objects, "afe-source", &data).unwrap_err();
    assert_eq!(invalid.codes(), [CfgCode::UnknownKey]);
    assert_eq!(
        invalid.diagnostics[0].place.origin,
        Origin::Object("Flow/fix-bug".into())
    );
    assert_eq!(invalid.diagnostics[0].place.path, "spec.nodes[0].retries");
}

#[test]
fn a_models_price_is_read_and_a_negative_one_refused_with_its_place() {
    let dir = support::scratch("sources");
    support::copy_example(&dir);
    let agents = std::fs::read_to_string(dir.join("agents.yaml")).unwrap();
    let priced = agents.replacen(
        "    temperature: 0\n",
        "    temperature: 0\n    price: {input: 3.0, output: 15.0}\n",
        1,
    );
    assert_ne!(priced, agents);
    std::fs::write(dir.join("agents.yaml"), &priced).unwrap();
    let config = load_folder(&dir).unwrap();
    let price = config.agents["triager"].spec.model.price.clone().unwrap();
    assert_eq!((price.input, price.output), (3.0, 15.0));
    std::fs::write(
        dir.join("agents.yaml"),
        priced.replace("output: 15.0", "output: -1"),
    )
    .unwrap();
    let invalid = load_folder(&dir).unwrap_err();
    assert_eq!(invalid.codes(), [CfgCode::InvalidValue], "{invalid}");
    assert_eq!(invalid.diagnostics[0].place.path, "spec.model.price.output");
    std::fs::remove_dir_all(&dir).unwrap();
}
