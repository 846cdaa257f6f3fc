//! The node on the real control plane: Pods the scheduler binds to it run as Docker containers in
//! the Pod's shape, their status is what a kubelet writes, and the API server's exec, logs and
//! port-forward reach them through the node's API; Services route and resolve; a Pod the node
//! will not run fails with the kubelet's reason; a deleted Pod is gone from the API and from the
//! daemon. Every workload is Debian's static BusyBox.

use std::time::Duration;

use af_testcluster::TestCluster;
use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Api;
use kube::api::{AttachParams, DeleteParams, ListParams, LogParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PATIENCE: Duration = Duration::from_secs(120);

struct Fixture {
    client: kube::Client,
    namespace: String,
    image: String,
}

async fn fixture(tag: &str) -> Fixture {
    let cluster = TestCluster::shared();
    let client = cluster.client().await.unwrap();
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let image = af_testcluster::images::busybox(&docker).await.unwrap();
    let namespace = format!("node-{tag}");
    let object: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    // The service account controller makes `default` and the token controller its token, which
    // 1.20's admission mounts into a Pod that does not opt out (and refuses the Pod until then).
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &namespace);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while accounts
        .get_opt("default")
        .await
        .unwrap()
        .is_none_or(|a| a.secrets.unwrap_or_default().is_empty())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no default service account"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Fixture {
        client,
        namespace,
        image,
    }
}

impl Fixture {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn create(&self, pod: serde_json::Value) -> Pod {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap()
    }

    /// Polls `name` until `done` says so; the Pod then. Fails with the Pod as it was at the deadline.
    async fn wait(&self, name: &str, what: &str, done: impl Fn(&Pod) -> bool) -> Pod {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let pod = self.pods().get(name).await.unwrap();
            if done(&pod) {
                return pod;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} never {what}: {:#?}",
                pod.status
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// The Docker containers the node made for `pod`, by the label it puts on each.
async fn containers_of(pod: &Pod) -> Vec<bollard::models::ContainerSummary> {
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_string(),
                vec![format!("dev.antifailure.testnode.pod-uid={uid}")],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn exec(pods: &Api<Pod>, name: &str, command: &[&str]) -> (String, String, String) {
    let mut attached = pods
        .exec(
            name,
            command.to_vec(),
            &AttachParams::default().stdout(true).stderr(true),
        )
        .await
        .unwrap();
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut out = attached.stdout().unwrap();
    let mut err = attached.stderr().unwrap();
    let status = attached.take_status().unwrap();
    let (a, b) = tokio::join!(
        out.read_to_string(&mut stdout),
        err.read_to_string(&mut stderr)
    );
    a.unwrap();
    b.unwrap();
    let status = status.await.unwrap();
    (stdout, stderr, status.status.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_in_its_shape_and_is_reached_through_the_api_servers_exec_logs_and_port_forward()
{
    let f = fixture("shape").await;
    f.create(serde_json::json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "volumes": [{"name": "work", "emptyDir": {}}],
            "initContainers": [{
                "name": "prepare", "image": f.image,
                "command": ["sh", "-c", "echo prepared > /work/mark && mkdir /work/www && echo hello > /work/www/index.html"],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}]
            }],
            "containers": [{
                "name": "web", "image": f.image,
                "command": ["sh", "-c", "cat /work/mark; exec httpd -f -p 8080 -h /work/www"],
                "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": true,
                                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                "volumeMounts": [{"name": "work", "mountPath": "/work"}]
            }]
        }
    }))
    .await;
    let pod = f.wait("web", "became ready", ready).await;
    let status = pod.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let init = &status.init_container_statuses.unwrap()[0];
    let ended = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (0, Some("Completed"))
    );
    assert!(status.pod_ip.is_some_and(|ip| ip.starts_with("10.244.")));
    assert!(
        pod.status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True"),
        "the scheduler bound it"
    );

    let pods = f.pods();
    let log = pods.logs("web", &LogParams::default()).await.unwrap();
    assert_eq!(log, "prepared\n");

    let (stdout, _, status) = exec(&pods, "web", &["sh", "-c", "id -u; cat /work/mark"]).await;
    assert_eq!(
        (stdout.as_str(), status.as_str()),
        ("1000\nprepared\n", "Success")
    );
    let (_, stderr, status) = exec(&pods, "web", &["sh", "-c", "touch /rootfs-file"]).await;
    assert_eq!(status, "Failure", "a read-only root: {stderr}");
    let (stdout, _, _) = exec(&pods, "web", &["sh", "-c", "grep CapEff /proc/self/status"]).await;
    assert!(
        stdout.contains("0000000000000000"),
        "no capability: {stdout}"
    );

    // stdin through v5, closed so the command sees its end.
    let mut attached = pods
        .exec(
            "web",
            vec!["sh", "-c", "wc -c"],
            &AttachParams::default()
                .stdin(true)
                .stdout(true)
                .stderr(false),
        )
        .await
        .unwrap();
    let mut stdin = attached.stdin().unwrap();
    stdin.write_all(b"twelve bytes").await.unwrap();
    stdin.shutdown().await.unwrap();
    let mut counted = String::new();
    attached
        .stdout()
        .unwrap()
        .read_to_string(&mut counted)
        .await
        .unwrap();
    assert_eq!(counted.trim(), "12");

