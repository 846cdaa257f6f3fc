//! One test per sentence of seed 000 (and issue 7) that describes an object; each quotes its
//! sentence.

mod support;

use af_kube::render::names::{WORKLOAD_LABEL, fitted};
use af_kube::render::{Object, Rendered, ports};
use k8s_openapi::api::core::v1::PodSpec;
use support::{rendered, shop};

/// The pod spec of `service`'s Deployment.
fn pod_spec(objects: &Rendered, service: &str) -> PodSpec {
    objects
        .deployments
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(service))
        .and_then(|d| d.spec.clone())
        .and_then(|spec| spec.template.spec)
        .unwrap_or_else(|| panic!("no Deployment {service}"))
}

/// Every pod spec a customer's code runs in (services, migrations) and the probe's.
fn workload_pods(objects: &Rendered) -> Vec<(String, PodSpec)> {
    let mut pods: Vec<(String, PodSpec)> = objects
        .deployments
        .iter()
        .map(|d| {
            (
                d.metadata.name.clone().unwrap(),
                d.spec.clone().unwrap().template.spec.unwrap(),
            )
        })
        .collect();
    pods.extend(objects.migrations.iter().map(|j| {
        (
            j.metadata.name.clone().unwrap(),
            j.spec.clone().unwrap().template.spec.unwrap(),
        )
    }));
    pods
}

/// "One Deployment and one Service per service in the manifest, so a manifest that says
/// http://worker:8080 means it."
#[test]
fn a_deployment_and_a_service_named_after_each_service() {
    let objects = rendered(&shop());
    let deployments: Vec<_> = objects
        .deployments
        .iter()
        .map(|d| d.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(deployments, ["worker", "report", "web"]);
    let services: Vec<_> = objects
        .services
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    // `report` has no port: nothing could reach it by name, so it has no Service.
    assert_eq!(services, ["worker", "web"]);
    let worker = &objects.services[0]
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()[0];
    assert_eq!(worker.port, 9090);
}

/// "The egress sidecar is always a single pod whatever any service asks for."
#[test]
fn the_sidecar_is_one_replica_even_when_a_service_asks_for_three() {
    let mut manifest = shop();
    manifest.services.get_mut("web").unwrap().replicas = 3;
    let objects = rendered(&manifest);
    let sidecar = objects.sidecar.spec.as_ref().unwrap();
    assert_eq!(sidecar.replicas, Some(1));
    assert_eq!(
        sidecar.strategy.as_ref().unwrap().type_.as_deref(),
        Some("Recreate"),
        "never two during a change"
    );
    let web = objects
        .deployments
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some("web"))
        .unwrap();
    assert_eq!(web.spec.as_ref().unwrap().replicas, Some(3));
}

/// "The request and the limit are the SAME figure."
#[test]
fn request_equals_limit() {
    let objects = rendered(&shop());
    let web = &pod_spec(&objects, "web").containers[0];
    let resources = web.resources.as_ref().unwrap();
    assert_eq!(resources.requests, resources.limits);
    assert_eq!(resources.limits.as_ref().unwrap()["cpu"].0, "250m");
    assert_eq!(resources.limits.as_ref().unwrap()["memory"].0, "128Mi");
}

/// "A dimension the manifest did not name is left out of both maps rather than set to zero ... so
/// a service that named no size produces the identical Deployment it produced before the key was
/// honoured."
#[test]
fn an_unnamed_dimension_is_in_neither_map_and_no_size_renders_as_no_key() {
    let objects = rendered(&shop());
    let worker = &pod_spec(&objects, "worker").containers[0];
    let resources = worker.resources.as_ref().unwrap();
    assert!(!resources.limits.as_ref().unwrap().contains_key("cpu"));
    assert!(!resources.requests.as_ref().unwrap().contains_key("cpu"));
    let base = "name: app\nruntime: {provider: kubernetes}\nservices:\n  api:\n    image: a\n    port: 80\n";
    let without = rendered(&support::manifest(base));
    let empty = rendered(&support::manifest(&format!("{base}    resources: {{}}\n")));
    assert_eq!(without.deployments, empty.deployments);
    let api = &pod_spec(&without, "api").containers[0];
    assert_eq!(api.resources, None);
}

