//! The fit check, before anything is created: does the environment fit in what the cluster has
//! free? Free is each schedulable node's allocatable minus the requests of the pods already on
//! it (the quantity the scheduler itself places against); cordoned and not-Ready nodes are left
//! out, since a node that still reports its allocatable and can hold nothing makes the cluster
//! look larger than it is. Two necessary conditions, neither sufficient: every instance fits on
//! some single node, and the total fits in what is free across all of them. What is refused is
//! only what no packing could place (AF-RUN-047, naming the shortfall); the scheduler stays the
//! authority on the rest.

use k8s_openapi::api::core::v1::{Node, Pod, ResourceRequirements};

/// What one node can still take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRoom {
    pub name: String,
    /// Cordoned (`spec.unschedulable`) nodes take nothing new.
    pub schedulable: bool,
    pub ready: bool,
    pub allocatable: Amount,
    /// The requests of the pods already placed on it (finished pods excluded).
    pub requested: Amount,
}

impl NodeRoom {
    /// What is free on this node for new pods, or nothing when it takes no new pods.
    pub fn free(&self) -> Amount {
        if self.schedulable && self.ready {
            self.allocatable.minus(&self.requested)
        } else {
            Amount::default()
        }
    }
}

/// CPU in millicores and memory in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amount {
    pub cpu_millis: u128,
    pub memory_bytes: u128,
}

impl Amount {
    fn minus(&self, other: &Amount) -> Amount {
        Amount {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
        }
    }

    fn plus(&self, other: &Amount) -> Amount {
        Amount {
            cpu_millis: self.cpu_millis + other.cpu_millis,
            memory_bytes: self.memory_bytes + other.memory_bytes,
        }
    }

    fn fits_in(&self, room: &Amount) -> bool {
        self.cpu_millis <= room.cpu_millis && self.memory_bytes <= room.memory_bytes
    }
}

/// One pod the environment will create, with what it requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// The service (or `sidecar`) it belongs to, for the message.
    pub owner: String,
    pub requests: Amount,
}

fn cpu_text(millis: u128) -> String {
    if millis.is_multiple_of(1000) {
        format!("{} CPU", millis / 1000)
    } else {
        format!("{millis}m CPU")
    }
}

fn memory_text(bytes: u128) -> String {
    const MI: u128 = 1 << 20;
    if bytes.is_multiple_of(1 << 30) && bytes > 0 {
        format!("{}Gi of memory", bytes >> 30)
    } else {
        format!("{}Mi of memory", bytes.div_ceil(MI))
    }
}

/// Every shortfall, in words; empty when the environment can fit.
pub fn shortfalls(nodes: &[NodeRoom], instances: &[Instance]) -> Vec<String> {
    let usable: Vec<(&NodeRoom, Amount)> = nodes
        .iter()
        .map(|node| (node, node.free()))
        .filter(|(node, _)| node.schedulable && node.ready)
        .collect();
    let mut out = Vec::new();
    if usable.is_empty() {
        let left_out = nodes.len();
        out.push(format!(
            "no node can take new pods ({left_out} node(s), all cordoned or not Ready)"
        ));
        return out;
    }
    // The first node among equals, so a message names nodes in the order the cluster lists them.
    let largest_cpu = usable.iter().rev().max_by_key(|(_, free)| free.cpu_millis);
    let largest_memory = usable
        .iter()
        .rev()
        .max_by_key(|(_, free)| free.memory_bytes);
    let mut reported = std::collections::BTreeSet::new();
    for instance in instances {
        let fits_somewhere = usable
            .iter()
            .any(|(_, free)| instance.requests.fits_in(free));
        if fits_somewhere || !reported.insert(instance.owner.clone()) {
            continue;
        }
        let mut why = Vec::new();
        if let Some((node, free)) = largest_cpu
            && instance.requests.cpu_millis > free.cpu_millis
        {
            why.push(format!(
                "{} per instance, and the most free on one node is {} ({})",
                cpu_text(instance.requests.cpu_millis),
                cpu_text(free.cpu_millis),
                node.name
            ));
        }
        if let Some((node, free)) = largest_memory
            && instance.requests.memory_bytes > free.memory_bytes
        {
            why.push(format!(
                "{} per instance, and the most free on one node is {} ({})",
                memory_text(instance.requests.memory_bytes),
                memory_text(free.memory_bytes),
                node.name
            ));
        }
        if why.is_empty() {
            // Each dimension fits somewhere, but never both on the same node.
            why.push(format!(
                "{} and {} on one node, and no node has both free",
                cpu_text(instance.requests.cpu_millis),
                memory_text(instance.requests.memory_bytes)
            ));
        }
        out.push(format!("{} needs {}", instance.owner, why.join("; ")));
    }
    let total = instances
        .iter()
        .fold(Amount::default(), |sum, i| sum.plus(&i.requests));
    let free = usable
        .iter()
        .fold(Amount::default(), |sum, (_, free)| sum.plus(free));
    if total.cpu_millis > free.cpu_millis {
        out.push(format!(
            "the environment needs {} in all, and {} is free across {} node(s)",
            cpu_text(total.cpu_millis),
            cpu_text(free.cpu_millis),
            usable.len()
        ));
    }
    if total.memory_bytes > free.memory_bytes {
        out.push(format!(
            "the environment needs {} in all, and {} is free across {} node(s)",
            memory_text(total.memory_bytes),
            memory_text(free.memory_bytes),
            usable.len()
        ));
    }
    out
}

