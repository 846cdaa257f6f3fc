//! The ticket's Pod and PVC as reviewed files (`tests/golden/`), and what they must say whatever
//! the golden holds. `AFE_UPDATE_GOLDEN=1` rewrites the goldens.

mod support;

use std::path::Path;

fn golden(name: &str, text: &str) {
    afe_testkit::golden(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden"),
        name,
        text,
    );
}

#[test]
fn the_pod_and_its_claim_match_their_goldens() {
    let closed = support::spec(&[]);
    golden("sandbox-no-egress.yaml", &support::rendered(&closed, None));
    let open = support::spec(&["pypi.org", "*.pythonhosted.org"]);
    let config = support::proxy_config(&open);
    golden(
        "sandbox-egress.yaml",
        &support::rendered(&open, Some(&config)),
    );
}

#[test]
fn the_pod_is_contained_whatever_the_golden_says() {
    let open = support::spec(&["pypi.org"]);
    let yaml = support::rendered(&open, Some(&support::proxy_config(&open)));
    let docs: Vec<serde_json::Value> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let pod = &docs[1]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let init = &pod["initContainers"][0];
    assert_eq!(init["name"], "netlock");
    assert_eq!(
        init["args"],
        serde_json::json!(["netlock", "--proxy-uid", "1337"])
    );
    assert_eq!(
        init["securityContext"]["capabilities"]["add"],
        serde_json::json!(["NET_ADMIN"])
    );
    let containers = pod["containers"].as_array().unwrap();
    let sandbox = &containers[0];
    assert_eq!(sandbox["securityContext"]["runAsUser"], 1000);
    assert_eq!(
        sandbox["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        sandbox["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    assert!(
        sandbox["securityContext"]["capabilities"]
            .get("add")
            .is_none()
    );
    // The flow's variable by reference: its value is never in the Pod.
    assert!(!yaml.contains("never-rendered"));
    assert_eq!(
        sandbox["env"][0]["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "afe-sandbox-env", "key": "MODEL_KEY", "optional": false})
    );
    let proxy = &containers[1];
    assert_eq!(proxy["name"], "proxy");
    assert_eq!(proxy["securityContext"]["runAsUser"], 1337);
    assert!(
        proxy["securityContext"]["capabilities"]
            .get("add")
            .is_none()
    );
    // Without egress there is no proxy at all.
    let closed = support::rendered(&support::spec(&[]), None);
    assert!(!closed.contains("name: proxy"));
}

#[test]
fn a_runtime_class_is_the_flows_or_the_settings_and_gvisor_is_named_as_such() {
    use afe_sandbox_kube::render;
    let mut spec = support::spec(&[]);
    let settings = afe_sandbox_kube::KubeSandboxSettings {
        runtime_class: Some("kata-qemu".into()),
        ..support::settings()
    };
    let pod = render::pod(&spec, "s", "n", &settings, None);
    assert_eq!(
        pod.spec.as_ref().unwrap().runtime_class_name.as_deref(),
        Some("kata-qemu")
    );
    spec.runtime_class = Some("kata-fc".into());
    let pod = render::pod(&spec, "s", "n", &settings, None);
    assert_eq!(
        pod.spec.as_ref().unwrap().runtime_class_name.as_deref(),
        Some("kata-fc")
    );
    assert!(render::names_gvisor("gvisor") && render::names_gvisor("runsc-kvm"));
    assert!(!render::names_gvisor("kata"));
    assert_eq!(render::cpu_quantity(1.5).0, "1500m");
    assert_eq!(render::cpu_quantity(2.0).0, "2");
    assert_eq!(render::memory_quantity(512 << 20).0, "512Mi");
    assert_eq!(render::memory_quantity(3 << 30).0, "3Gi");
    assert_eq!(render::memory_quantity(1000).0, "1000");
}
