//! A Pod's containers as Docker creates them (pure). The holder owns the Pod's network, IPC and
//! UTS namespaces and its sysctls; every container of the Pod joins them (`container:<holder>`),
//! as a pause container's pod does. What the Pod's `securityContext` and each container's say is
//! mapped to what Docker honours: the user and group (the container's over the Pod's), the
//! supplemental groups and `fsGroup`, dropped and added capabilities, a read-only root,
//! `no-new-privileges` for `allowPrivilegeEscalation: false`, the runtime's default seccomp
//! profile for `RuntimeDefault` and none otherwise (Kubernetes' default is `Unconfined`), and the
//! limits (CPU as a quota, memory as a hard limit; CPU requests as shares).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use k8s_openapi::api::core::v1::{Container, Pod, PodSecurityContext, SecurityContext};

use crate::node::quantity;

/// The label keys of what the node makes (beside [`crate::CLUSTER_LABEL`]).
pub mod labels {
    pub const NODE: &str = "dev.antifailure.testnode.node";
    pub const POD_UID: &str = "dev.antifailure.testnode.pod-uid";
    /// `namespace/name`.
    pub const POD: &str = "dev.antifailure.testnode.pod";
    pub const CONTAINER: &str = "dev.antifailure.testnode.container";
    /// `holder`, `init` or `app`.
    pub const KIND: &str = "dev.antifailure.testnode.kind";
    /// The instance: 0 for the first run, one more for each restart.
    pub const INSTANCE: &str = "dev.antifailure.testnode.instance";
}

/// Which part of the Pod a container is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Holder,
    Init,
    App,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Holder => "holder",
            Kind::Init => "init",
            Kind::App => "app",
        }
    }
}

/// What every container of one Pod shares.
#[derive(Clone, Debug)]
pub struct PodContext {
    pub cluster_id: String,
    pub node: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl PodContext {
    pub fn of(pod: &Pod, cluster_id: &str, node: &str) -> PodContext {
        PodContext {
            cluster_id: cluster_id.to_string(),
            node: node.to_string(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        }
    }

    /// The holder's Docker name.
    pub fn holder(&self) -> String {
        format!("afn-{}-{}-holder", self.cluster_id, short(&self.uid))
    }

    /// The Docker name of `container`'s instance `instance`.
    pub fn container_name(&self, container: &str, instance: u32) -> String {
        format!(
            "afn-{}-{}-{container}-{instance}",
            self.cluster_id,
            short(&self.uid)
        )
    }

    pub fn labels(&self, kind: Kind, container: &str, instance: u32) -> HashMap<String, String> {
        HashMap::from([
            (crate::CLUSTER_LABEL.to_string(), self.cluster_id.clone()),
            (labels::NODE.to_string(), self.node.clone()),
            (labels::POD_UID.to_string(), self.uid.clone()),
            (
                labels::POD.to_string(),
                format!("{}/{}", self.namespace, self.name),
            ),
            (labels::CONTAINER.to_string(), container.to_string()),
            (labels::KIND.to_string(), kind.as_str().to_string()),
            (labels::INSTANCE.to_string(), instance.to_string()),
        ])
    }
}

/// The first 12 characters of a uid: enough to tell the Pods of one node apart.
fn short(uid: &str) -> &str {
    &uid[..uid.len().min(12)]
}

/// Where a volume's content is on the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A folder, bound in; `read_only` for the kinds the kubelet mounts read-only (secret,
    /// configMap, projected, downwardAPI).
    Folder { path: PathBuf, read_only: bool },
    /// A Docker volume (an emptyDir in memory: a tmpfs every container of the Pod shares).
    Volume(String),
}

/// The Pod's `/etc/resolv.conf`, `/etc/hosts` and `/etc/hostname`, bound into every container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFiles {
    pub resolv_conf: PathBuf,
    pub hosts: PathBuf,
    pub hostname: PathBuf,
}

/// The Pod's host name: `spec.hostname`, or its name, cut to a DNS label.
pub fn hostname(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    name.chars().take(63).collect()
}