/// "No pod gets a service account token. A pod that can talk to the API server can delete the
/// policy that is containing it."
#[test]
fn no_pod_mounts_a_service_account_token() {
    let objects = rendered(&shop());
    let mut specs: Vec<PodSpec> = workload_pods(&objects)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    specs.push(objects.probe.spec.clone().unwrap());
    specs.push(objects.sidecar.spec.clone().unwrap().template.spec.unwrap());
    for spec in specs {
        assert_eq!(spec.automount_service_account_token, Some(false));
    }
}

/// "Services may reach each other ... and the rule that permits it selects pods rather than
/// namespaces, so it can never match anything outside."
#[test]
fn the_services_to_services_rule_selects_pods_never_namespaces() {
    let objects = rendered(&shop());
    let rule = objects
        .policies
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("af-workloads-to-workloads"))
        .unwrap()
        .spec
        .clone()
        .unwrap();
    let peers: Vec<_> = rule
        .ingress
        .unwrap()
        .into_iter()
        .flat_map(|r| r.from.unwrap())
        .chain(rule.egress.unwrap().into_iter().flat_map(|r| r.to.unwrap()))
        .collect();
    assert!(!peers.is_empty());
    for peer in peers {
        assert!(
            peer.namespace_selector.is_none() && peer.ip_block.is_none(),
            "{peer:?}"
        );
        let labels = peer.pod_selector.unwrap().match_labels.unwrap();
        // Each other, and the sidecar delivering webhooks.
        assert!(
            labels.contains_key(WORKLOAD_LABEL)
                || labels.get("dev.antifailure.role").map(String::as_str) == Some("sidecar"),
            "{labels:?}"
        );
    }
}

/// "Its egress excludes the link local range, which carries the instance metadata endpoint ...
/// and the private ranges, which carry the cluster's control plane."
#[test]
fn the_sidecar_egress_excludes_link_local_and_private_ranges_in_both_families() {
    let objects = rendered(&shop());
    let egress = objects
        .policies
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("af-sidecar-egress"))
        .unwrap()
        .spec
        .clone()
        .unwrap()
        .egress
        .unwrap();
    let blocks: Vec<_> = egress[0]
        .to
        .clone()
        .unwrap()
        .into_iter()
        .map(|p| p.ip_block.unwrap())
        .collect();
    assert_eq!(blocks[0].cidr, "0.0.0.0/0");
    for excluded in [
        "169.254.0.0/16",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
    ] {
        assert!(
            blocks[0]
                .except
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e == excluded),
            "{excluded}"
        );
    }
    assert_eq!(blocks[1].cidr, "::/0");
    for excluded in ["fc00::/7", "fe80::/10"] {
        assert!(
            blocks[1]
                .except
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e == excluded),
            "{excluded}"
        );
    }
    // Its other destinations: the environment's own workloads (webhook delivery), by pod label
    // only, and the cluster's resolver, on 53.
    let workloads = egress[1].to.clone().unwrap();
    assert!(workloads.iter().all(|p| p.namespace_selector.is_none()
        && p.ip_block.is_none()
        && p.pod_selector.is_some()));
    let dns = &egress[2];
    assert!(dns.ports.as_ref().unwrap().iter().all(
        |p| p.port == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(53))
    ));
}

