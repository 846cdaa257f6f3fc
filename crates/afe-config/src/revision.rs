//! Revisions: a config normalized (prompts inlined, defaults filled, lists whose order means
//! nothing sorted, the Runtime and AgentFlowEngine left out), written as canonical JSON (keys
//! sorted, no spaces) and hashed with sha256. The same config read from a folder or from custom
//! resources has one hash; reformatting a file does not change it; any change of meaning does.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::diagnostic::{CfgCode, Diagnostic};
use crate::fields::object_schema;
use crate::kinds::{API_VERSION, Sandbox};

/// The sandbox a flow gets when it names none.
pub const DEFAULT_SANDBOX_IMAGE: &str = "afe-sandbox";
pub const DEFAULT_SANDBOX_CPUS: f64 = 1.0;
pub const DEFAULT_SANDBOX_MEMORY: &str = "2Gi";
/// The shortest revision pin accepted: 12 hex digits, as seed 003's example writes one.
pub const MIN_PIN_LEN: usize = 12;

/// A config's identity: the sha256 of its normalized document.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision {
    /// 64 lowercase hex digits.
    pub hash: String,
    pub normalized: Value,
}

impl Revision {
    pub fn of(config: &Config) -> Revision {
        let normalized = normalize(config);
        let canonical = canonical_json(&normalized);
        let digest = Sha256::digest(canonical.as_bytes());
        let mut hash = String::with_capacity(64);
        for byte in digest {
            let _ = write!(hash, "{byte:02x}");
        }
        Revision { hash, normalized }
    }

    /// Whether a pin (`spec.config.revision`: the hash, a prefix of at least 12 hex digits, or
    /// either with `sha256:` before it) names this revision.
    pub fn matches_pin(&self, pin: &str) -> bool {
        pin_names(&self.hash, pin)
    }

    /// The pin check seed 003 asks of the operator (`RevisionPinned=False`, reason
    /// `RevisionMismatch`), for every AgentFlowEngine of the source that pins one.
    pub fn pin_problems(&self, config: &Config) -> Vec<Diagnostic> {
        config
            .engines
            .iter()
            .filter_map(|engine| {
                let pin = engine.spec.config.revision.as_ref()?;
                (!self.matches_pin(pin)).then(|| Diagnostic {
                    code: CfgCode::RevisionMismatch,
                    place: config.place(engine.document, "/spec/config/revision"),
                    message: format!(
                        "RevisionMismatch: AgentFlowEngine {} pins revision {pin}, but the config's revision is {}; nothing rolls out while they differ",
                        engine.name, self.hash
                    ),
                    help: format!(
                        "set spec.config.revision to {} (or a prefix of at least {MIN_PIN_LEN} digits) to roll out this config, or remove the pin",
                        self.hash
                    ),
                })
            })
            .collect()
    }
}

/// Whether a pin names the revision whose hash is `hash` (see [`Revision::matches_pin`]).
pub fn pin_names(hash: &str, pin: &str) -> bool {
    let pin = pin.trim().to_ascii_lowercase();
    let pin = pin.strip_prefix("sha256:").unwrap_or(&pin);
    pin.len() >= MIN_PIN_LEN && hash.starts_with(pin)
}

fn to_value(value: &impl Serialize) -> Value {
    serde_json::to_value(value).expect("config types serialize to JSON")
}

fn sorted(list: &[String]) -> Vec<String> {
    let mut list = list.to_vec();
    list.sort();
    list.dedup();
    list
}

fn described(description: &Option<String>, mut body: Value) -> Value {
    if let (Some(text), Value::Object(map)) = (description, &mut body) {
        map.insert("description".to_string(), json!(text));
    }
    body
}

/// The normalized document that is hashed; `afe revision --explain` prints it.
pub fn normalize(config: &Config) -> Value {
    let schemas: serde_json::Map<String, Value> = config
        .schemas
        .values()
        .map(|s| {
            let body = json!({"schema": object_schema(&s.spec)});
            (s.name.clone(), described(&s.description, body))
        })
        .collect();
    let agents: serde_json::Map<String, Value> = config
        .agents
        .values()
        .map(|a| {
            let mut spec = a.spec.clone();
            spec.prompt = config.prompts.get(&a.name).cloned();
            spec.prompt_ref = None;
            spec.tools = sorted(&spec.tools);
            (a.name.clone(), described(&a.description, to_value(&spec)))
        })
        .collect();
    let flows: serde_json::Map<String, Value> = config
        .flows
        .values()
        .map(|f| {
            let mut spec = f.spec.clone();
            let sandbox = spec.sandbox.take().unwrap_or(Sandbox {
                image: None,
                cpus: None,
                memory: None,
                egress: Vec::new(),
                runtime_class_name: None,
                env: Vec::new(),
            });
            for node in &mut spec.nodes {
                node.needs = sorted(&node.needs);
            }
            let mut body = to_value(&spec);
            body["sandbox"] = normalize_sandbox(&sandbox);
            (f.name.clone(), described(&f.description, body))
        })
        .collect();
    let plugins: serde_json::Map<String, Value> = config
        .plugins
        .values()
        .map(|p| {
            let mut spec = p.spec.clone();
            spec.tools = sorted(&spec.tools);
            if let Some(stdio) = &mut spec.stdio {
                stdio.env = sorted(&stdio.env);
            }
            (p.name.clone(), described(&p.description, to_value(&spec)))
        })
        .collect();
    json!({
        "apiVersion": API_VERSION,
        "schemas": schemas,
        "agents": agents,
        "flows": flows,
        "plugins": plugins,
    })
}

/// A sandbox with every default written and its memory in bytes (`2Gi` and `2048Mi` are one size).
fn normalize_sandbox(sandbox: &Sandbox) -> Value {
    let memory = sandbox.memory.as_deref().unwrap_or(DEFAULT_SANDBOX_MEMORY);
    let bytes = af_manifest::parse_quantity(memory)
        .map(|q| q.value_rounded_up())
        .unwrap_or_default();
    json!({
        "image": sandbox.image.as_deref().unwrap_or(DEFAULT_SANDBOX_IMAGE),
        "cpus": sandbox.cpus.unwrap_or(DEFAULT_SANDBOX_CPUS),
        "memoryBytes": u64::try_from(bytes).unwrap_or(u64::MAX),
        "egress": sorted(&sandbox.egress),
        "runtimeClassName": sandbox.runtime_class_name.as_deref().unwrap_or("runc"),
        "env": sorted(&sandbox.env),
    })
}

/// JSON with object keys in byte order and no whitespace: one text per value, whatever order
/// the map that holds it keeps.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"d": [1, {"y": 2, "x": 1}], "c": "é"}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":"é","d":[1,{"x":1,"y":2}]},"b":1}"#
        );
    }

    #[test]
    fn pins_match_by_prefix_of_twelve_or_more() {
        let revision = Revision {
            hash: "3f2a91c0d4e8".to_string() + &"0".repeat(52),
            normalized: Value::Null,
        };
        assert!(revision.matches_pin("3f2a91c0d4e8"));
        assert!(revision.matches_pin("sha256:3F2A91C0D4E800"));
        assert!(
            !revision.matches_pin("3f2a91c0d4e"),
            "too short to name one"
        );
        assert!(!revision.matches_pin("3f2a91c0d4e9"));
    }
}