fn quantity(text: &str, cpu: bool) -> u128 {
    match af_manifest::parse_quantity(text) {
        Ok(q) if cpu => q.milli_value(),
        Ok(q) => q.value_rounded_up(),
        Err(_) => 0,
    }
}

fn amount_of(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Amount {
    let get = |key: &str, cpu: bool| {
        map.and_then(|m| m.get(key))
            .map_or(0, |q| quantity(&q.0, cpu))
    };
    Amount {
        cpu_millis: get("cpu", true),
        memory_bytes: get("memory", false),
    }
}

fn requests_of(resources: Option<&ResourceRequirements>) -> Amount {
    amount_of(resources.and_then(|r| r.requests.as_ref()))
}

/// What a pod requests, as the scheduler counts it: the sum of its containers, or its largest
/// init container when that is more.
pub fn pod_requests(pod: &Pod) -> Amount {
    let Some(spec) = &pod.spec else {
        return Amount::default();
    };
    let containers = spec.containers.iter().fold(Amount::default(), |sum, c| {
        sum.plus(&requests_of(c.resources.as_ref()))
    });
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .fold(Amount::default(), |max, c| {
            let r = requests_of(c.resources.as_ref());
            Amount {
                cpu_millis: max.cpu_millis.max(r.cpu_millis),
                memory_bytes: max.memory_bytes.max(r.memory_bytes),
            }
        });
    Amount {
        cpu_millis: containers.cpu_millis.max(init.cpu_millis),
        memory_bytes: containers.memory_bytes.max(init.memory_bytes),
    }
}

/// The pods that are not the environment's own: those outside its `namespace`. Its own (the
/// services', the sidecar's, a leftover probe's) are what an `up` replaces or keeps, so counting
/// them as used would refuse a second `up` on a full cluster for room it already has.
pub fn others_pods(pods: Vec<Pod>, namespace: &str) -> Vec<Pod> {
    pods.into_iter()
        .filter(|pod| pod.metadata.namespace.as_deref() != Some(namespace))
        .collect()
}

/// A node's room from the Node object and the pods the cluster has placed on it.
pub fn node_room(node: &Node, pods: &[Pod]) -> NodeRoom {
    let name = node.metadata.name.clone().unwrap_or_default();
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
    let requested = pods
        .iter()
        .filter(|pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
        .filter(|pod| {
            !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .fold(Amount::default(), |sum, pod| sum.plus(&pod_requests(pod)));
    NodeRoom {
        schedulable: !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        ready,
        allocatable: amount_of(status.and_then(|s| s.allocatable.as_ref())),
        requested,
        name,
    }
}

/// The pods an environment keeps running, with what each requests: every replica of every
/// Deployment (the services' and the sidecar's). Migrations and the probe run to completion first
/// and hold nothing afterwards.
pub fn instances(rendered: &crate::render::Rendered) -> Vec<Instance> {
    std::iter::once(&rendered.sidecar)
        .chain(&rendered.deployments)
        .flat_map(|deployment| {
            let spec = deployment.spec.clone().unwrap_or_default();
            let pod = Pod {
                spec: spec.template.spec,
                ..Default::default()
            };
            let requests = pod_requests(&pod);
            let owner = deployment.metadata.name.clone().unwrap_or_default();
            (0..spec.replicas.unwrap_or(1).max(0)).map(move |_| Instance {
                owner: owner.clone(),
                requests,
            })
        })
        .collect()
}

/// The size a running pod's service container was given, as the cluster reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub cpu_millis: Option<u128>,
    pub memory_bytes: Option<u128>,
}

/// The limits of `pod`'s first container (the service's own), each only when set.
pub fn pod_limits(pod: &Pod) -> Applied {
    let limits = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.limits.as_ref());
    let get = |key: &str, cpu: bool| limits.and_then(|l| l.get(key)).map(|q| quantity(&q.0, cpu));
    Applied {
        cpu_millis: get("cpu", true),
        memory_bytes: get("memory", false),
    }
}