/// "Without a domain, no Ingress is created ... so af up prints no URL rather than one that
/// resolves to nothing." "With domain set, each web service gets an Ingress at
/// <environment>-<service>.<domain> and an extra policy letting the ingress controller in."
#[test]
fn ingresses_and_their_policy_exist_only_with_a_domain() {
    let with = rendered(&shop());
    assert_eq!(with.ingresses.len(), 1);
    let host = with.ingresses[0].spec.clone().unwrap().rules.unwrap()[0]
        .host
        .clone();
    assert_eq!(host.as_deref(), Some("shop-main-web.preview.shop.example"));
    assert_eq!(with.policies.len(), 6);
    let without = rendered(&support::without_domain(shop()));
    assert!(without.ingresses.is_empty());
    assert_eq!(without.policies.len(), 5, "five NetworkPolicies");
}

/// "Every customer-code pod also has a trusted startup gate, including migrations ... It uses
/// the engine's own image, not a shell or networking tool from the application image."
#[test]
fn the_gate_is_the_first_init_container_of_every_customer_pod() {
    for (name, spec) in workload_pods(&rendered(&shop())) {
        let gate = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(gate.image.as_deref(), Some(support::ENGINE_IMAGE), "{name}");
        assert_eq!(gate.args.as_ref().unwrap()[0], "gate", "{name}");
        assert!(gate.args.as_ref().unwrap().contains(&format!(
            "{}:{}",
            support::SIDECAR_IP,
            ports::PROXY
        )));
    }
}

/// "Every pod resolves names through the sidecar and through nothing else."
#[test]
fn every_customer_pod_resolves_through_the_sidecar_only() {
    let objects = rendered(&shop());
    let mut specs = workload_pods(&objects);
    specs.push(("probe".into(), objects.probe.spec.clone().unwrap()));
    for (name, spec) in specs {
        assert_eq!(spec.dns_policy.as_deref(), Some("None"), "{name}");
        let dns = spec.dns_config.unwrap();
        assert_eq!(dns.nameservers.unwrap(), [support::SIDECAR_IP], "{name}");
        assert_eq!(dns.searches.unwrap()[0], "af-shop-main.svc.cluster.local");
    }
}

/// "No added capabilities, allowPrivilegeEscalation: false, seccomp RuntimeDefault" (issue 7).
#[test]
fn no_pod_gets_privileges() {
    let objects = rendered(&shop());
    for (name, spec) in workload_pods(&objects) {
        assert_eq!(
            spec.security_context
                .unwrap()
                .seccomp_profile
                .unwrap()
                .type_,
            "RuntimeDefault"
        );
        for container in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let security = container.security_context.clone().unwrap();
            assert_eq!(security.allow_privilege_escalation, Some(false), "{name}");
            let capabilities = security.capabilities.unwrap();
            assert_eq!(capabilities.add, None, "{name}");
            assert_eq!(capabilities.drop.unwrap(), ["ALL"], "{name}");
        }
    }
}

/// "A service that declares migrate gets a Job that has to finish first. It is never retried."
#[test]
fn a_migration_is_a_job_never_retried() {
    let objects = rendered(&shop());
    assert_eq!(objects.migrations.len(), 1);
    let job = &objects.migrations[0];
    assert_eq!(job.metadata.name.as_deref(), Some("af-migrate-web"));
    let spec = job.spec.clone().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(
        pod.containers[0].command.as_deref(),
        Some(&["/shop".to_string(), "migrate".to_string()][..])
    );
}

/// "The runtime starts one pod under exactly the rules a service runs under and has it try to
/// get out."
#[test]
fn the_probe_pod_runs_under_the_workload_rules() {
    let probe = rendered(&shop()).probe;
    let labels = probe.metadata.labels.unwrap();
    assert_eq!(
        labels[WORKLOAD_LABEL], "true",
        "the policies that contain services contain it"
    );
    let spec = probe.spec.unwrap();
    assert_eq!(spec.containers[0].args.as_ref().unwrap()[0], "probe");
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
}

/// "Every namespace this runtime makes carries dev.antifailure.managed=true, set in the same call
/// that creates the object."
#[test]
fn the_namespace_carries_our_labels_in_the_object() {
    let namespace = rendered(&shop()).namespace;
    assert_eq!(namespace.metadata.name.as_deref(), Some("af-shop-main"));
    let labels = namespace.metadata.labels.unwrap();
    assert_eq!(labels["dev.antifailure.managed"], "true");
    assert_eq!(labels["dev.antifailure.environment"], "shop-main");
}