/// `/etc/resolv.conf` by the Pod's `dnsPolicy`: `ClusterFirst` (the default) the cluster's
/// resolver with the namespace's search path and `ndots:5`; `None` what `dnsConfig` says and
/// nothing else; `Default` the node's own resolution, which on this node is none (it reaches
/// nothing outside the machine). `dnsConfig` is added to the first and the last.
pub fn resolv_conf(pod: &Pod, cluster_dns: std::net::IpAddr, domain: &str) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let (mut servers, mut searches, mut options): (Vec<String>, Vec<String>, Vec<String>) =
        match policy {
            "None" | "Default" => (Vec::new(), Vec::new(), Vec::new()),
            _ => (
                vec![cluster_dns.to_string()],
                vec![
                    format!("{namespace}.svc.{domain}"),
                    format!("svc.{domain}"),
                    domain.to_string(),
                ],
                vec!["ndots:5".to_string()],
            ),
        };
    if let Some(config) = &spec.dns_config {
        servers.extend(config.nameservers.clone().unwrap_or_default());
        searches.extend(config.searches.clone().unwrap_or_default());
        for option in config.options.iter().flatten() {
            let name = option.name.clone().unwrap_or_default();
            options.retain(|o| o.split(':').next() != Some(name.as_str()));
            options.push(match &option.value {
                Some(value) => format!("{name}:{value}"),
                None => name,
            });
        }
    }
    let mut text = String::new();
    for server in servers {
        text.push_str(&format!("nameserver {server}\n"));
    }
    if !searches.is_empty() {
        text.push_str(&format!("search {}\n", searches.join(" ")));
    }
    if !options.is_empty() {
        text.push_str(&format!("options {}\n", options.join(" ")));
    }
    text
}

/// `/etc/hosts`, as the kubelet writes it: loopback, the Pod's address under its host name, and
/// its `hostAliases`.
pub fn hosts(pod: &Pod, ip: &str) -> String {
    let mut text = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    );
    text.push_str(&format!("{ip}\t{}\n", hostname(pod)));
    for alias in pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.clone())
        .unwrap_or_default()
    {
        text.push_str(&format!(
            "{}\t{}\n",
            alias.ip,
            alias.hostnames.unwrap_or_default().join("\t")
        ));
    }
    text
}

