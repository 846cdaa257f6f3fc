//! The fit check, row by row: what is free, which nodes count, and both necessary conditions.

use af_kube::fit::{Amount, Instance, NodeRoom, node_room, pod_requests, shortfalls};
use k8s_openapi::api::core::v1::{Node, Pod};

const GI: u128 = 1 << 30;
const MI: u128 = 1 << 20;

fn node(name: &str, cpu: u128, memory: u128, used_cpu: u128, used_memory: u128) -> NodeRoom {
    NodeRoom {
        name: name.into(),
        schedulable: true,
        ready: true,
        allocatable: Amount {
            cpu_millis: cpu,
            memory_bytes: memory,
        },
        requested: Amount {
            cpu_millis: used_cpu,
            memory_bytes: used_memory,
        },
    }
}

fn instance(owner: &str, cpu: u128, memory: u128) -> Instance {
    Instance {
        owner: owner.into(),
        requests: Amount {
            cpu_millis: cpu,
            memory_bytes: memory,
        },
    }
}

#[test]
fn an_environment_that_fits_has_no_shortfall() {
    let nodes = [node("a", 4000, 8 * GI, 1000, 2 * GI)];
    assert_eq!(
        shortfalls(
            &nodes,
            &[
                instance("web", 500, 256 * MI),
                instance("web", 500, 256 * MI)
            ]
        ),
        Vec::<String>::new()
    );
}

#[test]
fn free_is_allocatable_minus_what_is_already_requested() {
    // 4 CPU allocatable, 3.5 requested: a 1-CPU instance does not fit, though allocatable says 4.
    let nodes = [node("a", 4000, 8 * GI, 3500, 0)];
    let found = shortfalls(&nodes, &[instance("web", 1000, 0)]);
    assert_eq!(
        found,
        [
            "web needs 1 CPU per instance, and the most free on one node is 500m CPU (a)",
            "the environment needs 1 CPU in all, and 500m CPU is free across 1 node(s)"
        ]
    );
}

#[test]
fn every_instance_must_fit_on_some_single_node() {
    // 3 CPU free in all, but never 2 on one node.
    let nodes = [node("a", 1500, 4 * GI, 0, 0), node("b", 1500, 4 * GI, 0, 0)];
    let found = shortfalls(&nodes, &[instance("big", 2000, MI)]);
    assert_eq!(
        found,
        ["big needs 2 CPU per instance, and the most free on one node is 1500m CPU (a)"]
    );
}

#[test]
fn the_total_must_fit_in_what_is_free_across_all_nodes() {
    // Each instance fits somewhere; three of them do not fit anywhere together.
    let nodes = [node("a", 1000, 4 * GI, 0, 0), node("b", 1000, 4 * GI, 0, 0)];
    let found = shortfalls(
        &nodes,
        &[
            instance("w", 800, MI),
            instance("w", 800, MI),
            instance("w", 800, MI),
        ],
    );
    assert_eq!(
        found,
        ["the environment needs 2400m CPU in all, and 2 CPU is free across 2 node(s)"]
    );
}

#[test]
fn cordoned_and_not_ready_nodes_are_left_out() {
    let mut cordoned = node("cordoned", 16000, 64 * GI, 0, 0);
    cordoned.schedulable = false;
    let mut down = node("down", 16000, 64 * GI, 0, 0);
    down.ready = false;
    let small = node("small", 1000, GI, 0, 0);
    let found = shortfalls(
        &[cordoned.clone(), down.clone(), small],
        &[instance("web", 2000, MI)],
    );
    assert!(
        found[0].contains("most free on one node is 1 CPU (small)"),
        "{found:?}"
    );
    let none = shortfalls(&[cordoned, down], &[instance("web", 1, 1)]);
    assert_eq!(
        none,
        ["no node can take new pods (2 node(s), all cordoned or not Ready)"]
    );
}

#[test]
fn memory_is_checked_like_cpu_and_each_service_is_named_once() {
    let nodes = [node("a", 8000, 2 * GI, 0, 0)];
    let found = shortfalls(
        &nodes,
        &[instance("db", 100, 3 * GI), instance("db", 100, 3 * GI)],
    );
    assert_eq!(
        found,
        [
            "db needs 3Gi of memory per instance, and the most free on one node is 2Gi of memory (a)",
            "the environment needs 6Gi of memory in all, and 2Gi of memory is free across 1 node(s)"
        ]
    );
}

#[test]
fn both_dimensions_free_but_never_on_one_node() {
    let nodes = [
        node("cpu-rich", 8000, 256 * MI, 0, 0),
        node("memory-rich", 500, 16 * GI, 0, 0),
    ];
    let found = shortfalls(&nodes, &[instance("api", 1000, GI)]);
    assert_eq!(
        found,
        ["api needs 1 CPU and 1Gi of memory on one node, and no node has both free"]
    );
}

#[test]
fn nodes_and_pods_are_read_off_the_api_objects() {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "k3d-0"},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .unwrap();
    let pod = |phase: &str, cpu: &str, init_cpu: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "nodeName": "k3d-0",
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": init_cpu}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": cpu}}}
                ]
            },
            "status": {"phase": phase}
        }))
        .unwrap()
    };
    // Containers add up (2 × 500m); an init container counts when it asks for more (1500m).
    assert_eq!(
        pod_requests(&pod("Running", "500m", "100m")).cpu_millis,
        1000
    );
    assert_eq!(
        pod_requests(&pod("Running", "500m", "1500m")).cpu_millis,
        1500
    );
    let room = node_room(
        &node,
        &[pod("Running", "500m", "100m"), pod("Succeeded", "2", "0")],
    );
    assert!(room.ready && room.schedulable);
    assert_eq!(
        room.allocatable,
        Amount {
            cpu_millis: 4000,
            memory_bytes: 8 * GI
        }
    );
    assert_eq!(
        room.requested,
        Amount {
            cpu_millis: 1000,
            memory_bytes: 128 * MI
        },
        "a finished pod holds nothing"
    );
    let cordoned: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "c"}, "spec": {"unschedulable": true},
        "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "False"}]}
    }))
    .unwrap();
    let room = node_room(&cordoned, &[]);
    assert!(!room.schedulable && !room.ready);
    assert_eq!(room.free(), Amount::default());
}

mod support;

#[test]
fn the_environment_counts_every_replica_and_the_sidecar() {
    let rendered = support::rendered(&support::shop());
    let all = af_kube::fit::instances(&rendered);
    let owners: Vec<&str> = all.iter().map(|i| i.owner.as_str()).collect();
    assert_eq!(owners, ["af-sidecar", "worker", "report", "web", "web"]);
    // web: 250m and 128Mi per instance, as the manifest says.
    let web = all.iter().find(|i| i.owner == "web").unwrap();
    assert_eq!(
        web.requests,
        Amount {
            cpu_millis: 250,
            memory_bytes: 128 * MI
        }
    );
    // report names no size: its pod still requests what its init containers do (the engine's).
    let report = all.iter().find(|i| i.owner == "report").unwrap();
    assert_eq!(
        report.requests,
        Amount {
            cpu_millis: 100,
            memory_bytes: 64 * MI
        }
    );
}
