//! Step 6 as pure functions: what the reconcile found, turned into the resource's status —
//! conditions (each with the generation it judged), the revision the workloads run, their
//! components, endpoints and the orphans removed so far. A condition whose status did not change
//! keeps its `lastTransitionTime`, so an unchanged installation gets an unchanged status and the
//! reconcile writes nothing.

use afe_config::engine::{
    AgentFlowEngine, AgentFlowEngineStatus, EngineComponent, EngineCondition,
};
use serde_json::Value;

use afe_config::revision::pin_names as pin_matches;

use crate::build::Scaling;
use crate::configuration::{Validation, problems_message};

pub const CONFIG_VALIDATED: &str = "ConfigValidated";
pub const REVISION_PINNED: &str = "RevisionPinned";
pub const AUTOSCALING_READY: &str = "AutoscalingReady";
pub const READY: &str = "Ready";

/// Whether the config's revision may roll out: valid, and the pin (if any) names it.
pub fn rolls(validation: &Validation, pin: Option<&str>) -> bool {
    match validation {
        Validation::Valid { revision, .. } => pin.is_none_or(|pin| pin_matches(revision, pin)),
        _ => false,
    }
}

/// Everything one reconcile found that the status reports.
#[derive(Clone, Debug)]
pub struct Findings<'a> {
    pub engine: &'a AgentFlowEngine,
    pub validation: &'a Validation,
    /// How the workers are scaled (KEDA's presence decided it).
    pub scaling: Scaling<'a>,
    /// CloudNativePG's Cluster kind is served (discovery).
    pub cloudnative_pg: bool,
    /// Each object left alone because it is not the operator's: `Kind/name: why`.
    pub conflicts: Vec<String>,
    /// The processes' Deployments as they stand.
    pub components: Vec<EngineComponent>,
    /// How many orphans this reconcile's sweep removed.
    pub orphans_removed: u64,
    /// RFC 3339, for the conditions that change now.
    pub now: String,
}

fn condition(type_: &str, status: bool, reason: &str, message: String) -> EngineCondition {
    EngineCondition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_transition_time: None,
        observed_generation: None,
    }
}

fn config_validated(findings: &Findings<'_>) -> EngineCondition {
    let namespace = findings
        .engine
        .metadata
        .namespace
        .as_deref()
        .unwrap_or("default");
    match findings.validation {
        Validation::SourceMissing { config_map } => condition(
            CONFIG_VALIDATED,
            false,
            "ConfigMapMissing",
            format!(
                "ConfigMap {config_map} (spec.config.configMapRef) is not in namespace {namespace}: create it with the config's files as its keys, or name the right one; nothing changes until then"
            ),
        ),
        Validation::Invalid { problems } => condition(
            CONFIG_VALIDATED,
            false,
            "Invalid",
            format!(
                "the config is invalid; nothing changes until it is fixed:\n{}",
                problems_message(problems)
            ),
        ),
        Validation::Valid { revision, .. } => condition(
            CONFIG_VALIDATED,
            true,
            "Valid",
            format!("revision {revision}"),
        ),
    }
}

fn revision_pinned(revision: &str, pin: Option<&str>) -> EngineCondition {
    match pin {
        None => condition(
            REVISION_PINNED,
            true,
            "NotPinned",
            "spec.config.revision is not set: every valid revision rolls out".to_string(),
        ),
        Some(pin) if pin_matches(revision, pin) => condition(
            REVISION_PINNED,
            true,
            "RevisionMatches",
            format!("the pin {pin} names revision {revision}"),
        ),
        Some(pin) => condition(
            REVISION_PINNED,
            false,
            "RevisionMismatch",
            format!(
                "spec.config.revision pins {pin}, but the config's revision is {revision}: nothing rolls out while they differ; set spec.config.revision to {revision} (or a prefix of at least {} digits), or remove the pin",
                afe_config::revision::MIN_PIN_LEN
            ),
        ),
    }
}

fn autoscaling_ready(findings: &Findings<'_>) -> Option<EngineCondition> {
    Some(match findings.scaling {
        Scaling::Fixed(_) => return None,
        Scaling::Keda(autoscaling) => condition(
            AUTOSCALING_READY,
            true,
            "ScaledObject",
            format!(
                "KEDA scales the workers from {} to {} on the queue's lag",
                autoscaling.min_replicas, autoscaling.max_replicas
            ),
        ),
        Scaling::KedaAbsent(autoscaling) => condition(
            AUTOSCALING_READY,
            false,
            "KEDAAbsent",
            format!(
                "KEDA is not installed (keda.sh/v1alpha1 ScaledObject is not served): the workers run at maxReplicas ({}); install KEDA to scale them on the queue",
                autoscaling.max_replicas
            ),
        ),
        Scaling::NoTriggerAuthentication(autoscaling) => condition(
            AUTOSCALING_READY,
            false,
            "TriggerAuthenticationMissing",
            format!(
                "KEDA reaches an external broker only through a TriggerAuthentication (parameters address, host:port, and password): name one in spec.deployment.workers.autoscaling.triggerAuthentication; until then the workers run at maxReplicas ({})",
                autoscaling.max_replicas
            ),
        ),
    })
}

