//! A ticket's sandbox on Docker as data: the create bodies the adapter sends, from pure functions.
//! The Docker shape of seed 003's pod, object for object:
//!
//! | the pod's          | here                                                                  |
//! |--------------------|-----------------------------------------------------------------------|
//! | network namespace  | the holder `afe-<ticket>-net` (engine image, `hold`), whose namespace the others join |
//! | init `netlock`     | `af-proxy netlock` run once in the holder as root with NET_ADMIN alone |
//! | container `proxy`  | `afe-<ticket>-proxy`: `af-proxy serve`, uid 1337, only with egress    |
//! | container `sandbox`| `afe-<ticket>`: the flow's image, uid 1000, no capability             |
//! | the PVC            | the volume `afe-<ticket>` at `/workspace`                             |
//!
//! Everything carries `afe.ticket` and `app.kubernetes.io/managed-by: afe` from its creation, so a
//! ticket's objects are found and removed by label, never by name alone.

use std::collections::HashMap;
use std::net::IpAddr;

use af_docker::plan::hardening::{confined, confined_read_only};
use af_manifest::HostRule;
use af_sidecar_api::SidecarConfig;
use af_sidecar_api::config::ResolverConfig;
use afe_sandbox::{SandboxSpec, labels, workspace};
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};

/// The uid the sandbox's commands run as (seed 003: "sandbox uid 1000").
pub const SANDBOX_USER: &str = "1000:1000";
/// The proxy's uid, the one netlock lets out.
pub const PROXY_UID: u32 = 1337;
/// Docker's embedded resolver: in the namespace of every container on a user-defined network, on
/// loopback, forwarding any name outside. netlock refuses it to everyone but the proxy.
pub const DOCKER_EMBEDDED_DNS: &str = "127.0.0.11";
/// Where the lifecycle marker is kept in the sandbox container: a memory-backed directory owned by
/// root, which the sandbox's user can read but not write (Docker's labels cannot change after
/// creation, so they cannot carry a heartbeat).
pub const MARKER_DIR: &str = "/run/afe";
pub const MARKER_FILE: &str = "/run/afe/lifecycle.json";

/// The parts of a ticket's sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Holds the network namespace.
    Net,
    /// The allowlist proxy (only with egress).
    Proxy,
    /// Runs the ticket's commands.
    Sandbox,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Net => "net",
            Role::Proxy => "proxy",
            Role::Sandbox => "sandbox",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        [Role::Net, Role::Proxy, Role::Sandbox]
            .into_iter()
            .find(|role| role.as_str() == text)
    }
}

/// A ticket's object names. A ticket id is a name the store made (a UUID): lowercase letters,
/// digits and `-`, which every Docker name accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub holder: String,
    pub proxy: String,
    pub sandbox: String,
    pub volume: String,
}

impl Names {
    pub fn of(ticket: &str) -> Names {
        Names {
            holder: format!("afe-{ticket}-net"),
            proxy: format!("afe-{ticket}-proxy"),
            sandbox: format!("afe-{ticket}"),
            volume: format!("afe-{ticket}"),
        }
    }

    pub fn container(&self, role: Role) -> &str {
        match role {
            Role::Net => &self.holder,
            Role::Proxy => &self.proxy,
            Role::Sandbox => &self.sandbox,
        }
    }
}

/// Whether `ticket` can name Docker objects: 1 to 63 lowercase letters, digits and `-`.
pub fn is_ticket_name(ticket: &str) -> bool {
    (1..=63).contains(&ticket.len())
        && ticket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The labels of `role` of the ticket's sandbox made with `signature`.
pub fn labels_of(ticket: &str, signature: &str, role: Role) -> HashMap<String, String> {
    let mut all: HashMap<String, String> =
        labels::for_ticket(ticket, signature).into_iter().collect();
    all.insert(labels::ROLE.to_string(), role.as_str().to_string());
    all
}

/// Whether a found object's labels say it is afe's, of `ticket`.
pub fn is_ours(found: Option<&HashMap<String, String>>, ticket: &str) -> bool {
    found.is_some_and(|labels| {
        labels.get(labels::TICKET).map(String::as_str) == Some(ticket)
            && labels.get(labels::MANAGED_BY.0).map(String::as_str) == Some(labels::MANAGED_BY.1)
    })
}

/// Where the platform lets a sandbox with egress out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Egress {
    /// The networks its holder is attached to: the proxy's way out.
    pub networks: Vec<String>,
    /// The resolvers Docker writes into the holder's resolv.conf; none: Docker's choice.
    pub dns: Vec<IpAddr>,
}

