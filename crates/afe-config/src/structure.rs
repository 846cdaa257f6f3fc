//! The shape check: each document against the JSON Schema of its kind, generated from the same
//! types that read it. A validator reports every error of a document at once (serde would stop at
//! the first), each at its field path; only a document without one is then read into its type.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::diagnostic::{CfgCode, Diagnostic};
use crate::document::{Document, escape};
use crate::engine::AgentFlowEngineSpec;
use crate::kinds::{
    API_VERSION, AgentSpec, DESCRIPTION_ANNOTATION, FlowSpec, PluginSpec, SchemaSpec,
};
use crate::runtime::RuntimeSpec;

/// The kinds a config folder may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Schema,
    Agent,
    Flow,
    Plugin,
    /// Not part of a revision; at most one.
    Runtime,
    /// Not part of a revision: the installation that reads this config on a cluster.
    AgentFlowEngine,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Schema,
        Kind::Agent,
        Kind::Flow,
        Kind::Plugin,
        Kind::Runtime,
        Kind::AgentFlowEngine,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Schema => "Schema",
            Kind::Agent => "Agent",
            Kind::Flow => "Flow",
            Kind::Plugin => "Plugin",
            Kind::Runtime => "Runtime",
            Kind::AgentFlowEngine => "AgentFlowEngine",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// What Kubernetes keeps of an object's metadata that means something here; everything the API
/// server adds (uid, resourceVersion, managedFields, …) is dropped before the check.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // read only through its schema and its `spec`
struct Manifest<S> {
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: S,
}

/// The Runtime file needs no name and may leave everything to defaults.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RuntimeManifest {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    spec: RuntimeSpec,
}

/// A checked object: its name, description, spec, and the document it came from (for places).
#[derive(Clone, Debug, PartialEq)]
pub struct Object<S> {
    pub name: String,
    pub description: Option<String>,
    pub spec: S,
    pub document: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    Schema(Object<SchemaSpec>),
    Agent(Object<AgentSpec>),
    Flow(Object<FlowSpec>),
    Plugin(Object<PluginSpec>),
    Runtime(Object<RuntimeSpec>),
    AgentFlowEngine(Box<Object<AgentFlowEngineSpec>>),
}

struct KindSchema {
    validator: jsonschema::Validator,
    /// Every key any object of the kind has: the pool of "did you mean" suggestions.
    keys: BTreeSet<String>,
}

fn kind_schema<T: JsonSchema>() -> KindSchema {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).expect("a schema is JSON");
    narrow_free_values(&mut schema);
    let mut keys = BTreeSet::new();
    collect_keys(&schema, &mut keys);
    KindSchema {
        validator: jsonschema::validator_for(&schema).expect("a generated schema compiles"),
        keys,
    }
}

/// A value the CRD keeps as written (`x-kubernetes-preserve-unknown-fields` without a type) is,
/// here, a string or a mapping: the only such value is a Schema field.
fn narrow_free_values(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
                && !map.contains_key("type")
            {
                map.insert("type".to_string(), serde_json::json!(["string", "object"]));
            }
            map.values_mut().for_each(narrow_free_values);
        }
        Value::Array(items) => items.iter_mut().for_each(narrow_free_values),
        _ => {}
    }
}

fn collect_keys(schema: &Value, keys: &mut BTreeSet<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                keys.extend(properties.keys().cloned());
            }
            map.values().for_each(|v| collect_keys(v, keys));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_keys(v, keys)),
        _ => {}
    }
}

static SCHEMAS: LazyLock<BTreeMap<Kind, KindSchema>> = LazyLock::new(|| {
    BTreeMap::from([
        (Kind::Schema, kind_schema::<Manifest<SchemaSpec>>()),
        (Kind::Agent, kind_schema::<Manifest<AgentSpec>>()),
        (Kind::Flow, kind_schema::<Manifest<FlowSpec>>()),
        (Kind::Plugin, kind_schema::<Manifest<PluginSpec>>()),
        (Kind::Runtime, kind_schema::<RuntimeManifest>()),
        (
            Kind::AgentFlowEngine,
            kind_schema::<Manifest<AgentFlowEngineSpec>>(),
        ),
    ])
});

