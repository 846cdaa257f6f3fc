//! A ticket's sandbox on Kubernetes as data, from pure functions: its Pod and its PVC (seed 003,
//! "Il Pod del ticket").
//!
//! | part               | what                                                                        |
//! |--------------------|-----------------------------------------------------------------------------|
//! | init `netlock`     | the engine image, `netlock --proxy-uid 1337`, root with NET_ADMIN alone, once: every outgoing packet of the Pod dropped but the proxy uid's, IPv4 and IPv6, read back and verified |
//! | `sandbox`          | the flow's image as uid 1000, no capability, no privilege escalation, the workspace PVC at `/workspace` |
//! | `proxy`            | only with egress: the engine image's `serve`, uid 1337, the allowlist on 127.0.0.1:3128 |
//! | the Pod            | no service account token, seccomp RuntimeDefault, runc or the RuntimeClass named (never gVisor) |
//! | the PVC            | ReadWriteOnce, removed with the ticket                                      |
//!
//! Both carry `afe.ticket`, `app.kubernetes.io/managed-by: afe` and the signature they were made
//! with, so a ticket's objects are found by label — never by a name alone.

use std::collections::BTreeMap;

use afe_sandbox::{SandboxSpec, inside, labels, workspace};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, Probe, SeccompProfile, SecretKeySelector, SecurityContext, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::KubeSandboxSettings;

/// The field manager of every apply (server-side apply, one manager).
pub const FIELD_MANAGER: &str = "afe-worker";
/// The annotation holding the lifecycle marker on the Pod and the PVC: what the reaper reads.
pub use afe_sandbox::labels::LIFECYCLE;
/// The containers' names.
pub const NETLOCK: &str = "netlock";
pub const SANDBOX: &str = "sandbox";
pub const PROXY: &str = "proxy";
/// The uid the ticket's commands run as (seed 003: "sandbox uid 1000").
pub const SANDBOX_UID: i64 = 1000;
/// The proxy's uid, the one netlock lets out.
pub const PROXY_UID: i64 = 1337;
/// The engine image's executable.
pub const ENGINE: &str = "/af-proxy";
/// Where the workspace volume is mounted, and the scratch volumes' names.
const WORKSPACE_VOLUME: &str = "workspace";
const NETLOCK_SCRATCH: &str = "netlock-run";
const PROXY_LOG: &str = "proxy-log";

/// The longest ticket id that still makes a name Kubernetes takes: `afe-<ticket>-<5>` in 63.
pub const MAX_TICKET: usize = 63 - "afe-".len() - "-".len() - SUFFIX_LEN;
/// The length of the random part of a sandbox's name.
pub const SUFFIX_LEN: usize = 5;

/// Whether `ticket` can name a Pod: lowercase letters, digits and `-`, starting and ending with a
/// letter or digit, at most [`MAX_TICKET`] long (a store's ticket is a UUID).
pub fn is_ticket_name(ticket: &str) -> bool {
    let bytes = ticket.as_bytes();
    (1..=MAX_TICKET).contains(&ticket.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

/// The name of a ticket's Pod and of its PVC (seed 003: `afe-<ticket>-<uid>`). A sandbox that is
/// recreated gets a new suffix, so it never waits for the old one's name to be free.
pub fn name(ticket: &str, suffix: &str) -> String {
    format!("afe-{ticket}-{suffix}")
}

/// The labels of the ticket's objects made with `signature`.
pub fn labels_of(ticket: &str, signature: &str) -> BTreeMap<String, String> {
    labels::for_ticket(ticket, signature).into_iter().collect()
}

/// The label selector of everything of `ticket`: both of afe's labels.
pub fn selector(ticket: &str) -> String {
    format!(
        "{}={ticket},{}={}",
        labels::TICKET,
        labels::MANAGED_BY.0,
        labels::MANAGED_BY.1
    )
}

/// Whether a found object's labels say it is afe's, of `ticket`.
pub fn is_ours(found: Option<&BTreeMap<String, String>>, ticket: &str) -> bool {
    found.is_some_and(|labels| {
        labels.get(labels::TICKET).map(String::as_str) == Some(ticket)
            && labels.get(labels::MANAGED_BY.0).map(String::as_str) == Some(labels::MANAGED_BY.1)
    })
}

fn meta(spec: &SandboxSpec, signature: &str, name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels_of(&spec.ticket, signature)),
        ..Default::default()
    }
}

