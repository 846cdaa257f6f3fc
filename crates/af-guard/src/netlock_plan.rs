//! The netlock rule plan: pure data. In a sandbox's network namespace, every outgoing packet is
//! dropped except on loopback and except packets of sockets owned by the proxy's uid — TCP, UDP,
//! ICMP and every other protocol alike, IPv4 and IPv6. The plan is the whole filter table, so
//! applying it replaces whatever was there in one transaction, and applying it twice leaves one
//! copy.

/// An IP family, one transaction each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// The restore and save commands of this family.
    pub fn commands(self) -> (&'static str, &'static str) {
        match self {
            Family::V4 => ("iptables-restore", "iptables-save"),
            Family::V6 => ("ip6tables-restore", "ip6tables-save"),
        }
    }
}

/// The rules for one family, in `iptables-restore` format, written exactly as `iptables-save`
/// prints them so that reading them back can be compared line for line.
///
/// `refused_local` are addresses reached through loopback that are not the sandbox's own and must
/// not serve its workload: Docker puts its embedded resolver on 127.0.0.11 in every container on a
/// user-defined network, and that resolver forwards any name to the outside. They are refused to
/// every socket but the proxy's (which resolves allowed names), before loopback is let through.
pub fn plan(family: Family, proxy_uid: u32, refused_local: &[std::net::IpAddr]) -> String {
    let mut first = Vec::new();
    for address in refused_local {
        let Some(host) = host_in(family, address) else {
            continue;
        };
        let others = format!("-m owner ! --uid-owner {proxy_uid}");
        first.push(format!(
            "-A OUTPUT -d {host} -p tcp {others} -j REJECT --reject-with tcp-reset"
        ));
        first.push(format!("-A OUTPUT -d {host} {others} -j DROP"));
    }
    output_lock(
        family,
        &first,
        &[format!(
            "-A OUTPUT -m owner --uid-owner {proxy_uid} -j ACCEPT"
        )],
    )
}

/// `address` as `iptables-save` writes a host of `family` (`/32`, `/128`); none when it is of the
/// other family.
fn host_in(family: Family, address: &std::net::IpAddr) -> Option<String> {
    match (address, family) {
        (std::net::IpAddr::V4(a), Family::V4) => Some(format!("{a}/32")),
        (std::net::IpAddr::V6(a), Family::V6) => Some(format!("{a}/128")),
        _ => None,
    }
}

/// The netlock plan of an `af` service's pod on Kubernetes (`runtime.netlock`): every outgoing
/// packet dropped except on loopback, replies on connections made *to* the pod (the kubelet's
/// readiness checks, the ingress controller, the sidecar's webhooks), and packets to `allowed`
/// — the environment's own Service addresses (the sidecar's and the services'), never a range:
/// the service range holds the API server's address too. No uid is exempt: the gate runs in the
/// pod as the engine's uid and must see what the workload would. TCP is refused with a local
/// reset and the rest fails with EPERM, so the gate and the probe see refusals, not silence.
pub fn pod_plan(family: Family, allowed: &[std::net::IpAddr]) -> String {
    // A connection the pod opened was refused by its first packet, so it never gets here.
    let mut accepted = vec!["-A OUTPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT".to_string()];
    for host in allowed.iter().filter_map(|a| host_in(family, a)) {
        accepted.push(format!("-A OUTPUT -d {host} -j ACCEPT"));
    }
    output_lock(family, &[], &accepted)
}

