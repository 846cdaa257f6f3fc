//! Property: whatever it is given — arbitrary text, arbitrary documents made of afe's own keys,
//! the example config with random damage, arbitrary objects from a "cluster" — the loader returns
//! a config or diagnostics. It never panics.

mod support;

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::Value;

/// Keys and values afe documents use, so generated documents reach deep into the checks.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "annotations",
    "description",
    "spec",
    "fields",
    "optional",
    "model",
    "provider",
    "prompt",
    "promptRef",
    "file",
    "configMapKey",
    "tools",
    "budget",
    "usd",
    "turns",
    "input",
    "sandbox",
    "cpus",
    "memory",
    "egress",
    "runtimeClassName",
    "env",
    "nodes",
    "id",
    "needs",
    "when",
    "git",
    "agent",
    "deep",
    "acp",
    "exec",
    "output",
    "command",
    "stdio",
    "http",
    "url",
    "store",
    "broker",
    "sqlite",
    "postgres",
    "urlEnv",
    "config",
    "configMapRef",
    "revision",
    "afe",
    "external",
    "managed",
    "secretRef",
    "key",
    "apiKey",
];
const WORDS: &[&str] = &[
    "afe.dev/v1alpha1",
    "Schema",
    "Agent",
    "Flow",
    "Plugin",
    "Runtime",
    "AgentFlowEngine",
    "string",
    "integer",
    "clone",
    "push",
    "coder",
    "text-request",
    "a",
    "-",
    "4Gi",
    "gvisor",
    "x == y",
    "text-request.topic",
    "ws.read",
    "../../etc/passwd",
    "",
    "prompts/x.md",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(WORDS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ]
}

fn document() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(KEYS), inner, 0..6).prop_map(|m| {
                Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// A document that starts right (apiVersion and a real kind), so the shape and meaning checks run.
fn afe_document() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(&["Schema", "Agent", "Flow", "Plugin", "Runtime", "AgentFlowEngine"][..]),
        document(),
        document(),
    )
        .prop_map(|(kind, metadata, spec)| {
            serde_json::json!({"apiVersion": "afe.dev/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec})
        })
}

fn load_text(files: &[(String, String)]) {
    let dir = support::scratch("proptest");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let _ = afe_config::load_folder(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text(text in ".{0,400}") {
        load_text(&[("a.yaml".to_string(), text)]);
    }

    #[test]
    fn arbitrary_documents_of_afe_keys(documents in prop::collection::vec(prop_oneof![document(), afe_document()], 1..4)) {
        let text: Vec<String> = documents.iter().map(|d| serde_saphyr::to_string(d).unwrap()).collect();
        load_text(&[("a.yaml".to_string(), text.join("---\n"))]);
        let data = BTreeMap::from([("p.md".to_string(), "x".to_string())]);
        let _ = afe_config::load_objects(&documents, "src", &data);
    }

    #[test]
    fn the_example_with_random_damage(
        file in prop::sample::select(&["flows.yaml", "agents.yaml", "schemas.yaml", "plugins.yaml"][..]),
        cut in any::<prop::sample::Index>(),
        len in 0usize..20,
        insert in ".{0,8}",
    ) {
        let dir = support::scratch("damage");
        support::copy_example(&dir);
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut start = cut.index(text.len() + 1);
        while !text.is_char_boundary(start) { start -= 1; }
        let mut end = (start + len).min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        let damaged = format!("{}{insert}{}", &text[..start], &text[end..]);
        std::fs::write(&path, damaged).unwrap();
        let _ = afe_config::load_folder(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
