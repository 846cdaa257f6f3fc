//! Step 1 of a reconcile, as a pure function: the config an `AgentFlowEngine` names — the custom
//! resources of its namespace and the keys of `spec.config.configMapRef` — with the Runtime
//! generated from `spec.afe`, validated by the same code as `afe validate`, and the folder serve
//! reads (`-c`) written as the files of the configuration ConfigMap.

use std::collections::BTreeMap;

use afe_config::engine::AgentFlowEngine;
use afe_config::kinds::API_VERSION;
use afe_config::runtime::{
    BrokerRuntime, KubernetesSandbox, OtlpRuntime, RuntimeSpec, SandboxRuntime, StoreRuntime,
    TracerRuntime, UrlFromEnv,
};
use afe_config::{Revision, as_applied, load_objects};
use afe_sandbox_kube::render::sorted_keys;
use serde_json::{Value, json};

/// The variables serve and the workers read the store's and the broker's URLs from (the
/// Deployments fill them by `secretKeyRef`).
pub const STORE_URL_ENV: &str = "AFE_STORE_URL";
pub const BROKER_URL_ENV: &str = "AFE_BROKER_URL";
pub const OTLP_HEADERS_ENV: &str = "AFE_OTLP_HEADERS";
/// At most this many problems are written into `ConfigValidated`'s message; the count says how
/// many more there were.
const MAX_MESSAGES: usize = 20;

/// What step 1 found.
#[derive(Clone, Debug, PartialEq)]
pub enum Validation {
    /// The ConfigMap `spec.config.configMapRef` names does not exist in the resource's namespace.
    SourceMissing { config_map: String },
    /// The config is invalid: every problem, one line each (`afe validate`'s wording).
    Invalid { problems: Vec<String> },
    /// A valid config: its revision, and the files serve reads.
    Valid {
        revision: String,
        files: BTreeMap<String, String>,
    },
}

/// The Runtime `spec.afe` means: Postgres and Redis by the variables the Deployments fill, the
/// tracer, and the Kubernetes sandbox.
pub fn runtime(engine: &AgentFlowEngine) -> RuntimeSpec {
    let afe = &engine.spec.afe;
    let url = |variable: &str| UrlFromEnv {
        url_env: variable.to_string(),
    };
    RuntimeSpec {
        store: Some(StoreRuntime {
            sqlite: None,
            postgres: Some(url(STORE_URL_ENV)),
        }),
        broker: Some(BrokerRuntime {
            embedded: None,
            redis: Some(url(BROKER_URL_ENV)),
        }),
        tracer: afe.tracer.as_ref().map(|tracer| TracerRuntime {
            otlp: OtlpRuntime {
                endpoint: tracer.otlp.endpoint.clone(),
                headers_env: tracer
                    .otlp
                    .headers_secret_ref
                    .as_ref()
                    .map(|_| OTLP_HEADERS_ENV.to_string()),
                capture_prompts: false,
            },
        }),
        sandbox: Some(SandboxRuntime {
            docker: None,
            kubernetes: Some(KubernetesSandbox {
                namespace: afe.sandbox.namespace.clone(),
                storage: afe.sandbox.storage.clone(),
                runtime_class_name: afe.sandbox.runtime_class_name.clone(),
                env_secret: afe.sandbox.env_secret.clone(),
            }),
        }),
    }
}

/// The Runtime as the document a config folder holds.
pub fn runtime_document(engine: &AgentFlowEngine) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "Runtime",
        "metadata": {"name": engine.metadata.name.clone().unwrap_or_else(|| "afe".to_string())},
        "spec": runtime(engine),
    })
}

/// The file a custom resource becomes in serve's folder: `generated.<kind>.<name>.yaml`. JSON is
/// YAML, and the file is read by the same code either way. Keys are sorted (a workspace build
/// turns on serde_json's `preserve_order`): the same config gives the same ConfigMap. A prompt the resource takes from a
/// key of the source ConfigMap is that key's file in the folder (`promptRef: {file: KEY}`): the
/// same text, so the same revision.
fn file_of(object: &Value) -> Option<(String, String)> {
    let kind = object.get("kind")?.as_str()?.to_ascii_lowercase();
    let name = object.pointer("/metadata/name")?.as_str()?;
    let mut object = as_applied(object);
    if let Some(reference) = object.pointer_mut("/spec/promptRef")
        && let Some(key) = reference.get("configMapKey").cloned()
    {
        *reference = json!({ "file": key });
    }
    let text = serde_json::to_string_pretty(&sorted_keys(object)).ok()?;
    Some((format!("generated.{kind}.{name}.yaml"), format!("{text}\n")))
}

