//! `af` on a real Kubernetes control plane (1.20, built from Debian's source) and the tests' own
//! node (crates/af-testcluster), as a person runs it: `af up`, `status`, `net log`, `inbox`,
//! `webhook trigger` and `down` against the shop of examples/shop/kubernetes. The node enforces no
//! NetworkPolicy — the cluster of seed 000 whose policy is decorative — so what holds the shop in
//! is `runtime.netlock`, and without it the probe must refuse the cluster (AF-RUN-043). The
//! outside is the conformance suite's: hosts on Docker networks of the test's own, attached to
//! every pod as a cluster's nodes route to the internet; nothing leaves the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use af_conformance::outside::Outside;
use af_testcluster::TestCluster;
use af_testcluster::cluster::Options;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};

/// A control plane, its node, and the outside the node's pods are attached to. Dropped (a failed
/// test too), all of it is removed. One at a time: the outside's hosts have fixed addresses.
struct Tier {
    cluster: Option<TestCluster>,
    outside: Option<Outside>,
    /// The engine image, which the outside's hosts and every pod's holder run.
    image: String,
    _turn: std::sync::MutexGuard<'static, ()>,
}

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

impl Tier {
    fn start(tag: &str, adjust: impl FnOnce(&mut Options)) -> Tier {
        // A test that failed held it too: the outside it made is gone with it.
        let turn = TURN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tag = format!("k{tag}{}", std::process::id() % 10_000);
        let (outside, image) = runtime().block_on(async {
            let docker = af_docker::connect().await.unwrap();
            let image = af_docker::engine_image::ensure(&docker).await.unwrap();
            (Outside::create(&docker, &image, &tag).await.unwrap(), image)
        });
        let mut options = Options {
            uplinks: outside.hosts().map(|h| h.network.clone()).collect(),
            dns_records: BTreeMap::from([(
                af_conformance::harness::ORIGIN_NAME.to_string(),
                outside.origin.ip.parse().unwrap(),
            )]),
            ..Options::default()
        };
        adjust(&mut options);
        let mut tier = Tier {
            cluster: None,
            outside: Some(outside),
            image,
            _turn: turn,
        };
        tier.cluster = Some(TestCluster::start(options).unwrap());
        tier
    }

    fn cluster(&self) -> &TestCluster {
        self.cluster.as_ref().unwrap()
    }

    fn outside(&self) -> &Outside {
        self.outside.as_ref().unwrap()
    }

