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