/// The ticket's volume: ReadWriteOnce, of the settings' size and class.
pub fn claim(
    spec: &SandboxSpec,
    signature: &str,
    name: &str,
    settings: &KubeSandboxSettings,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(spec, signature, name, &settings.namespace),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: settings.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(settings.storage.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// CPUs as the API writes them back (`1500m`, `2`): the canonical form, so a second apply
/// changes nothing.
pub fn cpu_quantity(cpus: f64) -> Quantity {
    let millis = (cpus * 1000.0).round() as i64;
    if millis % 1000 == 0 {
        Quantity(format!("{}", millis / 1000))
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// Memory as the API writes it back: the largest binary unit that divides it (`512Mi`), else
/// bytes.
pub fn memory_quantity(bytes: u64) -> Quantity {
    for (unit, size) in [
        ("Ti", 1u64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return Quantity(format!("{}{unit}", bytes / size));
        }
    }
    Quantity(bytes.to_string())
}

/// The same requests and limits for `cpu` and `memory`, where given.
fn resources(
    cpu: Option<Quantity>,
    memory: Option<Quantity>,
) -> Option<k8s_openapi::api::core::v1::ResourceRequirements> {
    let mut both = BTreeMap::new();
    if let Some(cpu) = cpu {
        both.insert("cpu".to_string(), cpu);
    }
    if let Some(memory) = memory {
        both.insert("memory".to_string(), memory);
    }
    (!both.is_empty()).then(|| k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some(both.clone()),
        requests: Some(both),
        ..Default::default()
    })
}

/// The engine's own containers: small and fixed.
fn engine_resources() -> Option<k8s_openapi::api::core::v1::ResourceRequirements> {
    resources(
        Some(Quantity("100m".to_string())),
        Some(Quantity("64Mi".to_string())),
    )
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        ..Default::default()
    }
}

fn scratch(name: &str) -> Volume {
    Volume {
        name: name.to_string(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity("16Mi".to_string())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs as `uid`, with no capability but `add`, no privilege escalation.
fn as_user(uid: i64, add: &[&str], read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: (!add.is_empty()).then(|| add.iter().map(|c| c.to_string()).collect()),
            drop: Some(vec!["ALL".to_string()]),
        }),
        read_only_root_filesystem: Some(read_only_root),
        run_as_non_root: Some(uid != 0),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        ..Default::default()
    }
}

/// The netlock init container: root with NET_ADMIN alone, once, before anything else in the Pod
/// runs; it applies the lock, reads it back, and fails the Pod when it does not hold (its words
/// are the Pod's termination message).
pub fn netlock(settings: &KubeSandboxSettings) -> Container {
    Container {
        name: NETLOCK.to_string(),
        image: Some(settings.engine_image.clone()),
        image_pull_policy: Some(settings.image_pull_policy.clone()),
        command: Some(vec![ENGINE.to_string()]),
        args: Some(netlock_args()),
        resources: engine_resources(),
        security_context: Some(as_user(0, &["NET_ADMIN"], true)),
        // iptables' legacy backend takes its lock file under /run; the root is read-only.
        volume_mounts: Some(vec![mount(NETLOCK_SCRATCH, "/run")]),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Default::default()
    }
}

/// netlock's arguments: the proxy's uid alone may send.
pub fn netlock_args() -> Vec<String> {
    vec![
        "netlock".to_string(),
        "--proxy-uid".to_string(),
        PROXY_UID.to_string(),
    ]
}

/// The proxy: the engine image's `serve` as uid 1337 with the allowlist (its configuration inline,
/// with the control API's token), decisions logged to a scratch volume.
pub fn proxy(settings: &KubeSandboxSettings, config_text: &str) -> Container {
    Container {
        name: PROXY.to_string(),
        image: Some(settings.engine_image.clone()),
        image_pull_policy: Some(settings.image_pull_policy.clone()),
        command: Some(vec![ENGINE.to_string()]),
        args: Some(vec!["serve".to_string()]),
        env: Some(vec![EnvVar {
            name: "AF_PROXY_CONFIG_TEXT".to_string(),
            value: Some(config_text.to_string()),
            ..Default::default()
        }]),
        resources: engine_resources(),
        security_context: Some(as_user(PROXY_UID, &[], true)),
        volume_mounts: Some(vec![mount(PROXY_LOG, "/var/log/af")]),
        ..Default::default()
    }
}

/// The sandbox's variables: each one the flow names, by `secretKeyRef` to the settings' Secret
/// (the value never passes through the worker), and with egress the proxy's.
pub fn environment(spec: &SandboxSpec, settings: &KubeSandboxSettings) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = spec
        .env
        .keys()
        .map(|name| EnvVar {
            name: name.clone(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: settings.env_secret.clone().unwrap_or_default(),
                    key: name.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    if spec.has_egress() {
        env.extend(
            inside::proxy_variables()
                .into_iter()
                .map(|(name, value)| EnvVar {
                    name,
                    value: Some(value),
                    ..Default::default()
                }),
        );
    }
    env
}

/// The sandbox container: the flow's image as uid 1000, no capability, the flow's CPUs and memory
/// as requests and limits, the workspace at `/workspace`; ready once its folders are made and,
/// with egress, its proxy listens.
pub fn sandbox(spec: &SandboxSpec, settings: &KubeSandboxSettings) -> Container {
    Container {
        name: SANDBOX.to_string(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(settings.image_pull_policy.clone()),
        command: Some(vec![
            "sh".to_string(),
            "-c".to_string(),
            inside::IDLE.to_string(),
        ]),
        working_dir: Some(workspace::ROOT.to_string()),
        env: Some(environment(spec, settings)).filter(|env| !env.is_empty()),
        resources: resources(
            spec.cpus.map(cpu_quantity),
            spec.memory_bytes.map(memory_quantity),
        ),
        // The ticket's tools write where they like (a home, /tmp): only its user's own files.
        security_context: Some(as_user(SANDBOX_UID, &[], false)),
        volume_mounts: Some(vec![mount(WORKSPACE_VOLUME, workspace::ROOT)]),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(inside::ready_check(spec.has_egress())),
            }),
            period_seconds: Some(1),
            failure_threshold: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The ticket's Pod, named `name`, using the PVC of the same name. `proxy_config` is the
/// proxy's configuration text, given when the flow has egress.
pub fn pod(
    spec: &SandboxSpec,
    signature: &str,
    name: &str,
    settings: &KubeSandboxSettings,
    proxy_config: Option<&str>,
) -> Pod {
    let mut containers = vec![sandbox(spec, settings)];
    let mut volumes = vec![
        Volume {
            name: WORKSPACE_VOLUME.to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: name.to_string(),
                read_only: Some(false),
            }),
            ..Default::default()
        },
        scratch(NETLOCK_SCRATCH),
    ];
    if let Some(config) = proxy_config {
        containers.push(proxy(settings, config));
        volumes.push(scratch(PROXY_LOG));
    }
    Pod {
        metadata: meta(spec, signature, name, &settings.namespace),
        spec: Some(PodSpec {
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            // A sandbox whose process ended is not started again: what ran in it may have been
            // cut. The engine sees the Pod gone and restores the ticket into a new one.
            restart_policy: Some("Never".to_string()),
            runtime_class_name: spec
                .runtime_class
                .clone()
                .or(settings.runtime_class.clone()),
            termination_grace_period_seconds: Some(5),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_string(),
                    ..Default::default()
                }),
                // The volume's files are the sandbox user's group's, where the volume's driver
                // applies it.
                fs_group: Some(SANDBOX_UID),
                fs_group_change_policy: Some("OnRootMismatch".to_string()),
                ..Default::default()
            }),
            init_containers: Some(vec![netlock(settings)]),
            containers,
            volumes: Some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A RuntimeClass name that says gVisor: netlock's owner match does not exist there, so the Pod
/// would only look isolated (seed 003, "Rete senza dipendere dal CNI").
pub fn names_gvisor(class: &str) -> bool {
    let lower = class.to_ascii_lowercase();
    lower.contains("gvisor") || lower.contains("runsc")
}

/// Both objects as YAML documents, keys sorted (the same text whatever order serde_json keeps
/// keys in), for goldens and the schema and checkov tiers.
pub fn to_yaml(claim: &PersistentVolumeClaim, pod: &Pod) -> String {
    let mut out = String::new();
    for value in [
        sorted_keys(with_kind(
            serde_json::to_value(claim),
            "PersistentVolumeClaim",
        )),
        sorted_keys(with_kind(serde_json::to_value(pod), "Pod")),
    ] {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&value).unwrap_or_default());
    }
    out
}

/// `value` with every object's keys in sorted order, whatever order serde_json keeps them in (its
/// `preserve_order` feature, which some dependency turns on in a workspace-wide build, keeps
/// insertion order): rendered text reads the same from every build.
pub fn sorted_keys(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted_keys(v)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted_keys).collect())
        }
        other => other,
    }
}

/// `value` with its apiVersion and kind first (k8s-openapi leaves them to the client).
pub fn with_kind(
    value: Result<serde_json::Value, serde_json::Error>,
    kind: &str,
) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    object.insert("apiVersion".into(), "v1".into());
    object.insert("kind".into(), kind.into());
    if let Ok(serde_json::Value::Object(rest)) = value {
        object.extend(rest);
    }
    serde_json::Value::Object(object)
}