/// "Cron services are placed as ordinary Deployments rather than CronJobs."
#[test]
fn a_cron_service_is_a_deployment_running_the_engine_scheduler() {
    let objects = rendered(&shop());
    let spec = pod_spec(&objects, "report");
    let command = spec.containers[0].command.clone().unwrap();
    assert_eq!(
        command[..5],
        ["/af/af-proxy", "cron", "--schedule", "* * * * *", "--"]
    );
    assert_eq!(command[5..], ["/shop", "report"]);
    assert_eq!(
        spec.init_containers.unwrap()[1].args.as_ref().unwrap()[0],
        "install"
    );
}

/// The sidecar is the one way out, never its control API: no Service port, no policy port, and
/// the control API listens on the pod's loopback only.
#[test]
fn the_control_api_is_published_to_nobody() {
    let objects = rendered(&shop());
    let control = i32::from(ports::CONTROL);
    assert!(
        objects
            .sidecar_service
            .spec
            .clone()
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .all(|p| p.port != control)
    );
    for policy in &objects.policies {
        let text = serde_json::to_string(policy).unwrap();
        assert!(!text.contains(&control.to_string()), "{text}");
    }
    let config = objects.sidecar_config.string_data.clone().unwrap()["config.yaml"].clone();
    assert!(config.contains("listen: 127.0.0.1:9901"));
}

/// The configuration the Secret carries is one the sidecar accepts (a sidecar that cannot load it
/// serves nothing), read by the sidecar's own parser as the typed configuration the runtime
/// wrote, which writes the same text again.
#[test]
fn the_sidecar_accepts_its_rendered_configuration() {
    let manifest = shop();
    let objects = rendered(&manifest);
    let text = objects.sidecar_config.string_data.clone().unwrap()["config.yaml"].clone();
    let loaded = af_egress::parse_config(&text, std::path::Path::new("/"))
        .unwrap_or_else(|problems| panic!("{problems:?}\n{text}"));
    let written = af_sidecar_api::SidecarConfig::from_text(&text).unwrap();
    assert_eq!(loaded.config, written);
    assert_eq!(written.to_text().unwrap(), text);
    assert_eq!(loaded.control_token, support::TOKEN);
    assert_eq!(loaded.config.policy, manifest.egress);
    let dns = loaded.config.dns.as_ref().unwrap();
    assert_eq!(dns.internal_names, ["report", "web", "worker"]);
    assert_eq!(dns.answer_v4, Some(support::SIDECAR_IP.parse().unwrap()));
    assert_eq!(
        loaded.config.control.listen,
        "127.0.0.1:9901".parse().unwrap(),
        "the control API on the pod's loopback only"
    );
    assert_eq!(
        loaded.config.webhooks["web"], "web.af-shop-main.svc.cluster.local:8080",
        "the sidecar's resolver has no search path: the Service's full name"
    );
}

/// "Secret values never appear": a `from_env` value is read from a Secret filled when applied.
#[test]
fn values_from_afs_environment_are_never_rendered() {
    let objects = rendered(&shop());
    let secret = objects.service_env.clone().unwrap();
    assert_eq!(secret.data, None);
    assert_eq!(secret.string_data, None);
    let yaml = af_kube::render::to_yaml(&objects.in_apply_order()).unwrap();
    assert!(yaml.contains("key: SHOP_PAYMENTS_TEST_KEY"));
}

/// Names "are always valid (63-char labels, DNS-1123), deterministic, and collision-free".
#[test]
fn names_are_valid_labels() {
    let objects = rendered(&shop());
    for object in objects.in_apply_order() {
        let value = serde_json::to_value(&object).unwrap();
        let name = value["metadata"]["name"].as_str().unwrap().to_string();
        assert!(
            name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name}"
        );
        assert!(
            matches!(object, Object::Namespace(_))
                || value["metadata"]["namespace"] == "af-shop-main"
        );
    }
    assert_eq!(fitted("web"), "web");
}