/// `spec.afe.sandbox.orphanGrace` (default 30m), or why it cannot be read.
pub fn orphan_grace(engine: &AgentFlowEngine) -> Result<std::time::Duration, String> {
    match &engine.spec.afe.sandbox.orphan_grace {
        None => Ok(crate::reaper::DEFAULT_GRACE),
        Some(text) => humantime::parse_duration(text).map_err(|err| {
            format!(
                "AgentFlowEngine spec.afe.sandbox.orphanGrace: {text:?} is not a duration ({err}); write one like 30m or 2h"
            )
        }),
    }
}

/// Validates the config of `engine`: `objects` are the afe custom resources of its namespace as
/// the API server returned them, `source` the keys of its ConfigMap (`None`: there is none).
pub fn validate(
    engine: &AgentFlowEngine,
    objects: &[Value],
    source: Option<&BTreeMap<String, String>>,
) -> Validation {
    let config_map = engine.spec.config.config_map_ref.name.clone();
    let Some(source) = source else {
        return Validation::SourceMissing { config_map };
    };
    let runtime = runtime_document(engine);
    let mut all = objects.to_vec();
    all.push(runtime.clone());
    let config = match load_objects(&all, &config_map, source) {
        Ok(config) => config,
        Err(invalid) => {
            return Validation::Invalid {
                problems: invalid
                    .diagnostics
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            };
        }
    };
    let mut files = source.clone();
    for (name, text) in objects
        .iter()
        .chain(std::iter::once(&runtime))
        .filter_map(file_of)
    {
        if files.contains_key(&name) {
            return Validation::Invalid {
                problems: vec![format!(
                    "ConfigMap/{config_map}[{name}]: the key is the name of a file the operator generates for a custom resource; rename the key"
                )],
            };
        }
        files.insert(name, text);
    }
    Validation::Valid {
        revision: Revision::of(&config).hash,
        files,
    }
}

/// `ConfigValidated`'s message for an invalid config: its problems, at most [`MAX_MESSAGES`].
pub fn problems_message(problems: &[String]) -> String {
    let mut lines: Vec<String> = problems.iter().take(MAX_MESSAGES).cloned().collect();
    if problems.len() > MAX_MESSAGES {
        lines.push(format!(
            "… and {} more (afe validate on the same files lists them all)",
            problems.len() - MAX_MESSAGES
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> AgentFlowEngine {
        serde_json::from_value(json!({
            "apiVersion": "afe.dev/v1alpha1",
            "kind": "AgentFlowEngine",
            "metadata": {"name": "afe", "namespace": "afe"},
            "spec": {
                "config": {"configMapRef": {"name": "afe-source"}},
                "afe": {
                    "store": {"external": {"secretRef": {"name": "pg", "key": "dsn"}}},
                    "broker": {"external": {"secretRef": {"name": "redis"}}},
                    "tracer": {"otlp": {"endpoint": "http://otel:4318", "headersSecretRef": {"name": "h"}}},
                    "sandbox": {"namespace": "afe-sandbox", "runtimeClassName": "kata"},
                },
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_runtime_names_variables_never_values() {
        let runtime = serde_json::to_value(runtime(&engine())).unwrap();
        assert_eq!(runtime["store"]["postgres"]["urlEnv"], STORE_URL_ENV);
        assert_eq!(runtime["broker"]["redis"]["urlEnv"], BROKER_URL_ENV);
        assert_eq!(runtime["tracer"]["otlp"]["headersEnv"], OTLP_HEADERS_ENV);
        assert_eq!(runtime["sandbox"]["kubernetes"]["namespace"], "afe-sandbox");
        assert_eq!(runtime["sandbox"]["kubernetes"]["runtimeClassName"], "kata");
    }

    #[test]
    fn no_source_is_its_own_outcome() {
        assert_eq!(
            validate(&engine(), &[], None),
            Validation::SourceMissing {
                config_map: "afe-source".to_string()
            }
        );
    }

    #[test]
    fn a_long_list_of_problems_is_cut_and_counted() {
        let problems: Vec<String> = (0..25).map(|i| format!("problem {i}")).collect();
        let message = problems_message(&problems);
        assert_eq!(message.lines().count(), MAX_MESSAGES + 1);
        assert!(message.ends_with("… and 5 more (afe validate on the same files lists them all)"));
    }
}