    /// `af ARGS` on `manifest`, with this cluster's kubeconfig, the 1.20 override and the probe
    /// aimed at the outside's hosts.
    fn af(&self, manifest: &Path, args: &[&str]) -> Output {
        let a = &self.outside().addresses;
        Command::new(env!("CARGO_BIN_EXE_af"))
            .arg("--manifest")
            .arg(manifest)
            .args(args)
            .env("KUBECONFIG", &self.cluster().kubeconfig)
            .env("AF_KUBERNETES_ALLOW_VERSION", "1.20")
            .env("AF_PROBE_PUBLIC_TCP", format!("{}:3128", a.public))
            .env("AF_PROBE_PUBLIC_DNS", format!("{}:53", a.public))
            .env("AF_PROBE_METADATA", format!("{}:3128", a.metadata))
            .env("AF_PROBE_METADATA_V6", format!("[{}]:3128", a.metadata_v6))
            .env("SHOP_PAYMENTS_TEST_KEY", "sk_test_twin")
            .env("SHOP_DB_PASSWORD", "twin-db")
            .env(
                "SHOP_DATABASE_URL",
                "postgres://postgres:twin-db@db:5432/shop",
            )
            .env("AF_PROXY_IMAGE", &self.image)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    async fn client(&self) -> kube::Client {
        self.cluster().client().await.unwrap()
    }
}

impl Drop for Tier {
    fn drop(&mut self) {
        drop(self.cluster.take());
        if let Some(outside) = self.outside.take() {
            runtime().block_on(outside.remove());
        }
    }
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// examples/shop/kubernetes/af.yaml, copied into a folder of the test's own with `edit` applied
/// (the build contexts are given as absolute paths, so the copy builds the same images).
fn shop(tag: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop");
    let original = std::fs::read_to_string(examples.join("kubernetes/af.yaml")).unwrap();
    let absolute = original
        .replace(
            "build: ../db",
            &format!("build: {}", examples.join("db").display()),
        )
        .replace(
            "build: ../image",
            &format!("build: {}", examples.join("image").display()),
        );
    let dir = std::env::temp_dir().join(format!("af-k8s-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("af.yaml");
    std::fs::write(&manifest, edit(absolute)).unwrap();
    manifest
}

#[test]
fn the_shop_with_netlock_comes_up_contained_on_a_real_control_plane_and_works_through_it() {
    let tier = Tier::start("shop", |_| {});
    let manifest = shop("shop", |m| m);
    let up = tier.af(&manifest, &["--json", "up", "--env", "main"]);
    assert!(up.status.success(), "{}", text(&up));
    let events = json_lines(&up);
    let warned = events
        .iter()
        .any(|e| e.to_string().contains("AF_KUBERNETES_ALLOW_VERSION=1.20"));
    assert!(
        warned,
        "the version override is never silent: {}",
        text(&up)
    );
    // The migration after the services it depends on are ready, web after its migration.
    let at = |event: &str, detail: &str| {
        events
            .iter()
            .position(|e| {
                e["event"] == event && e["detail"].as_str().is_some_and(|d| d.contains(detail))
            })
            .unwrap_or_else(|| panic!("no {event} {detail}: {}", text(&up)))
    };
    assert!(at("step_finished", "every replica of worker") < at("step_started", "af-migrate-web"));
    assert!(
        at("step_finished", "af-migrate-web") < at("step_started", "every replica of report, web")
    );

    let status = tier.af(&manifest, &["--json", "status", "--env", "main"]);
    assert!(status.status.success(), "{}", text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for service in status["services"].as_array().unwrap() {
        assert_eq!(service["ready"], service["wanted"], "{status}");
    }

    let order = tier.af(
        &manifest,
        &[
            "--json",
            "webhook",
            "trigger",
            "web",
            "/orders",
            "--body",
            "item=green+tea&email=ada@shop.example",
            "--header",
            "Content-Type: application/x-www-form-urlencoded",
            "--env",
            "main",
        ],
    );
    assert!(order.status.success(), "{}", text(&order));
    let inbox = tier.af(&manifest, &["--json", "inbox", "--env", "main"]);
    assert!(inbox.status.success(), "{}", text(&inbox));
    let inbox = String::from_utf8_lossy(&inbox.stdout).into_owned();
    assert!(inbox.contains("api.payments.example"), "{inbox}");
    assert!(inbox.contains("ada@shop.example"), "{inbox}");

    let log = tier.af(&manifest, &["--json", "net", "log", "--env", "main"]);
    assert!(log.status.success(), "{}", text(&log));
    let decisions = json_lines(&log);
    assert!(
        decisions
            .iter()
            .any(|d| d["host"] == "api.payments.example" && d["verdict"] == "capture"),
        "the payment decided and recorded: {}",
        text(&log)
    );

    let down = tier.af(&manifest, &["down", "--env", "main"]);
    assert!(down.status.success(), "{}", text(&down));
    runtime().block_on(async {
        assert!(
            !namespaces(&tier.client().await)
                .await
                .contains(&"af-shop-main".to_string()),
            "af down returns once the namespace is gone"
        );
    });
}

/// What `af up` applied in `namespace`, by the generation of what has one (its status moves its
/// resource version) and the resource version of the rest (not the probe's own pod, which each
/// `up` runs again, nor the namespace, which keeps its verdict).
async fn applied_versions(client: &kube::Client, namespace: &str) -> BTreeMap<String, String> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    async fn of<K>(client: &kube::Client, namespace: &str, out: &mut BTreeMap<String, String>)
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let listed = Api::<K>::namespaced(client.clone(), namespace)
            .list(&ListParams::default().labels("dev.antifailure.managed=true"))
            .await
            .unwrap();
        for object in listed.items {
            let meta = object.meta();
            let version = match meta.generation {
                Some(generation) => format!("generation {generation}"),
                None => meta.resource_version.clone().unwrap_or_default(),
            };
            out.insert(
                format!("{}/{}", K::kind(&()), meta.name.clone().unwrap_or_default()),
                version,
            );
        }
    }
    let mut out = BTreeMap::new();
    of::<Deployment>(client, namespace, &mut out).await;
    of::<Job>(client, namespace, &mut out).await;
    of::<Service>(client, namespace, &mut out).await;
    of::<Secret>(client, namespace, &mut out).await;
    of::<ConfigMap>(client, namespace, &mut out).await;
    of::<NetworkPolicy>(client, namespace, &mut out).await;
    out
}

#[test]
fn a_second_up_writes_nothing_and_a_changed_migration_replaces_its_finished_job() {
    use k8s_openapi::api::batch::v1::Job;
    let tier = Tier::start("again", |_| {});
    let manifest = shop("again", |m| m);
    let up = tier.af(&manifest, &["up", "--env", "main"]);
    assert!(up.status.success(), "{}", text(&up));
    let namespace = "af-shop-main";
    let before =
        runtime().block_on(async { applied_versions(&tier.client().await, namespace).await });
    assert!(before.contains_key("Job/af-migrate-web"), "{before:?}");

    let again = tier.af(&manifest, &["up", "--env", "main"]);
    assert!(again.status.success(), "{}", text(&again));
    let after =
        runtime().block_on(async { applied_versions(&tier.client().await, namespace).await });
    assert_eq!(before, after, "an unchanged up writes nothing");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("nothing changed"),
        "{}",
        text(&again)
    );

    // A real API server refuses any change to a Job's pod template (`field is immutable`): the
    // finished migration Job is replaced, never patched.
    let first_uid = runtime().block_on(async {
        Api::<Job>::namespaced(tier.client().await, namespace)
            .get("af-migrate-web")
            .await
            .unwrap()
            .metadata
            .uid
    });
    std::fs::write(
        &manifest,
        std::fs::read_to_string(&manifest).unwrap().replace(
            r#"migrate: ["/shop", "migrate"]"#,
            r#"migrate: ["/shop", "migrate", "--second"]"#,
        ),
    )
    .unwrap();
    let changed = tier.af(&manifest, &["up", "--env", "main"]);
    assert!(changed.status.success(), "{}", text(&changed));
    runtime().block_on(async {
        let job = Api::<Job>::namespaced(tier.client().await, namespace)
            .get("af-migrate-web")
            .await
            .unwrap();
        assert_ne!(job.metadata.uid, first_uid, "a new Job");
        let command = job.spec.unwrap().template.spec.unwrap().containers[0]
            .command
            .clone()
            .unwrap();
        assert_eq!(command, ["/shop", "migrate", "--second"]);
        assert!(job.status.unwrap().succeeded.unwrap_or(0) > 0, "and it ran");
    });
    let down = tier.af(&manifest, &["down", "--env", "main"]);
    assert!(down.status.success(), "{}", text(&down));
}

/// The namespaces of the cluster, by name.
async fn namespaces(client: &kube::Client) -> Vec<String> {
    Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect()
}

#[test]
fn without_netlock_this_node_is_the_decorative_cluster_and_no_service_image_runs() {
    let tier = Tier::start("open", |_| {});
    let manifest = shop("open", |m| m.replace("netlock: true", "netlock: false"));
    let up = tier.af(&manifest, &["up", "--env", "main"]);
    assert_eq!(up.status.code(), Some(43), "{}", text(&up));
    let said = String::from_utf8_lossy(&up.stderr).into_owned();
    // Every route that got out is named: nothing on this node enforces a NetworkPolicy.
    for route in ["public-tcp", "public-dns", "metadata", "platform-api"] {
        assert!(said.contains(route), "{route}: {said}");
    }
    assert!(said.contains("AF-RUN-043"), "{said}");
    runtime().block_on(async {
        let client = tier.client().await;
        let pods = Api::<Pod>::namespaced(client.clone(), "af-shop-main")
            .list(&ListParams::default())
            .await
            .unwrap();
        let images: Vec<String> = pods
            .items
            .iter()
            .flat_map(|p| p.spec.clone().unwrap_or_default().containers)
            .filter_map(|c| c.image)
            .collect();
        assert!(
            images.iter().all(|i| i == &tier.image),
            "only the engine image ran (sidecar, probe): {images:?}"
        );
        // The namespace and its policies were made before the probe: af down removes them.
        assert!(
            namespaces(&client)
                .await
                .contains(&"af-shop-main".to_string())
        );
    });
    let down = tier.af(&manifest, &["down", "--env", "main"]);
    assert!(down.status.success(), "{}", text(&down));

    // Somebody else's namespace of the environment's name is refused at up and at down.
    runtime().block_on(async {
        let foreign: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "af-shop-theirs"}}))
                .unwrap();
        Api::<Namespace>::all(tier.client().await)
            .create(&PostParams::default(), &foreign)
            .await
            .unwrap();
    });
    let up = tier.af(&manifest, &["up", "--env", "theirs"]);
    assert_eq!(up.status.code(), Some(45), "{}", text(&up));
    let down = tier.af(&manifest, &["down", "--env", "theirs"]);
    assert_eq!(down.status.code(), Some(45), "{}", text(&down));
    runtime().block_on(async {
        let namespace = Api::<Namespace>::all(tier.client().await)
            .get("af-shop-theirs")
            .await
            .unwrap();
        assert!(
            namespace.metadata.deletion_timestamp.is_none(),
            "left as it was"
        );
    });
}