fn ready(findings: &Findings<'_>) -> EngineCondition {
    let pin = findings.engine.spec.config.revision.as_deref();
    match findings.validation {
        Validation::SourceMissing { .. } | Validation::Invalid { .. } => {
            return condition(
                READY,
                false,
                "ConfigInvalid",
                "see ConfigValidated; what runs is left as it was".to_string(),
            );
        }
        Validation::Valid { .. } if !rolls(findings.validation, pin) => {
            return condition(
                READY,
                false,
                "RevisionMismatch",
                "see RevisionPinned; what runs is left as it was".to_string(),
            );
        }
        Validation::Valid { .. } => {}
    }
    if !findings.conflicts.is_empty() {
        return condition(
            READY,
            false,
            "ResourceConflict",
            format!(
                "objects the operator would make exist and are not its own; it leaves them alone: {}. Delete or rename them to let the operator make its own",
                findings.conflicts.join("; ")
            ),
        );
    }
    if findings.engine.spec.afe.store.managed.is_some() && !findings.cloudnative_pg {
        return condition(
            READY,
            false,
            "CloudNativePGAbsent",
            "spec.afe.store.managed needs CloudNativePG (postgresql.cnpg.io/v1 Cluster is not served): install it, or name an external store".to_string(),
        );
    }
    let waiting: Vec<String> = findings
        .components
        .iter()
        .filter(|c| c.ready_replicas.unwrap_or(0) < c.replicas.unwrap_or(1))
        .map(|c| {
            format!(
                "{} {}/{} ready",
                c.name,
                c.ready_replicas.unwrap_or(0),
                c.replicas.unwrap_or(1)
            )
        })
        .collect();
    if waiting.is_empty() {
        condition(READY, true, "Running", "every process is ready".to_string())
    } else {
        condition(READY, false, "Progressing", waiting.join(", "))
    }
}

/// The conditions this reconcile sets. With an invalid config or a mismatched pin, what runs is
/// left as it was, and so are the conditions that describe it (`RevisionPinned` when the config
/// could not be read, `AutoscalingReady`).
fn computed(findings: &Findings<'_>) -> (Vec<EngineCondition>, &'static [&'static str]) {
    let mut next = vec![config_validated(findings)];
    let kept: &[&str] = match findings.validation {
        Validation::Valid { revision, .. } => {
            next.push(revision_pinned(
                revision,
                findings.engine.spec.config.revision.as_deref(),
            ));
            if rolls(
                findings.validation,
                findings.engine.spec.config.revision.as_deref(),
            ) {
                next.extend(autoscaling_ready(findings));
                &[]
            } else {
                &[AUTOSCALING_READY]
            }
        }
        _ => &[REVISION_PINNED, AUTOSCALING_READY],
    };
    next.push(ready(findings));
    (next, kept)
}

/// The condition of type `type_` in `status`, if it has one.
pub fn find<'a>(status: &'a AgentFlowEngineStatus, type_: &str) -> Option<&'a EngineCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The status after this reconcile, from the previous one.
pub fn status(findings: &Findings<'_>) -> AgentFlowEngineStatus {
    let previous = findings.engine.status.clone().unwrap_or_default();
    let generation = findings.engine.metadata.generation;
    let (next, kept) = computed(findings);
    let mut conditions: Vec<EngineCondition> = next
        .into_iter()
        .map(|mut c| {
            let before = find(&previous, &c.type_);
            c.last_transition_time = match before {
                Some(before) if before.status == c.status => before.last_transition_time.clone(),
                _ => Some(findings.now.clone()),
            };
            c.observed_generation = generation;
            c
        })
        .collect();
    conditions.extend(
        previous
            .conditions
            .iter()
            .filter(|p| kept.contains(&p.type_.as_str()))
            .cloned(),
    );
    let order = |c: &EngineCondition| {
        [CONFIG_VALIDATED, REVISION_PINNED, AUTOSCALING_READY, READY]
            .iter()
            .position(|t| *t == c.type_)
    };
    conditions.sort_by_key(order);
    let pin = findings.engine.spec.config.revision.as_deref();
    let revision = match findings.validation {
        Validation::Valid { revision, .. } if rolls(findings.validation, pin) => {
            Some(revision.clone())
        }
        _ => previous.revision.clone(),
    };
    AgentFlowEngineStatus {
        conditions,
        revision,
        observed_generation: generation,
        components: findings.components.clone(),
        endpoints: endpoints(findings.engine),
        orphans_removed: Some(previous.orphans_removed.unwrap_or(0) + findings.orphans_removed),
    }
}