/// Issue 3, HTTPS capture: "terminating TLS with a per-environment CA the services are told to
/// trust". Every workload container (services, cron services, migrations) mounts the CA read-only
/// and is pointed at it; the ConfigMap carries the certificate alone (its bundle added when
/// applied); only the sidecar's Secret carries the key. A manifest that captures nothing gets none
/// of it.
#[test]
fn workloads_trust_the_capture_ca_and_only_the_sidecar_has_its_key() {
    let objects = rendered(&shop());
    let ca = support::capture_ca();
    let trust = objects.capture_trust.clone().expect("the shop captures");
    assert_eq!(trust.data.as_ref().unwrap()["capture-ca.pem"], ca.cert);
    let filled = af_kube::render::with_bundle(&trust, Some("SYSTEM STORE\n"));
    assert_eq!(
        filled.data.unwrap()["ca-bundle.pem"],
        format!("SYSTEM STORE\n{}", ca.cert)
    );
    for (pod, spec) in workload_pods(&objects) {
        for container in &spec.containers {
            let mounted = container.volume_mounts.iter().flatten().any(|m| {
                m.mount_path == "/etc/af"
                    && m.name == "af-capture-trust"
                    && m.read_only == Some(true)
            });
            assert!(mounted, "{pod}/{}", container.name);
            let env = container.env.clone().unwrap_or_default();
            let told = |name: &str, value: &str| {
                env.iter()
                    .any(|v| v.name == name && v.value.as_deref() == Some(value))
            };
            assert!(
                told("SSL_CERT_FILE", "/etc/af/ca-bundle.pem")
                    && told("NODE_EXTRA_CA_CERTS", "/etc/af/capture-ca.pem"),
                "{pod}/{}: {env:?}",
                container.name
            );
        }
    }
    let everything = af_kube::render::to_yaml(&objects.in_apply_order()).unwrap();
    assert_eq!(
        everything.matches("PRIVATE KEY-----").count(),
        2,
        "the key's BEGIN and END lines, once, in the sidecar's configuration"
    );
    let config = objects.sidecar_config.string_data.clone().unwrap()["config.yaml"].clone();
    let loaded = af_egress::parse_config(&config, std::path::Path::new("/")).unwrap();
    assert!(loaded.capture_ca.is_some(), "the sidecar loads the CA");

    // Mail alone needs the CA too: it may come over STARTTLS.
    let mut mail_only = shop();
    mail_only.egress.capture.clear();
    assert!(rendered(&mail_only).capture_trust.is_some());

    let mut quiet = shop();
    quiet.egress.capture.clear();
    quiet.egress.mail = af_manifest::MailPolicy::Deny;
    let objects = rendered(&quiet);
    assert!(objects.capture_trust.is_none());
    let everything = af_kube::render::to_yaml(&objects.in_apply_order()).unwrap();
    assert!(!everything.contains("af-capture-trust") && !everything.contains("SSL_CERT_FILE"));
}

/// Issue 5 (and 8), "a changed manifest updates only what changed": the sidecar reads its
/// configuration once, at start, so a changed configuration must change the sidecar's pod template
/// (which replaces the pod); the same configuration must leave it as it is.
#[test]
fn a_changed_sidecar_configuration_replaces_the_sidecar_and_the_same_one_does_not() {
    let digest = |objects: &Rendered| {
        objects
            .sidecar
            .spec
            .clone()
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()["dev.antifailure.config-digest"]
            .clone()
    };
    let before = digest(&rendered(&shop()));
    assert_eq!(before, digest(&rendered(&shop())));
    let mut changed = shop();
    changed.egress.allow.push(af_manifest::HostRule::Exact(
        "api.newly-allowed.example".into(),
    ));
    assert_ne!(before, digest(&rendered(&changed)));
}
