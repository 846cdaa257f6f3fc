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
/// test too), all of it is removed.
struct Tier {
    cluster: Option<TestCluster>,
    outside: Option<Outside>,
    /// The engine image, which the outside's hosts and every pod's holder run.
    image: String,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

impl Tier {
    fn start(tag: &str, adjust: impl FnOnce(&mut Options)) -> Tier {
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

    let down = tier.af(&manifest, &["down", "--env", "main"]);
    assert!(down.status.success(), "{}", text(&down));
    runtime().block_on(async {
        let namespaces: Api<Namespace> = Api::all(tier.client().await);
        let listed = namespaces.list(&ListParams::default()).await.unwrap();
        assert!(
            !listed.items.iter().any(|n| n
                .metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with("af-shop")),
            "af down returns once the namespace is gone"
        );
        let pods: Api<Pod> = Api::all(tier.client().await);
        let _ = pods.list(&ListParams::default()).await.unwrap();
        let _ = PostParams::default();
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