/// Where the API is reached: the Service in the cluster, and the Ingress's host when there is one.
pub fn endpoints(engine: &AgentFlowEngine) -> Vec<String> {
    let name = engine.metadata.name.as_deref().unwrap_or("afe");
    let namespace = engine.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = vec![format!("http://{name}-api.{namespace}.svc")];
    if let Some(ingress) = engine
        .spec
        .deployment
        .as_ref()
        .and_then(|d| d.ingress.as_ref())
    {
        let tls = ingress
            .tls
            .iter()
            .any(|t| t.hosts.is_empty() || t.hosts.contains(&ingress.host));
        out.push(format!(
            "{}://{}",
            if tls { "https" } else { "http" },
            ingress.host
        ));
    }
    out
}

/// A process's component, from its Deployment (or StatefulSet) as the server holds it: the
/// replicas asked for (the spec's, or the status's when KEDA writes them) and those ready.
pub fn component(name: &str, live: &Value) -> EngineComponent {
    let number = |pointer: &str| {
        live.pointer(pointer)
            .and_then(Value::as_u64)
            .map(|n| n as u32)
    };
    EngineComponent {
        name: name.to_string(),
        ready_replicas: Some(number("/status/readyReplicas").unwrap_or(0)),
        replicas: number("/spec/replicas").or_else(|| number("/status/replicas")),
    }
}