#[test]
fn the_fit_check_counts_the_nodes_allocatable_and_the_pods_on_it_but_not_the_environments_own() {
    // 5 CPUs; the shop asks 2 × 1.5 for web and a little for each other pod: it fits once, not
    // twice, and not beside a pod that holds 2.
    let tier = Tier::start("fit", |options| options.cpu_millis = 5000);
    let manifest = shop("fit", |m| m.replace("cpu: 250m", "cpu: 1500m"));
    let filler = |name: &str, cpu: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"automountServiceAccountToken": false, "containers": [{
                "name": "hold", "image": tier.image, "args": ["hold"],
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
            }]}
        }))
        .unwrap()
    };
    runtime().block_on(async {
        Api::<Pod>::namespaced(tier.client().await, "default")
            .create(&PostParams::default(), &filler("holds-two", "2"))
            .await
            .unwrap();
    });
    let up = tier.af(&manifest, &["up", "--env", "main"]);
    assert_eq!(up.status.code(), Some(47), "{}", text(&up));
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("CPU"),
        "the shortfall is named: {}",
        text(&up)
    );
    runtime().block_on(async {
        let client = tier.client().await;
        assert!(
            !namespaces(&client)
                .await
                .contains(&"af-shop-main".to_string()),
            "nothing was created"
        );
        let pods: Api<Pod> = Api::namespaced(client, "default");
        pods.delete("holds-two", &kube::api::DeleteParams::default())
            .await
            .unwrap();
        while pods.get_opt("holds-two").await.unwrap().is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    });
    let up = tier.af(&manifest, &["up", "--env", "main"]);
    assert!(up.status.success(), "{}", text(&up));
    let again = tier.af(&manifest, &["up", "--env", "main"]);
    assert!(
        again.status.success(),
        "the environment's own pods are not counted against it: {}",
        text(&again)
    );
    let other = tier.af(&manifest, &["up", "--env", "other"]);
    assert_eq!(
        other.status.code(),
        Some(47),
        "a second environment does not fit beside the first: {}",
        text(&other)
    );
    let down = tier.af(&manifest, &["down", "--env", "main"]);
    assert!(down.status.success(), "{}", text(&down));
}

#[test]
fn a_pod_the_node_refuses_stops_up_at_once_with_the_kubelets_reason() {
    // A node that allows the sysctls a 1.20 kubelet allows, and not the sidecar's
    // net.ipv4.ip_unprivileged_port_start (safe from 1.22).
    let tier = Tier::start("old", |options| {
        options.safe_sysctls = af_testcluster::node::pods::admit::SAFE_SYSCTLS_1_20
            .iter()
            .map(|s| s.to_string())
            .collect();
    });
    let manifest = shop("old", |m| m);
    let up = tier.af(&manifest, &["up", "--env", "main"]);
    // AF-RUN-058 at the refusal, not AF-RUN-063 once the readiness patience (300 s) ran out.
    assert_eq!(up.status.code(), Some(58), "{}", text(&up));
    let said = String::from_utf8_lossy(&up.stderr).into_owned();
    assert!(said.contains("SysctlForbidden"), "{said}");
    assert!(
        said.contains("net.ipv4.ip_unprivileged_port_start"),
        "{said}"
    );
    let down = tier.af(&manifest, &["down", "--env", "main"]);
    assert!(down.status.success(), "{}", text(&down));
}