/// The whole filter table of a lock: nothing routed, every outgoing packet dropped but on loopback,
/// IPv6's neighbour discovery, and the `accepted` rules; TCP refused with a local reset. `first`
/// comes before everything, loopback included.
fn output_lock(family: Family, first: &[String], accepted: &[String]) -> String {
    let mut lines = vec![
        "*filter".to_string(),
        ":INPUT ACCEPT [0:0]".to_string(),
        // Nothing is routed through a locked namespace.
        ":FORWARD DROP [0:0]".to_string(),
        // Everything not accepted below is dropped; a dropped locally-generated datagram fails the
        // sending call at once (EPERM).
        ":OUTPUT DROP [0:0]".to_string(),
    ];
    lines.extend(first.iter().cloned());
    lines.push("-A OUTPUT -o lo -j ACCEPT".to_string());
    if family == Family::V6 {
        // Neighbour discovery is sent by the kernel, owned by no socket; without it the proxy's own
        // IPv6 connections could not find their next hop. No workload socket can send these
        // types (ping sockets send only echo requests).
        for icmp_type in [133, 135, 136] {
            lines.push(format!(
                "-A OUTPUT -p ipv6-icmp -m icmp6 --icmpv6-type {icmp_type} -j ACCEPT"
            ));
        }
    }
    lines.extend(accepted.iter().cloned());
    // A dropped SYN is retried by the kernel until connect() times out; a reset made here, never
    // sent out, fails it at once, so the workload (and the gate) learn immediately.
    lines.push("-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset".to_string());
    lines.push("COMMIT".to_string());
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// The refusal plan of a service's namespace on a platform network that drops silently (Docker's
/// `internal` networks): every packet leaving through `interface` for anywhere outside the
/// environment's `subnets` is refused here, visibly — a reset for TCP, EPERM for the rest —
/// instead of vanishing at the host. It takes nothing away that the network allowed (those
/// packets were dropped anyway) and adds nothing on any other interface, so a namespace that is
/// wrongly attached elsewhere still shows its leak to the probe.
///
/// `platform_side` are addresses inside those subnets that are not the environment's: the
/// platform's own (on Docker, the bridge's gateway, which is the host). They are refused like the
/// outside, before the subnets are let through: a service reaching the host's side reaches every
/// host listener bound to all interfaces.
pub fn refusal_plan(
    family: Family,
    interface: &str,
    subnets: &[String],
    platform_side: &[String],
) -> String {
    let mut lines = vec![
        "*filter".to_string(),
        ":INPUT ACCEPT [0:0]".to_string(),
        ":FORWARD ACCEPT [0:0]".to_string(),
        ":OUTPUT ACCEPT [0:0]".to_string(),
    ];
    for address in platform_side {
        if address.contains(':') == (family == Family::V6) {
            // As iptables-save writes a host back, so the read-back compares equal.
            let address = match (address.contains('/'), family) {
                (true, _) => address.clone(),
                (false, Family::V4) => format!("{address}/32"),
                (false, Family::V6) => format!("{address}/128"),
            };
            // Replies to connections the platform opened (its readiness checks) still go back.
            lines.push(format!(
                "-A OUTPUT -d {address} -o {interface} -m conntrack --ctstate ESTABLISHED -j ACCEPT"
            ));
            lines.push(format!(
                "-A OUTPUT -d {address} -o {interface} -p tcp -j REJECT --reject-with tcp-reset"
            ));
            lines.push(format!("-A OUTPUT -d {address} -o {interface} -j DROP"));
        }
    }
    for subnet in subnets {
        let is_v6 = subnet.contains(':');
        if is_v6 == (family == Family::V6) {
            lines.push(format!("-A OUTPUT -d {subnet} -o {interface} -j ACCEPT"));
        }
    }
    if family == Family::V6 {
        for icmp_type in [133, 135, 136] {
            lines.push(format!(
                "-A OUTPUT -o {interface} -p ipv6-icmp -m icmp6 --icmpv6-type {icmp_type} -j ACCEPT"
            ));
        }
    }
    lines.push(format!(
        "-A OUTPUT -o {interface} -p tcp -j REJECT --reject-with tcp-reset"
    ));
    lines.push(format!("-A OUTPUT -o {interface} -j DROP"));
    lines.push("COMMIT".to_string());
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// The rule lines of `iptables-save` output for the filter table: chain policies and rules, without
/// comments and counters, so two dumps compare by meaning.
pub fn normalize(saved: &str) -> Vec<String> {
    let mut in_filter = false;
    let mut out = Vec::new();
    for line in saved.lines().map(str::trim) {
        if line.starts_with('*') {
            in_filter = line == "*filter";
            continue;
        }
        if !in_filter || line.is_empty() || line.starts_with('#') || line == "COMMIT" {
            continue;
        }
        match line.strip_prefix(':') {
            // ":OUTPUT DROP [12:3456]" → ":OUTPUT DROP"
            Some(chain) => out.push(format!(":{}", chain.split(" [").next().unwrap_or(chain))),
            None => out.push(line.to_string()),
        }
    }
    out
}

/// Whether what the kernel holds differs from the plan: the rules differ, or are in another order.
pub fn drifted(planned: &str, saved: &str) -> bool {
    normalize(planned) != normalize(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_match_their_golden_files() {
        let golden = |name: &str| {
            std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/golden")
                    .join(name),
            )
            .unwrap()
        };
        assert_eq!(plan(Family::V4, 1337, &[]), golden("netlock-v4.rules"));
        assert_eq!(plan(Family::V6, 1337, &[]), golden("netlock-v6.rules"));
    }

    #[test]
    fn refusal_plans_match_their_golden_files() {
        let golden = |name: &str| {
            std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/golden")
                    .join(name),
            )
            .unwrap()
        };
        let subnets = ["172.20.0.0/16".to_string()];
        let gateway = ["172.20.0.1".to_string()];
        assert_eq!(
            refusal_plan(Family::V4, "eth0", &subnets, &gateway),
            golden("refusal-v4.rules")
        );
        assert_eq!(
            refusal_plan(Family::V6, "eth0", &subnets, &gateway),
            golden("refusal-v6.rules")
        );
    }

    #[test]
    fn pod_plans_match_their_golden_files() {
        let golden = |name: &str| {
            std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/golden")
                    .join(name),
            )
            .unwrap()
        };
        let allowed: Vec<std::net::IpAddr> = ["10.43.0.11", "10.43.0.12", "fd43::11"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let v4 = pod_plan(Family::V4, &allowed);
        let v6 = pod_plan(Family::V6, &allowed);
        if std::env::var_os("AF_UPDATE_GOLDEN").is_some() {
            // CI compares with what was reviewed; rewriting there would pass any plan.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "AF_UPDATE_GOLDEN is refused with CI=true"
            );
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
            std::fs::write(dir.join("netlock-pod-v4.rules"), &v4).unwrap();
            std::fs::write(dir.join("netlock-pod-v6.rules"), &v6).unwrap();
        }
        assert_eq!(v4, golden("netlock-pod-v4.rules"));
        assert_eq!(v6, golden("netlock-pod-v6.rules"));
        assert!(!v4.contains("uid-owner"), "no uid is exempt");
        assert!(
            !v4.contains("fd43::11") && !v6.contains("10.43.0.11"),
            "each family its own"
        );
    }

    #[test]
    fn the_proxy_uid_is_configurable() {
        assert!(plan(Family::V4, 4242, &[]).contains("--uid-owner 4242 -j ACCEPT"));
    }

    /// Docker's embedded resolver sits on loopback and forwards outside: refused to everyone but
    /// the proxy, before loopback is let through, each family with its own addresses.
    #[test]
    fn refused_local_addresses_come_before_loopback() {
        let refused: Vec<std::net::IpAddr> =
            vec!["127.0.0.11".parse().unwrap(), "fd00::11".parse().unwrap()];
        let v4 = plan(Family::V4, 1337, &refused);
        let lines: Vec<&str> = v4.lines().collect();
        let at = |rule: &str| lines.iter().position(|l| *l == rule).unwrap();
        let tcp = "-A OUTPUT -d 127.0.0.11/32 -p tcp -m owner ! --uid-owner 1337 -j REJECT --reject-with tcp-reset";
        let rest = "-A OUTPUT -d 127.0.0.11/32 -m owner ! --uid-owner 1337 -j DROP";
        assert!(
            at(tcp) < at(rest) && at(rest) < at("-A OUTPUT -o lo -j ACCEPT"),
            "{v4}"
        );
        assert!(!v4.contains("fd00::11"));
        let v6 = plan(Family::V6, 1337, &refused);
        assert!(v6.contains("-A OUTPUT -d fd00::11/128 -m owner ! --uid-owner 1337 -j DROP"));
        assert!(!v6.contains("127.0.0.11"));
        let unrefused = plan(Family::V4, 1337, &[]);
        let stripped: String = v4
            .lines()
            .filter(|l| !l.contains("127.0.0.11"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(stripped, unrefused, "nothing else changes");
    }

    #[test]
    fn drift_is_seen_through_comments_and_counters() {
        let planned = plan(Family::V4, 1337, &[]);
        let saved = format!(
            "# Generated by iptables-save\n{}# Completed\n",
            planned.replace(":OUTPUT DROP [0:0]", ":OUTPUT DROP [17:1020]")
        );
        assert!(!drifted(&planned, &saved));
        let extra = planned.replace("COMMIT", "-A OUTPUT -j ACCEPT\nCOMMIT");
        assert!(drifted(&planned, &extra), "an added rule is drift");
        let loose = planned.replace(":OUTPUT DROP", ":OUTPUT ACCEPT");
        assert!(drifted(&planned, &loose), "a changed policy is drift");
        assert!(drifted(&planned, ""), "no rules at all is drift");
    }
}
