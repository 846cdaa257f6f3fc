//! The local runtime's objects as data (`af_docker::plan`): golden files of the whole plan for the
//! shop example and a minimal manifest, and one test per hardening guarantee, each judged over
//! every container the plan would create. Run with AF_UPDATE_GOLDEN=1 to rewrite the golden
//! files, then review the diff.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use af_docker::networks::Layout;
use af_docker::plan::{Inputs, Plan, plan};
use af_docker::service::Placement;
use af_docker::trust::CaptureCa;
use af_manifest::{EnvironmentId, Manifest};
use af_runtime::capture_trust::CaptureCaPem;
use bollard::models::ContainerCreateBody;

const ENGINE_IMAGE: &str = "antifailure/proxy:0123456789abcdef";
const TOKEN: &str = "golden-control-token";
const SUBNET_THIRD: u8 = 7;

fn shop() -> Manifest {
    af_manifest::load(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop/af.yaml"))
        .unwrap()
}

fn minimal() -> Manifest {
    af_manifest::parse(
        "version: 1\nname: tiny\nruntime: {provider: local}\nservices:\n  api:\n    image: example/api:1\n    port: 8000\n",
        "af.yaml",
    )
    .unwrap()
}

/// The plan of `manifest` with fixed stand-ins for what the platform decides: the subnet
/// 10.213.7.0/24, instance addresses from .128 (the daemon's half), image references by name, a
/// capture CA whose text is a placeholder (the plan carries it, never parses it).
fn planned(manifest: &Manifest) -> Plan {
    let env = EnvironmentId::derive(&manifest.name, "main");
    let internal = af_docker::names::internal_network(&env);
    let egress = af_docker::names::egress_network(&env);
    let layout = Layout {
        subnets: vec![format!("10.213.{SUBNET_THIRD}.0/24")],
        gateways: vec![format!("10.213.{SUBNET_THIRD}.1")],
    };
    let gate_targets = vec!["--public-tcp".to_string(), "192.0.2.10:443".to_string()];
    let no_proxy = af_runtime::no_proxy(manifest.services.keys().map(String::as_str));
    let ca = CaptureCa {
        volume: format!("af-{env}-trust"),
        pem: CaptureCaPem {
            cert: "-----BEGIN CERTIFICATE-----\n(the environment's capture CA)\n-----END CERTIFICATE-----\n".into(),
            key: "-----BEGIN PRIVATE KEY-----\n(its key)\n-----END PRIVATE KEY-----\n".into(),
        },
        with_system_store: true,
    };
    let at = Placement {
        env: &env,
        engine_image: ENGINE_IMAGE,
        internal: &internal,
        layout: &layout,
        sidecar_ip: Ipv4Addr::new(10, 213, SUBNET_THIRD, 2),
        gate_targets: &gate_targets,
        no_proxy: &no_proxy,
        capture_ca: manifest.egress.needs_capture_ca().then_some(&ca),
        database: None,
        relay: None,
        variables: af_docker::plan::service::Variables(&|_| None),
    };
    let images: BTreeMap<String, String> = manifest
        .services
        .values()
        .map(|s| {
            let image = match &s.source {
                af_manifest::ImageSource::Image(reference) => reference.clone(),
                af_manifest::ImageSource::Build { .. } => {
                    format!("af-{}-{}:0123456789ab", manifest.name, s.name)
                }
            };
            (s.name.clone(), image)
        })
        .collect();
    let cron_commands: BTreeMap<String, Vec<String>> = manifest
        .services
        .values()
        .filter(|s| s.cron.is_some())
        .map(|s| (s.name.clone(), s.command.clone().unwrap_or_default()))
        .collect();
    let mut next = 128u8;
    let instance_addresses: BTreeMap<String, Vec<Ipv4Addr>> = manifest
        .services_in_start_order()
        .into_iter()
        .map(|s| {
            let addresses = (0..s.replicas)
                .map(|_| {
                    next += 1;
                    Ipv4Addr::new(10, 213, SUBNET_THIRD, next)
                })
                .collect();
            (s.name.clone(), addresses)
        })
        .collect();
    let lookup = |name: &str| Some(format!("(af's {name})"));
    plan(
        manifest,
        &Inputs {
            at,
            egress: &egress,
            subnet_third: SUBNET_THIRD,
            images: &images,
            cron_commands: &cron_commands,
            instance_addresses: &instance_addresses,
            control_token: TOKEN,
            lookup: &lookup,
        },
    )
    .unwrap()
}

/// `value` with every object's keys in sorted order, whichever order its maps keep.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let entries: std::collections::BTreeMap<String, serde_json::Value> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            serde_json::Value::Object(entries.into_iter().collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        scalar => scalar,
    }
}