/// Key names that mean someone is about to write a credential into the config.
fn looks_like_secret(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    let named = lower.ends_with("ref") || lower.ends_with("env") || lower.ends_with("secret");
    !named
        && ["key", "token", "password", "secret", "credential", "dsn"]
            .iter()
            .any(|word| lower.contains(word))
}

/// Checks one document's shape and reads it; `index` is its position in the config's documents.
pub fn check(document: &Document, index: usize) -> Result<Parsed, Vec<Diagnostic>> {
    let kind = header(document)?;
    let mut value = document.value.clone();
    let mut problems = Vec::new();
    if let Some(Value::Object(metadata)) = value.get_mut("metadata")
        && metadata.remove("description").is_some()
    {
        problems.push(document.diagnostic(
            CfgCode::DescriptionField,
            "/metadata/description",
            "metadata.description is not a Kubernetes field: the API server drops it".to_string(),
            format!("write it as the annotation: metadata: {{annotations: {{{DESCRIPTION_ANNOTATION}: \"...\"}}}}"),
        ));
    }
    let schema = &SCHEMAS[&kind];
    for error in schema.validator.iter_errors(&value) {
        problems.extend(explain(document, &error, schema));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    read(kind, value, document, index)
}

/// `apiVersion` and `kind`, checked before anything else: without them nothing else means much.
fn header(document: &Document) -> Result<Kind, Vec<Diagnostic>> {
    let Some(object) = document.value.as_object() else {
        return Err(vec![document.diagnostic(
            CfgCode::NotAManifest,
            "",
            "a manifest is a mapping with apiVersion, kind, metadata and spec".to_string(),
            format!("start the document with apiVersion: {API_VERSION}"),
        )]);
    };
    let mut problems = Vec::new();
    match object.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => problems.push(document.diagnostic(
            CfgCode::NotAManifest,
            "/apiVersion",
            format!("apiVersion {other:?} is not afe's"),
            format!("write apiVersion: {API_VERSION}"),
        )),
        None => problems.push(document.diagnostic(
            CfgCode::NotAManifest,
            "/apiVersion",
            "the document has no apiVersion".to_string(),
            format!("write apiVersion: {API_VERSION}"),
        )),
    }
    let known = Kind::ALL.map(Kind::as_str).join(", ");
    let kind = match object.get("kind").and_then(Value::as_str) {
        Some(text) => match Kind::parse(text) {
            Some(kind) => Some(kind),
            None => {
                let closest = Kind::ALL
                    .into_iter()
                    .map(Kind::as_str)
                    .min_by_key(|k| strsim::levenshtein(&k.to_lowercase(), &text.to_lowercase()))
                    .unwrap_or("Flow");
                problems.push(document.diagnostic(
                    CfgCode::NotAManifest,
                    "/kind",
                    format!("kind {text:?} is not an afe kind"),
                    format!("did you mean {closest}? The kinds are {known}"),
                ));
                None
            }
        },
        None => {
            problems.push(document.diagnostic(
                CfgCode::NotAManifest,
                "/kind",
                "the document has no kind".to_string(),
                format!("write kind: one of {known}"),
            ));
            None
        }
    };
    match kind {
        Some(kind) if problems.is_empty() => Ok(kind),
        _ => Err(problems),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn type_name(kind: &TypeKind) -> String {
    let name = |t: &jsonschema::JsonType| match t.to_string().as_str() {
        "object" => "a mapping".to_string(),
        "array" => "a list".to_string(),
        "integer" => "an integer".to_string(),
        other => format!("a {other}"),
    };
    match kind {
        TypeKind::Single(t) => name(t),
        TypeKind::Multiple(types) => types
            .iter()
            .filter(|t| t.to_string() != "null")
            .map(|t| name(&t))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

fn explain(
    document: &Document,
    error: &jsonschema::ValidationError<'_>,
    schema: &KindSchema,
) -> Vec<Diagnostic> {
    let pointer = error.instance_path().as_str().to_string();
    let found = error.instance();
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|key| {
                let at = format!("{pointer}/{}", escape(key));
                if looks_like_secret(key) {
                    document.diagnostic(
                        CfgCode::InlineSecret,
                        &at,
                        format!("{key:?} would put a secret value into the config, which is stored, hashed and shown"),
                        "name the secret instead: a Secret reference (`...Ref: {name, key}`) or an environment variable name (`...Env: NAME`); see docs/afe-config.md".to_string(),
                    )
                } else {
                    let closest = schema
                        .keys
                        .iter()
                        .min_by_key(|k| strsim::levenshtein(k, key))
                        .filter(|k| strsim::levenshtein(k, key) <= 3);
                    document.diagnostic(
                        CfgCode::UnknownKey,
                        &at,
                        format!("{key:?} is not a key here"),
                        match closest {
                            Some(k) => format!("did you mean {k:?}? Unknown keys are refused, never ignored"),
                            None => "remove it; docs/afe-config.md lists every key".to_string(),
                        },
                    )
                }
            })
            .collect(),
        ValidationErrorKind::Required { property } => {
            let key = property.as_str().unwrap_or("?");
            vec![document.diagnostic(
                CfgCode::MissingKey,
                &format!("{pointer}/{}", escape(key)),
                format!("{key:?} is required"),
                format!("add {key}"),
            )]
        }
        ValidationErrorKind::Type { kind } => {
            let expected = type_name(kind);
            let help = if expected == "a string" && (found.is_number() || found.is_boolean()) {
                format!("put it in quotes (\"{found}\"): unquoted, YAML reads it as {}", json_type(found))
            } else {
                "write a value of the expected type".to_string()
            };
            vec![document.diagnostic(
                CfgCode::InvalidValue,
                &pointer,
                format!("expected {expected}, found {}", json_type(found)),
                help,
            )]
        }
        ValidationErrorKind::Enum { options } => vec![document.diagnostic(
            CfgCode::InvalidValue,
            &pointer,
            format!("{found} is not one of {options}"),
            format!("write one of {options}"),
        )],
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            // An optional value is "this or null": when it is not null, the errors that matter
            // are those of the branch whose type it has — the ones below this place.
            let deeper: Vec<&Vec<jsonschema::ValidationError<'static>>> = context
                .iter()
                .filter(|branch| {
                    !branch.is_empty()
                        && branch
                            .iter()
                            .all(|e| e.instance_path().as_str().len() > pointer.len())
                })
                .collect();
            if let [branch] = deeper.as_slice() {
                return branch
                    .iter()
                    .flat_map(|e| explain(document, e, schema))
                    .collect();
            }
            vec![document.diagnostic(
                CfgCode::InvalidValue,
                &pointer,
                format!("{} is not a valid value here", json_type(found)),
                "a Schema field is a type name (string, integer, number, boolean, object, array) or a JSON Schema mapping".to_string(),
            )]
        }
        _ => vec![document.diagnostic(
            CfgCode::InvalidValue,
            &pointer,
            error.to_string(),
            "fix the value".to_string(),
        )],
    }
}

fn read(
    kind: Kind,
    value: Value,
    document: &Document,
    index: usize,
) -> Result<Parsed, Vec<Diagnostic>> {
    let failed = |err: serde_json::Error| {
        vec![document.diagnostic(
            CfgCode::InvalidValue,
            "",
            format!("cannot be read: {err}"),
            "fix the value this names".to_string(),
        )]
    };
    fn object<S: DeserializeOwned>(
        value: Value,
        index: usize,
    ) -> Result<Object<S>, serde_json::Error> {
        let manifest: Manifest<S> = serde_json::from_value(value)?;
        Ok(Object {
            description: manifest
                .metadata
                .annotations
                .get(DESCRIPTION_ANNOTATION)
                .cloned(),
            name: manifest.metadata.name,
            spec: manifest.spec,
            document: index,
        })
    }
    Ok(match kind {
        Kind::Schema => Parsed::Schema(object(value, index).map_err(failed)?),
        Kind::Agent => Parsed::Agent(object(value, index).map_err(failed)?),
        Kind::Flow => Parsed::Flow(object(value, index).map_err(failed)?),
        Kind::Plugin => Parsed::Plugin(object(value, index).map_err(failed)?),
        Kind::AgentFlowEngine => {
            Parsed::AgentFlowEngine(Box::new(object(value, index).map_err(failed)?))
        }
        Kind::Runtime => {
            let manifest: RuntimeManifest = serde_json::from_value(value).map_err(failed)?;
            Parsed::Runtime(Object {
                name: manifest.metadata.map(|m| m.name).unwrap_or_default(),
                description: None,
                spec: manifest.spec,
                document: index,
            })
        }
    })
}