/// The ticket's volume, mounted at `/workspace`.
pub fn volume(ticket: &str, signature: &str) -> VolumeCreateRequest {
    let names = Names::of(ticket);
    VolumeCreateRequest {
        name: Some(names.volume),
        labels: Some(labels_of(ticket, signature, Role::Sandbox)),
        ..Default::default()
    }
}

/// The holder: the engine's `hold` as root with NET_ADMIN and nothing else, read-only, no new
/// privileges. Its first step is netlock — every packet of the namespace dropped but loopback and
/// the proxy's uid, Docker's embedded resolver refused to everyone else — whose report it prints
/// before anything can join; then it gives every capability up and holds. With egress it is on
/// the egress networks; without, on none: only loopback.
pub fn holder(
    ticket: &str,
    signature: &str,
    engine_image: &str,
    egress: Option<&Egress>,
) -> ContainerCreateBody {
    let network = egress
        .and_then(|e| e.networks.first())
        .map_or("none", String::as_str);
    ContainerCreateBody {
        image: Some(engine_image.to_string()),
        cmd: Some(hold_args()),
        user: Some("0".to_string()),
        labels: Some(labels_of(ticket, signature, Role::Net)),
        host_config: Some(HostConfig {
            cap_add: Some(vec!["NET_ADMIN".to_string()]),
            dns: egress
                .filter(|e| !e.dns.is_empty())
                .map(|e| e.dns.iter().map(ToString::to_string).collect()),
            ..confined_read_only(network)
        }),
        ..Default::default()
    }
}

/// The networks a holder joins after it is created, beyond its first.
pub fn more_networks(egress: Option<&Egress>) -> Vec<String> {
    egress
        .map(|e| e.networks.iter().skip(1).cloned().collect())
        .unwrap_or_default()
}

/// `af-proxy hold`, locking the namespace first for the proxy's uid.
pub fn hold_args() -> Vec<String> {
    vec![
        "hold".to_string(),
        "--lock-for-uid".to_string(),
        PROXY_UID.to_string(),
        "--refuse-local".to_string(),
        DOCKER_EMBEDDED_DNS.to_string(),
    ]
}

/// Whether netlock's report says both families are locked (or IPv6 is off in the namespace, so
/// no IPv6 packet can leave either).
pub fn lock_verified(report: &serde_json::Value) -> bool {
    let locked = |family: &str| {
        matches!(
            report[family].as_str(),
            Some("locked" | "already_locked" | "ipv6_disabled")
        ) || report[family].get("replaced").is_some()
    };
    locked("ipv4") && locked("ipv6") && report["proxy_uid"] == PROXY_UID
}

/// The proxy's configuration: the flow's egress as its allowlist, on loopback port 3128; its
/// control API on loopback port 9901 behind `token`. It resolves allowed names with `resolver`'s
/// fixed answers and nameservers, or with the holder's resolvers when it names none (on a
/// user-defined network Docker's embedded resolver is no use to it: it forwards from a socket of
/// its own, which netlock drops).
///
/// `dialable` are addresses (or ranges) that are not public but that the machine's operator lets
/// the proxy dial for an allowed name — an internal mirror's; they become address rules beside
/// the flow's names (a flow itself names hosts only).
pub fn proxy_config(
    spec: &SandboxSpec,
    token: String,
    resolver: &ResolverConfig,
    dns: &[IpAddr],
    dialable: &[HostRule],
) -> SidecarConfig {
    let mut allow = spec.egress.clone();
    allow.extend(dialable.iter().cloned());
    let mut config = SidecarConfig::allowlist_proxy(&spec.ticket, allow, token);
    config.resolver = resolver.clone();
    if config.resolver.nameservers.is_empty() {
        config.resolver.nameservers = dns
            .iter()
            .map(|ip| std::net::SocketAddr::new(*ip, 53))
            .collect();
    }
    config
}

/// The proxy: `af-proxy serve` as uid 1337 in the holder's namespace, read-only, its decision log
/// in memory-backed scratch space.
pub fn proxy(
    ticket: &str,
    signature: &str,
    engine_image: &str,
    config_text: &str,
) -> ContainerCreateBody {
    let names = Names::of(ticket);
    ContainerCreateBody {
        image: Some(engine_image.to_string()),
        cmd: Some(vec!["serve".to_string()]),
        user: Some(format!("{PROXY_UID}:{PROXY_UID}")),
        env: Some(vec![format!("AF_PROXY_CONFIG_TEXT={config_text}")]),
        labels: Some(labels_of(ticket, signature, Role::Proxy)),
        host_config: Some(HostConfig {
            tmpfs: Some(HashMap::from([(
                "/var/log/af".to_string(),
                format!("size=16m,uid={PROXY_UID},gid={PROXY_UID}"),
            )])),
            ..confined_read_only(&format!("container:{}", names.holder))
        }),
        ..Default::default()
    }
}

