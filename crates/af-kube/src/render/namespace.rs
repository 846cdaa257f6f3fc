//! The Namespace: `<namespace_prefix><environment id>`, labelled as ours in the object itself so
//! the creating call carries the label.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::RenderInput;
use super::names::ownership;

pub fn namespace(input: &RenderInput<'_>, name: &str) -> Namespace {
    let mut labels = ownership(input.env);
    // Pod Security Admission: nothing privileged can be scheduled here even if a manifest or a
    // mistake asked for it; the stricter profile is reported. With netlock, each pod's first step
    // is root with NET_ADMIN, which only the privileged level admits: enforced is then
    // `privileged`, and what the pods' own containers do is still reported against `restricted`.
    let enforce = if input.manifest.runtime.netlock {
        "privileged"
    } else {
        "baseline"
    };
    for (key, value) in [
        ("pod-security.kubernetes.io/enforce", enforce),
        ("pod-security.kubernetes.io/warn", "restricted"),
        ("pod-security.kubernetes.io/audit", "restricted"),
    ] {
        labels.insert(key.to_string(), value.to_string());
    }
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        ..Default::default()
    }
}