/// The status as a JSON merge patch: every field named, `null` for those now empty, so nothing
/// of an earlier status lingers.
pub fn merge_patch(status: &AgentFlowEngineStatus) -> Value {
    let mut value = serde_json::to_value(status).expect("the status serializes");
    if let Value::Object(map) = &mut value {
        for key in [
            "conditions",
            "revision",
            "observedGeneration",
            "components",
            "endpoints",
            "orphansRemoved",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    serde_json::json!({ "status": value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    const HASH: &str = "04cf1cc0ea69d1aa0000000000000000000000000000000000000000000000ff";

    fn engine(pin: Option<&str>, autoscaling: bool) -> AgentFlowEngine {
        let mut value = json!({
            "apiVersion": "afe.dev/v1alpha1",
            "kind": "AgentFlowEngine",
            "metadata": {"name": "afe", "namespace": "afe", "generation": 3},
            "spec": {
                "config": {"configMapRef": {"name": "afe-source"}},
                "afe": {
                    "store": {"external": {"secretRef": {"name": "pg"}}},
                    "broker": {"external": {"secretRef": {"name": "redis"}}},
                    "sandbox": {"namespace": "afe-sandbox"},
                },
            },
        });
        if let Some(pin) = pin {
            value["spec"]["config"]["revision"] = json!(pin);
        }
        if autoscaling {
            value["spec"]["deployment"] = json!({"workers": {"autoscaling": {"minReplicas": 1, "maxReplicas": 7, "triggerAuthentication": "keda-redis"}}});
        }
        serde_json::from_value(value).unwrap()
    }

    fn valid() -> Validation {
        Validation::Valid {
            revision: HASH.to_string(),
            files: BTreeMap::new(),
        }
    }

    fn findings<'a>(engine: &'a AgentFlowEngine, validation: &'a Validation) -> Findings<'a> {
        Findings {
            engine,
            validation,
            scaling: crate::build::scaling(engine, true),
            cloudnative_pg: true,
            conflicts: vec![],
            components: vec![EngineComponent {
                name: "serve".to_string(),
                ready_replicas: Some(1),
                replicas: Some(1),
            }],
            orphans_removed: 0,
            now: "2026-12-05T06:00:00Z".to_string(),
        }
    }

    fn find<'a>(status: &'a AgentFlowEngineStatus, type_: &str) -> &'a EngineCondition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_}"))
    }

    fn reason(status: &AgentFlowEngineStatus, type_: &str) -> (String, String) {
        let c = find(status, type_);
        (c.status.clone(), c.reason.clone().unwrap())
    }

    #[test]
    fn a_valid_unpinned_running_installation_is_ready() {
        let engine = engine(None, false);
        let validation = valid();
        let status = status(&findings(&engine, &validation));
        assert_eq!(reason(&status, READY), ("True".into(), "Running".into()));
        assert_eq!(
            reason(&status, REVISION_PINNED),
            ("True".into(), "NotPinned".into())
        );
        assert_eq!(status.revision.as_deref(), Some(HASH));
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
        assert_eq!(status.endpoints, vec!["http://afe-api.afe.svc"]);
    }

    #[test]
    fn a_pin_mismatch_names_both_hashes_and_keeps_the_revision_running() {
        let mut engine = engine(Some("ffffffffffff"), false);
        engine.status = Some(AgentFlowEngineStatus {
            revision: Some("older".to_string()),
            ..Default::default()
        });
        let validation = valid();
        let status = status(&findings(&engine, &validation));
        let pinned = find(&status, REVISION_PINNED);
        assert_eq!(pinned.reason.as_deref(), Some("RevisionMismatch"));
        let message = pinned.message.as_deref().unwrap();
        assert!(
            message.contains("ffffffffffff") && message.contains(HASH),
            "{message}"
        );
        assert_eq!(status.revision.as_deref(), Some("older"));
        assert!(!rolls(&validation, Some("ffffffffffff")));
        assert!(rolls(&validation, Some(&HASH[..12])));
        assert!(!rolls(&validation, Some(&HASH[..11])), "too short a pin");
    }

    #[test]
    fn keda_absent_is_said_and_present_is_said() {
        let engine = engine(None, true);
        let validation = valid();
        let mut f = findings(&engine, &validation);
        assert_eq!(
            reason(&status(&f), AUTOSCALING_READY),
            ("True".into(), "ScaledObject".into())
        );
        f.scaling = crate::build::scaling(&engine, false);
        let status = status(&f);
        assert_eq!(
            reason(&status, AUTOSCALING_READY),
            ("False".into(), "KEDAAbsent".into())
        );
        assert!(
            find(&status, AUTOSCALING_READY)
                .message
                .as_deref()
                .unwrap()
                .contains("(7)")
        );
        let mut unauthenticated = engine.clone();
        let workers = unauthenticated
            .spec
            .deployment
            .as_mut()
            .unwrap()
            .workers
            .as_mut();
        workers
            .unwrap()
            .autoscaling
            .as_mut()
            .unwrap()
            .trigger_authentication = None;
        let f = Findings {
            scaling: crate::build::scaling(&unauthenticated, true),
            ..findings(&unauthenticated, &validation)
        };
        assert_eq!(
            reason(&super::status(&f), AUTOSCALING_READY),
            ("False".into(), "TriggerAuthenticationMissing".into()),
            "an external broker is reached by KEDA only through a TriggerAuthentication"
        );
    }

    #[test]
    fn ready_says_the_first_thing_in_the_way() {
        let engine = engine(None, false);
        let validation = valid();
        let mut f = findings(&engine, &validation);
        f.components[0].ready_replicas = Some(0);
        assert_eq!(reason(&status(&f), READY).1, "Progressing");
        f.conflicts = vec!["Service/afe-api: it has no label".to_string()];
        let s = status(&f);
        assert_eq!(reason(&s, READY).1, "ResourceConflict");
        assert!(
            find(&s, READY)
                .message
                .as_deref()
                .unwrap()
                .contains("Service/afe-api")
        );
        let invalid = Validation::Invalid {
            problems: vec!["Flow/x: AFE-CFG-001 bad".to_string()],
        };
        let s = status(&findings(&engine, &invalid));
        assert_eq!(reason(&s, READY).1, "ConfigInvalid");
        assert_eq!(
            reason(&s, CONFIG_VALIDATED),
            ("False".into(), "Invalid".into())
        );
        assert!(
            find(&s, CONFIG_VALIDATED)
                .message
                .as_deref()
                .unwrap()
                .contains("AFE-CFG-001")
        );
    }

    #[test]
    fn an_unchanged_condition_keeps_its_transition_time_and_others_are_kept_while_invalid() {
        let mut engine = engine(None, true);
        let validation = valid();
        let first = status(&findings(&engine, &validation));
        engine.status = Some(first.clone());
        let mut later = findings(&engine, &validation);
        later.now = "2026-12-05T07:00:00Z".to_string();
        assert_eq!(status(&later), first, "nothing changed: the same status");

        let invalid = Validation::Invalid {
            problems: vec!["x".to_string()],
        };
        let mut f = findings(&engine, &invalid);
        f.now = "2026-12-05T07:00:00Z".to_string();
        let s = status(&f);
        assert_eq!(
            find(&s, CONFIG_VALIDATED).last_transition_time.as_deref(),
            Some("2026-12-05T07:00:00Z")
        );
        assert_eq!(find(&s, AUTOSCALING_READY), find(&first, AUTOSCALING_READY));
        assert_eq!(find(&s, REVISION_PINNED), find(&first, REVISION_PINNED));
        assert_eq!(s.revision, first.revision);
    }

    #[test]
    fn the_merge_patch_clears_what_is_now_empty() {
        let patch = merge_patch(&AgentFlowEngineStatus::default());
        assert_eq!(patch["status"]["endpoints"], Value::Null);
        assert!(
            patch["status"]
                .as_object()
                .unwrap()
                .contains_key("components")
        );
    }
}