/// The holder of `pod`: the node's pause program, on the Pod network, with the Pod's sysctls and
/// host name; nothing added, nothing it could use.
pub fn holder(
    pod: &Pod,
    context: &PodContext,
    (image, command): (&str, &[String]),
    network: &str,
    nameservers: Vec<String>,
) -> ContainerCreateBody {
    let sysctls: HashMap<String, String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s.name, s.value))
        .collect();
    ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(command.to_vec()),
        hostname: Some(hostname(pod)),
        labels: Some(context.labels(Kind::Holder, "", 0)),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_string()),
            // Docker's own resolver in the namespace (127.0.0.11) forwards only to the Pod's
            // resolvers: it is not a way around them.
            dns: Some(nameservers),
            ipc_mode: Some("shareable".to_string()),
            sysctls: (!sysctls.is_empty()).then_some(sysctls),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".to_string()]),
            security_opt: Some(vec!["no-new-privileges".to_string()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The mounts of `container`: each `volumeMount` onto its volume's backing (a `subPath` inside
/// it), then the Pod's files.
pub fn mounts(
    container: &Container,
    volumes: &BTreeMap<String, Backing>,
    files: &PodFiles,
) -> Result<Vec<Mount>, String> {
    let mut out = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let backing = volumes.get(&mount.name).ok_or_else(|| {
            format!(
                "volumeMount {:?} names no volume of the Pod (container {})",
                mount.name, container.name
            )
        })?;
        let sub = mount.sub_path.clone().filter(|s| !s.is_empty());
        if sub
            .as_deref()
            .is_some_and(|s| s.split('/').any(|p| p == ".."))
        {
            return Err(format!(
                "subPath {:?} of volumeMount {:?} leaves its volume",
                sub.unwrap_or_default(),
                mount.name
            ));
        }
        out.push(match backing {
            Backing::Folder { path, read_only } => Mount {
                target: Some(mount.mount_path.clone()),
                source: Some(
                    sub.map_or(path.clone(), |s| path.join(s))
                        .to_string_lossy()
                        .into_owned(),
                ),
                typ: Some(MountType::BIND),
                read_only: Some(*read_only || mount.read_only == Some(true)),
                ..Default::default()
            },
            Backing::Volume(name) => {
                if sub.is_some() {
                    return Err(format!(
                        "subPath on volumeMount {:?}: this node mounts an emptyDir in memory whole",
                        mount.name
                    ));
                }
                Mount {
                    target: Some(mount.mount_path.clone()),
                    source: Some(name.clone()),
                    typ: Some(MountType::VOLUME),
                    read_only: Some(mount.read_only == Some(true)),
                    ..Default::default()
                }
            }
        });
    }
    for (source, target) in [
        (&files.resolv_conf, "/etc/resolv.conf"),
        (&files.hosts, "/etc/hosts"),
        (&files.hostname, "/etc/hostname"),
    ] {
        if out.iter().any(|m| m.target.as_deref() == Some(target)) {
            continue;
        }
        out.push(Mount {
            target: Some(target.to_string()),
            source: Some(source.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(false),
            ..Default::default()
        });
    }
    Ok(out)
}

/// The user a container runs as: the container's `runAsUser`/`runAsGroup` over the Pod's, the
/// image's user where neither says.
fn user(
    container: Option<&SecurityContext>,
    pod: Option<&PodSecurityContext>,
    image_user: &str,
) -> Option<String> {
    let uid = container
        .and_then(|c| c.run_as_user)
        .or_else(|| pod.and_then(|p| p.run_as_user));
    let gid = container
        .and_then(|c| c.run_as_group)
        .or_else(|| pod.and_then(|p| p.run_as_group));
    let image_uid = image_user.split(':').next().filter(|u| !u.is_empty());
    match (uid, gid) {
        (Some(uid), Some(gid)) => Some(format!("{uid}:{gid}")),
        (Some(uid), None) => Some(uid.to_string()),
        (None, Some(gid)) => Some(format!("{}:{gid}", image_uid.unwrap_or("0"))),
        (None, None) => None,
    }
}

/// The kubelet's `runAsNonRoot` check, against the user the container would run as.
fn check_non_root(
    container: &Container,
    pod_security: Option<&PodSecurityContext>,
    pod_name: &str,
    image_user: &str,
) -> Result<(), String> {
    let security = container.security_context.as_ref();
    let required = security
        .and_then(|s| s.run_as_non_root)
        .or_else(|| pod_security.and_then(|p| p.run_as_non_root))
        == Some(true);
    if !required {
        return Ok(());
    }
    let uid = security
        .and_then(|s| s.run_as_user)
        .or_else(|| pod_security.and_then(|p| p.run_as_user));
    let whose = format!("(pod: {pod_name:?}, container: {})", container.name);
    match uid {
        Some(0) => Err(format!(
            "container's runAsUser breaks non-root policy {whose}"
        )),
        Some(_) => Ok(()),
        None => {
            let image_uid = image_user.split(':').next().unwrap_or_default();
            match image_uid.parse::<i64>() {
                Ok(0) => Err(format!(
                    "container has runAsNonRoot and image will run as root {whose}"
                )),
                Ok(_) => Ok(()),
                Err(_) if image_uid.is_empty() => Err(format!(
                    "container has runAsNonRoot and image will run as root {whose}"
                )),
                Err(_) => Err(format!(
                    "container has runAsNonRoot and image has non-numeric user ({image_uid}), cannot verify user is non-root {whose}"
                )),
            }
        }
    }
}

/// A container's limits and CPU shares, as the kubelet gives them to the runtime (a CPU request
/// defaults to its limit, as the API server fills it in).
fn resources(container: &Container, host: &mut HostConfig) {
    let Some(resources) = container.resources.as_ref() else {
        return;
    };
    let limit = |name: &str| resources.limits.as_ref().and_then(|l| l.get(name));
    let request = |name: &str| resources.requests.as_ref().and_then(|r| r.get(name));
    if let Some(millis) = limit("cpu").and_then(|q| quantity::cpu_millis(&q.0)) {
        host.nano_cpus = Some(i64::try_from(millis).unwrap_or(i64::MAX) * 1_000_000);
    }
    if let Some(bytes) = limit("memory").and_then(|q| quantity::bytes(&q.0)) {
        host.memory = Some(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
    if let Some(millis) = request("cpu")
        .or(limit("cpu"))
        .and_then(|q| quantity::cpu_millis(&q.0))
    {
        host.cpu_shares = Some((i64::try_from(millis).unwrap_or(i64::MAX) * 1024 / 1000).max(2));
    }
}

/// Everything a container's creation needs that is not in the Pod.
#[derive(Debug)]
pub struct ContainerInputs<'a> {
    pub kind: Kind,
    pub instance: u32,
    /// `NAME=value`, in order.
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    /// The image's configured user (`Config.User`).
    pub image_user: &'a str,
}

/// `container` of `pod` as Docker creates it, or why the kubelet would not
/// (`CreateContainerConfigError`'s message).
pub fn container(
    pod: &Pod,
    context: &PodContext,
    container: &Container,
    inputs: ContainerInputs<'_>,
) -> Result<ContainerCreateBody, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_security = spec.security_context.as_ref();
    check_non_root(container, pod_security, &context.name, inputs.image_user)?;
    let security = container.security_context.as_ref();
    let holder = format!("container:{}", context.holder());
    let mut security_opt = Vec::new();
    if security.and_then(|s| s.allow_privilege_escalation) == Some(false) {
        security_opt.push("no-new-privileges".to_string());
    }
    let seccomp = security
        .and_then(|s| s.seccomp_profile.as_ref())
        .or_else(|| pod_security.and_then(|p| p.seccomp_profile.as_ref()));
    if seccomp.is_none_or(|p| p.type_ == "Unconfined") {
        security_opt.push("seccomp=unconfined".to_string());
    }
    let capabilities = security
        .and_then(|s| s.capabilities.clone())
        .unwrap_or_default();
    let mut groups: Vec<String> = pod_security
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default()
        .iter()
        .map(i64::to_string)
        .collect();
    if let Some(fs_group) = pod_security.and_then(|p| p.fs_group) {
        groups.push(fs_group.to_string());
    }
    let defined: BTreeMap<String, String> = inputs.env.iter().cloned().collect();
    let expand = |list: &Option<Vec<String>>| {
        list.as_ref().filter(|l| !l.is_empty()).map(|l| {
            l.iter()
                .map(|item| super::env::expand(item, &defined))
                .collect::<Vec<_>>()
        })
    };
    let mut host = HostConfig {
        network_mode: Some(holder.clone()),
        ipc_mode: Some(holder.clone()),
        pid_mode: (spec.share_process_namespace == Some(true)).then_some(holder),
        mounts: Some(inputs.mounts),
        cap_add: capabilities.add.filter(|a| !a.is_empty()),
        cap_drop: capabilities.drop.filter(|d| !d.is_empty()),
        readonly_rootfs: security.and_then(|s| s.read_only_root_filesystem),
        security_opt: Some(security_opt),
        group_add: (!groups.is_empty()).then_some(groups),
        ..Default::default()
    };
    resources(container, &mut host);
    Ok(ContainerCreateBody {
        image: container.image.clone(),
        entrypoint: expand(&container.command),
        cmd: expand(&container.args),
        working_dir: container.working_dir.clone(),
        env: Some(
            inputs
                .env
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect(),
        ),
        user: user(security, pod_security, inputs.image_user),
        tty: container.tty,
        open_stdin: container.stdin,
        labels: Some(context.labels(inputs.kind, &container.name, inputs.instance)),
        host_config: Some(host),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    fn shop_pod() -> Pod {
        from(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "0123456789abcdef"},
            "spec": {
                "dnsPolicy": "None",
                "dnsConfig": {"nameservers": ["10.96.0.53"], "searches": ["shop.svc.cluster.local"], "options": [{"name": "ndots", "value": "5"}]},
                "securityContext": {"fsGroup": 2000, "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]},
                "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["db"]}],
                "containers": [{
                    "name": "web", "image": "shop:1",
                    "command": ["/shop", "web", "--listen", "$(ADDR)"],
                    "securityContext": {
                        "runAsUser": 1000, "runAsNonRoot": true, "readOnlyRootFilesystem": true,
                        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}
                    },
                    "resources": {"limits": {"cpu": "250m", "memory": "128Mi"}, "requests": {"cpu": "250m", "memory": "128Mi"}},
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/shop"}, {"name": "scratch", "mountPath": "/tmp", "subPath": "web"}]
                }]
            }
        }))
    }

    fn files() -> PodFiles {
        PodFiles {
            resolv_conf: "/p/resolv.conf".into(),
            hosts: "/p/hosts".into(),
            hostname: "/p/hostname".into(),
        }
    }

    #[test]
    fn the_pods_files_follow_its_dns_policy_and_aliases() {
        let pod = shop_pod();
        let cluster_dns = "10.96.0.10".parse().unwrap();
        assert_eq!(
            resolv_conf(&pod, cluster_dns, "cluster.local"),
            "nameserver 10.96.0.53\nsearch shop.svc.cluster.local\noptions ndots:5\n"
        );
        let mut first: Pod = pod.clone();
        first.spec.as_mut().unwrap().dns_policy = None;
        first.spec.as_mut().unwrap().dns_config = None;
        assert_eq!(
            resolv_conf(&first, cluster_dns, "cluster.local"),
            "nameserver 10.96.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        );
        let hosts = hosts(&pod, "10.244.0.9");
        assert!(hosts.contains("10.244.0.9\tweb-1\n"), "{hosts}");
        assert!(hosts.contains("10.1.2.3\tdb\n"), "{hosts}");
    }

    #[test]
    fn a_container_is_created_in_its_pods_namespaces_with_its_security_context_and_limits() {
        let pod = shop_pod();
        let context = PodContext::of(&pod, "c0ffee", "af-node");
        let spec = pod.spec.clone().unwrap();
        let volumes = BTreeMap::from([
            (
                "config".to_string(),
                Backing::Folder {
                    path: "/v/config".into(),
                    read_only: true,
                },
            ),
            (
                "scratch".to_string(),
                Backing::Folder {
                    path: "/v/scratch".into(),
                    read_only: false,
                },
            ),
        ]);
        let mounts = mounts(&spec.containers[0], &volumes, &files()).unwrap();
        let body = container(
            &pod,
            &context,
            &spec.containers[0],
            ContainerInputs {
                kind: Kind::App,
                instance: 2,
                env: vec![("ADDR".into(), "0.0.0.0:8080".into())],
                mounts,
                image_user: "",
            },
        )
        .unwrap();
        assert_eq!(
            body.entrypoint.as_deref().unwrap(),
            ["/shop", "web", "--listen", "0.0.0.0:8080"]
        );
        assert_eq!(body.cmd, None);
        assert_eq!(body.user.as_deref(), Some("1000"));
        let host = body.host_config.unwrap();
        assert_eq!(
            host.network_mode.as_deref(),
            Some("container:afn-c0ffee-0123456789ab-holder")
        );
        assert_eq!(host.cap_drop.as_deref().unwrap(), ["ALL"]);
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.security_opt.as_deref().unwrap(), ["no-new-privileges"]);
        assert_eq!(host.group_add.as_deref().unwrap(), ["2000"]);
        assert_eq!(host.nano_cpus, Some(250_000_000));
        assert_eq!(host.memory, Some(128 << 20));
        let mounts = host.mounts.unwrap();
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[1].source.as_deref(), Some("/v/scratch/web"));
        assert!(
            mounts
                .iter()
                .any(|m| m.target.as_deref() == Some("/etc/resolv.conf"))
        );
        assert_eq!(
            body.labels.unwrap()[labels::INSTANCE],
            "2",
            "a restart is a new instance"
        );
    }

    #[test]
    fn run_as_non_root_is_checked_as_the_kubelet_checks_it() {
        let pod = shop_pod();
        let mut container = pod.spec.clone().unwrap().containers.remove(0);
        let check = |c: &Container, image_user: &str| check_non_root(c, None, "web-1", image_user);
        assert_eq!(check(&container, ""), Ok(()), "runAsUser 1000 is not root");
        container.security_context.as_mut().unwrap().run_as_user = None;
        assert!(
            check(&container, "")
                .unwrap_err()
                .contains("will run as root")
        );
        assert!(
            check(&container, "app")
                .unwrap_err()
                .contains("non-numeric user (app)")
        );
        assert_eq!(check(&container, "1337:1337"), Ok(()));
        container.security_context.as_mut().unwrap().run_as_user = Some(0);
        assert!(
            check(&container, "1337")
                .unwrap_err()
                .contains("breaks non-root policy")
        );
    }

    #[test]
    fn the_holder_carries_the_sysctls_and_nothing_else() {
        let pod = shop_pod();
        let context = PodContext::of(&pod, "c0ffee", "af-node");
        let body = holder(
            &pod,
            &context,
            ("antifailure/proxy:1", &["hold".to_string()]),
            "afn-c0ffee",
            vec!["10.96.0.53".into()],
        );
        let host = body.host_config.unwrap();
        assert_eq!(
            host.sysctls.unwrap()["net.ipv4.ip_unprivileged_port_start"],
            "53"
        );
        assert_eq!(host.network_mode.as_deref(), Some("afn-c0ffee"));
        assert_eq!(host.cap_drop.as_deref().unwrap(), ["ALL"]);
        assert_eq!(body.hostname.as_deref(), Some("web-1"));
    }
}