fn check_golden(name: &str, manifest: &Manifest) {
    // Through a JSON value with its keys sorted: the daemon's types hold labels in hash maps,
    // and a JSON map keeps its insertion order when a crate of the workspace turns on
    // serde_json's `preserve_order` (agent-client-protocol-schema does).
    let value = sorted(serde_json::to_value(planned(manifest)).unwrap());
    let text = serde_json::to_string_pretty(&value).unwrap() + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var("AF_UPDATE_GOLDEN").is_ok() {
        // CI compares with what was reviewed; rewriting there would pass any plan.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "AF_UPDATE_GOLDEN is refused with CI=true"
        );
        std::fs::write(&path, &text).unwrap();
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing: run with AF_UPDATE_GOLDEN=1", path.display()));
    assert!(
        golden == text,
        "{} differs from the plan; if the change is meant, rerun with AF_UPDATE_GOLDEN=1 and review the diff",
        path.display()
    );
}

#[test]
fn the_shop_plan_is_as_reviewed() {
    check_golden("shop.json", &shop());
}

#[test]
fn a_minimal_plan_is_as_reviewed() {
    check_golden("minimal.json", &minimal());
}

/// Every container of both plans, by name.
fn every_container() -> Vec<(String, ContainerCreateBody)> {
    [shop(), minimal()]
        .iter()
        .flat_map(|manifest| planned(manifest).containers)
        .collect()
}

/// The application containers: those carrying a service's label.
fn applications() -> Vec<(String, ContainerCreateBody)> {
    let apps: Vec<_> = every_container()
        .into_iter()
        .filter(|(_, body)| {
            body.labels
                .as_ref()
                .is_some_and(|l| l.contains_key(af_docker::names::SERVICE_LABEL))
        })
        .collect();
    // web ×2, worker, report; api: the guarantees below are judged on real containers.
    assert_eq!(apps.len(), 5, "{apps:#?}");
    apps
}

#[test]
fn no_application_container_has_a_capability() {
    for (name, body) in applications() {
        let host = body.host_config.unwrap();
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]), "{name}");
        assert_eq!(host.cap_add, None, "{name}");
        assert_ne!(host.privileged, Some(true), "{name}");
    }
}

#[test]
fn no_application_container_joins_the_egress_network_or_any_network_but_its_pods() {
    for (name, body) in applications() {
        let host = body.host_config.unwrap();
        let mode = host.network_mode.clone().unwrap_or_default();
        assert!(
            mode.starts_with("container:") && mode.ends_with("-holder"),
            "{name} must join its holder's namespace, not {mode:?}"
        );
        assert!(
            body.networking_config.is_none(),
            "{name} names networks of its own"
        );
        assert_ne!(host.network_mode.as_deref(), Some("host"), "{name}");
    }
    // The only containers on the egress network are the sidecar (attached after creation) and
    // the ingresses, which run the engine.
    for (name, body) in every_container() {
        let on_egress = body
            .host_config
            .as_ref()
            .and_then(|h| h.network_mode.as_deref())
            .is_some_and(|mode| mode.ends_with("-egress"));
        if on_egress {
            assert!(
                name.ends_with("-ingress"),
                "{name} is on the egress network"
            );
            assert_eq!(body.image.as_deref(), Some(ENGINE_IMAGE), "{name}");
        }
    }
}

#[test]
fn no_container_mounts_the_docker_socket_or_the_hosts_files() {
    for (name, body) in every_container() {
        let host = body.host_config.unwrap_or_default();
        for bind in host.binds.unwrap_or_default() {
            let source = bind.split(':').next().unwrap_or_default();
            assert!(
                !source.starts_with('/'),
                "{name} binds the host's {source}: only af's volumes may be mounted"
            );
            assert!(!bind.contains("docker.sock"), "{name}: {bind}");
        }
        assert!(host.mounts.is_none(), "{name} has mounts beyond its binds");
        assert!(host.devices.is_none(), "{name} has devices");
    }
}

#[test]
fn every_container_runs_without_new_privileges_and_without_capabilities_it_does_not_name() {
    for (name, body) in every_container() {
        let host = body.host_config.unwrap_or_default();
        assert!(
            host.security_opt
                .unwrap_or_default()
                .contains(&"no-new-privileges".to_string()),
            "{name}"
        );
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]), "{name}");
        // The one capability af adds: a holder's NET_ADMIN, for the refusal rules.
        if let Some(added) = host.cap_add {
            assert!(
                name.ends_with("-holder") && added == ["NET_ADMIN"],
                "{name} adds {added:?}"
            );
        }
        assert_ne!(host.privileged, Some(true), "{name}");
    }
}

#[test]
fn the_engines_own_containers_have_a_read_only_root() {
    for (name, body) in every_container() {
        if body.image.as_deref() == Some(ENGINE_IMAGE) {
            let host = body.host_config.unwrap_or_default();
            assert_eq!(host.readonly_rootfs, Some(true), "{name}");
        }
    }
}

#[test]
fn the_sidecars_configuration_in_the_plan_is_one_the_sidecar_accepts() {
    let plan = planned(&shop());
    let sidecar = plan
        .containers
        .iter()
        .find(|(name, _)| name.ends_with("-sidecar"))
        .unwrap()
        .1;
    let text = sidecar.env.as_ref().unwrap()[0]
        .strip_prefix("AF_PROXY_CONFIG_TEXT=")
        .unwrap();
    let config = af_sidecar_api::SidecarConfig::from_text(text).unwrap();
    assert_eq!(config.inline_token(), Some(TOKEN));
    assert_eq!(config.policy, shop().egress);
}