    let mut forward = pods.portforward("web", &[8080]).await.unwrap();
    let mut stream = forward.take_stream(8080).unwrap();
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello\n"), "{answer}");
    forward.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_route_to_ready_pods_and_resolve_by_name_and_the_api_server_is_reached_through_its_service()
 {
    let f = fixture("services").await;
    for name in ["backend-1", "backend-2"] {
        f.create(serde_json::json!({
            "metadata": {"name": name, "labels": {"app": "backend"}},
            "spec": {"containers": [{
                "name": "serve", "image": f.image,
                "command": ["sh", "-c", format!("mkdir -p /tmp/www && echo {name} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www")],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
            }]}
        }))
        .await;
    }
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "backend"},
        "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(f.client.clone(), &f.namespace)
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    f.create(serde_json::json!({
        "metadata": {"name": "client"},
        "spec": {"containers": [{"name": "c", "image": f.image, "command": ["sleep", "3600"]}]}
    }))
    .await;
    for name in ["backend-1", "backend-2", "client"] {
        f.wait(name, "became ready", ready).await;
    }
    let pods = f.pods();
    // Both backends answer behind the one ClusterIP, by its name (the cluster DNS), once the
    // endpoints controller has them.
    let mut seen = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while seen.len() < 2 {
        // BusyBox's nc, not its wget: the static build's wget faults in glibc's resolver.
        let (stdout, stderr, _) = exec(
            &pods,
            "client",
            &[
                "sh",
                "-c",
                "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 backend 80",
            ],
        )
        .await;
        if let Some(body) = stdout
            .lines()
            .last()
            .filter(|_| stdout.starts_with("HTTP/1.1 200"))
        {
            seen.insert(body.trim().to_string());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Service never reached both backends: {seen:?} {stderr}"
        );
    }
    assert_eq!(
        seen,
        ["backend-1".to_string(), "backend-2".to_string()].into()
    );
    let (stdout, _, _) = exec(
        &pods,
        "client",
        &["nslookup", "kubernetes.default.svc.cluster.local"],
    )
    .await;
    assert!(stdout.contains("10.96.0.1"), "{stdout}");
    // The API server answers through its Service (it refuses an anonymous client: that it
    // answers at all is the point).
    let (stdout, stderr, _) = exec(
        &pods,
        "client",
        &[
            "sh",
            "-c",
            "echo | nc -w 3 kubernetes.default.svc 443 >/dev/null && echo reached",
        ],
    )
    .await;
    assert_eq!(stdout.trim(), "reached", "{stderr}");
    let env = exec(&pods, "client", &["env"]).await.0;
    assert!(env.contains("KUBERNETES_SERVICE_HOST=10.96.0.1"), "{env}");
    assert!(
        env.contains("BACKEND_SERVICE_PORT=80"),
        "service links: {env}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_node_refuses_fails_with_the_kubelets_reason_and_nothing_of_it_runs() {
    let f = fixture("refused").await;
    f.create(serde_json::json!({
        "metadata": {"name": "unsafe"},
        "spec": {
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]},
            "containers": [{"name": "c", "image": f.image, "command": ["sleep", "3600"]}]
        }
    }))
    .await;
    let pod = f
        .wait("unsafe", "failed", |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
        })
        .await;
    let status = pod.status.clone().unwrap();
    assert_eq!(status.reason.as_deref(), Some("SysctlForbidden"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod forbidden sysctl: \"kernel.msgmax\" not whitelisted")
    );
    let made = containers_of(&pod).await;
    assert!(
        made.is_empty(),
        "nothing of a refused Pod is made: {made:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_container_backs_off_keeps_its_last_state_and_its_previous_log() {
    let f = fixture("crash").await;
    f.create(serde_json::json!({
        "metadata": {"name": "crash"},
        "spec": {"containers": [{"name": "c", "image": f.image, "command": ["sh", "-c", "echo about to fail; exit 3"]}]}
    }))
    .await;
    let pod = f
        .wait("crash", "crash-looped", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .as_deref()
                == Some("CrashLoopBackOff")
        })
        .await;
    let status = pod.status.unwrap();
    assert_eq!(
        status.phase.as_deref(),
        Some("Running"),
        "a crash-looping pod is still Running"
    );
    let container = &status.container_statuses.unwrap()[0];
    assert!(container.restart_count >= 1);
    let last = container
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
    let previous = f
        .pods()
        .logs(
            "crash",
            &LogParams {
                previous: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(previous, "about to fail\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_is_stopped_removed_from_the_daemon_and_gone_from_the_api() {
    let f = fixture("delete").await;
    let pod = f
        .create(serde_json::json!({
            "metadata": {"name": "doomed"},
            "spec": {"terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "c", "image": f.image, "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}]}
        }))
        .await;
    f.wait("doomed", "became ready", ready).await;
    let mut lines = f
        .pods()
        .log_stream(
            "doomed",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .lines();
    f.pods()
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while f.pods().get_opt("doomed").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Pod was never deleted for good"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A followed log ends with the container.
    while let Some(line) = tokio::time::timeout(PATIENCE, lines.next()).await.unwrap() {
        line.unwrap();
    }
    let left = containers_of(&pod).await;
    assert!(left.is_empty(), "{left:?}");
    let listed = f.pods().list(&ListParams::default()).await.unwrap();
    assert!(listed.items.is_empty());
}