/// What the sandbox's processes see: the variables the flow names (nothing else of the worker's),
/// and with egress the proxy, which every common HTTP client reads from these.
pub fn environment(spec: &SandboxSpec) -> Vec<String> {
    let mut env: Vec<String> = spec
        .env
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    if spec.has_egress() {
        env.extend(
            afe_sandbox::inside::proxy_variables()
                .into_iter()
                .map(|(name, value)| format!("{name}={value}")),
        );
    }
    env
}

pub use afe_sandbox::inside::{IDLE, ready_check};

/// The sandbox: the flow's image as uid 1000 in the holder's namespace, no capability, no new
/// privileges, Docker's default seccomp profile (nothing overrides it), the flow's CPUs and memory
/// as limits (no swap beyond them), a bound on processes, the ticket's volume at `/workspace` and
/// nothing else of the machine: no Docker socket, no host path.
pub fn sandbox(spec: &SandboxSpec, signature: &str, pids_limit: i64) -> ContainerCreateBody {
    let names = Names::of(&spec.ticket);
    let mut labels = labels_of(&spec.ticket, signature, Role::Sandbox);
    labels.insert(labels::STATE.to_string(), "open".to_string());
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        user: Some(SANDBOX_USER.to_string()),
        entrypoint: Some(vec!["sh".to_string(), "-c".to_string()]),
        cmd: Some(vec![IDLE.to_string()]),
        env: Some(environment(spec)),
        working_dir: Some(workspace::ROOT.to_string()),
        labels: Some(labels),
        host_config: Some(HostConfig {
            nano_cpus: spec.cpus.map(|cpus| (cpus * 1e9).round() as i64),
            memory: spec.memory_bytes.map(|m| m as i64),
            memory_swap: spec.memory_bytes.map(|m| m as i64),
            pids_limit: Some(pids_limit),
            init: Some(true),
            mounts: Some(vec![Mount {
                target: Some(workspace::ROOT.to_string()),
                source: Some(names.volume),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            }]),
            tmpfs: Some(HashMap::from([(
                MARKER_DIR.to_string(),
                "size=64k,mode=0755".to_string(),
            )])),
            ..confined(&format!("container:{}", names.holder))
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(egress: &[&str]) -> SandboxSpec {
        SandboxSpec {
            ticket: "6f1c2d3e-0000-4000-8000-000000000001".into(),
            image: "afe-sandbox:latest".into(),
            cpus: Some(1.5),
            memory_bytes: Some(512 << 20),
            env: BTreeMap::from([("API_KEY".to_string(), "s3cret".to_string())]),
            egress: egress
                .iter()
                .map(|r| af_manifest::parse_host_rule(r).unwrap())
                .collect(),
            runtime_class: None,
        }
    }

    #[test]
    fn the_sandbox_runs_as_uid_1000_with_nothing_of_the_machine() {
        let body = sandbox(&spec(&[]), "sig", 512);
        let host = body.host_config.as_ref().unwrap();
        assert_eq!(body.user.as_deref(), Some("1000:1000"));
        assert_eq!(host.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(host.cap_add, None);
        assert_eq!(
            host.security_opt.as_deref(),
            Some(&["no-new-privileges".to_string()][..]),
            "no-new-privileges and nothing that would replace the default seccomp profile"
        );
        assert_eq!(host.privileged, None);
        assert_eq!(host.binds, None, "no host path, no Docker socket");
        let mounts = host.mounts.as_ref().unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].typ, Some(MountType::VOLUME));
        assert_eq!(mounts[0].target.as_deref(), Some("/workspace"));
        assert_eq!(host.nano_cpus, Some(1_500_000_000));
        assert_eq!(host.memory, Some(512 << 20));
        assert_eq!(host.memory_swap, host.memory, "no swap beyond the limit");
        assert_eq!(
            host.network_mode.as_deref(),
            Some("container:afe-6f1c2d3e-0000-4000-8000-000000000001-net")
        );
        let labels = body.labels.unwrap();
        assert_eq!(labels["afe.ticket"], "6f1c2d3e-0000-4000-8000-000000000001");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "afe");
        assert_eq!(labels["afe.role"], "sandbox");
    }

    #[test]
    fn the_environment_is_what_the_flow_names_and_the_proxy_only_with_egress() {
        assert_eq!(environment(&spec(&[])), ["API_KEY=s3cret"]);
        let with = environment(&spec(&["pypi.org"]));
        assert!(with.contains(&"HTTPS_PROXY=http://127.0.0.1:3128".to_string()));
        assert!(with.contains(&"no_proxy=localhost,127.0.0.1,::1".to_string()));
    }

    #[test]
    fn without_egress_the_holder_has_no_network_and_there_is_no_proxy_route() {
        let body = holder("t", "sig", "engine:1", None);
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(
            host.cap_add.as_deref(),
            Some(&["NET_ADMIN".to_string()][..])
        );
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(body.cmd, Some(hold_args()), "it locks before it holds");
        let egress = Egress {
            networks: vec!["out-a".into(), "out-b".into()],
            dns: vec!["198.51.100.53".parse().unwrap()],
        };
        let host = holder("t", "sig", "engine:1", Some(&egress))
            .host_config
            .unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("out-a"));
        assert_eq!(
            host.dns.as_deref(),
            Some(&["198.51.100.53".to_string()][..])
        );
        assert_eq!(more_networks(Some(&egress)), ["out-b"]);
    }

    #[test]
    fn the_proxy_is_uid_1337_in_the_holders_namespace_and_resolves_with_what_it_is_given() {
        let body = proxy("t", "sig", "engine:1", "text");
        let host = body.host_config.as_ref().unwrap();
        assert_eq!(body.user.as_deref(), Some("1337:1337"));
        assert_eq!(host.network_mode.as_deref(), Some("container:afe-t-net"));
        assert_eq!(host.cap_add, None);
        assert_eq!(host.readonly_rootfs, Some(true));
        let dns: Vec<IpAddr> = vec!["198.51.100.53".parse().unwrap()];
        let mirror = af_manifest::parse_host_rule("10.1.2.0/24").unwrap();
        let config = proxy_config(
            &spec(&["pypi.org"]),
            "tok".into(),
            &ResolverConfig::default(),
            &dns,
            std::slice::from_ref(&mirror),
        );
        assert_eq!(config.listen.proxy.unwrap().to_string(), "127.0.0.1:3128");
        assert_eq!(config.listen.dns, None, "no DNS responder in a sandbox");
        assert_eq!(
            config.resolver.nameservers[0].to_string(),
            "198.51.100.53:53"
        );
        assert_eq!(
            config.policy.allow.len(),
            2,
            "the flow's name and the operator's range"
        );
        assert_eq!(config.policy.allow[1], mirror);
    }

    #[test]
    fn the_holder_locks_for_the_proxy_and_refuses_dockers_resolver() {
        assert_eq!(
            hold_args(),
            [
                "hold",
                "--lock-for-uid",
                "1337",
                "--refuse-local",
                "127.0.0.11"
            ]
        );
        let report = |v4: &str, v6: serde_json::Value, uid: u32| serde_json::json!({"ipv4": v4, "ipv6": v6, "proxy_uid": uid});
        assert!(lock_verified(&report("locked", "locked".into(), 1337)));
        assert!(lock_verified(&report(
            "already_locked",
            "ipv6_disabled".into(),
            1337
        )));
        assert!(lock_verified(&report(
            "locked",
            serde_json::json!({"replaced": {"previous": []}}),
            1337
        )));
        assert!(
            !lock_verified(&report("locked", "locked".into(), 0)),
            "another uid"
        );
        assert!(!lock_verified(&serde_json::Value::Null));
        assert!(!lock_verified(&report("failed", "locked".into(), 1337)));
    }

    #[test]
    fn ready_means_the_folders_and_with_egress_the_proxys_listener() {
        assert_eq!(ready_check(false)[2], "test -d /workspace/repo");
        assert_eq!(
            ready_check(true)[2],
            "test -d /workspace/repo && grep -q '^ *[0-9]*: 0100007F:0C38 00000000:0000 0A ' /proc/net/tcp"
        );
    }

    #[test]
    fn only_objects_with_both_labels_are_ours() {
        let ours = labels_of("t", "sig", Role::Net);
        assert!(is_ours(Some(&ours), "t"));
        assert!(!is_ours(Some(&ours), "u"));
        let mut foreign = ours.clone();
        foreign.remove("app.kubernetes.io/managed-by");
        assert!(!is_ours(Some(&foreign), "t"));
        assert!(!is_ours(None, "t"));
        assert!(is_ticket_name("6f1c2d3e-0000-4000-8000-000000000001"));
        assert!(!is_ticket_name("../x") && !is_ticket_name("") && !is_ticket_name("A"));
    }
}
