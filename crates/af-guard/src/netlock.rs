//! Applying the netlock plan to the kernel: one atomic transaction per family, read back and
//! verified. A lock that only looks applied is worse than none, so every step that cannot be
//! confirmed is an error.

use std::io::Write;
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::netlock_plan::{Family, drifted, normalize, plan, pod_plan, refusal_plan};

/// What happened to one family.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FamilyOutcome {
    /// The rules were applied where there were none.
    Locked,
    /// The rules were already exactly the plan; nothing was written.
    AlreadyLocked,
    /// Other rules were there (drift); they were replaced by the plan.
    Replaced { previous: Vec<String> },
    /// IPv6 is disabled in this namespace and its filter cannot be written; with no IPv6, no IPv6
    /// packet can leave either.
    Ipv6Disabled,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NetlockReport {
    /// `nf_tables` or `legacy`: which iptables backend the node uses.
    pub backend: String,
    /// The uid whose sockets may still send; none for a pod's lock or a refusal, which exempt
    /// no uid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_uid: Option<u32>,
    /// False when IPv6 is disabled in this namespace (it is still locked when the filter can be
    /// written, in case it is enabled later).
    pub ipv6_enabled: bool,
    pub ipv4: FamilyOutcome,
    pub ipv6: FamilyOutcome,
    /// The addresses a pod's lock lets packets go to (`--only-to`); empty for a sandbox's lock.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub only_to: Vec<String>,
    /// Loopback addresses refused to every uid but the proxy's (a sandbox's lock only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused_local: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum NetlockError {
    #[error(
        "refusing to run under gVisor: its network stack implements only part of netfilter (no owner matching among what it lacks), so a lock would only look applied; run it with runc or Kata"
    )]
    GVisor,
    #[error("cannot run {command}: {detail}; the iptables tools must be in the netlock image")]
    Tool { command: String, detail: String },
    #[error(
        "the kernel cannot match packets by owner for {family}: {detail}; netlock refuses to leave a lock that only looks applied"
    )]
    OwnerMatchMissing {
        family: &'static str,
        detail: String,
    },
    #[error("applying the {family} rules failed: {detail}")]
    Apply {
        family: &'static str,
        detail: String,
    },
    #[error("the {family} rules read back differ from the plan after applying them: {found:?}")]
    Verify {
        family: &'static str,
        found: Vec<String>,
    },
}

/// gVisor presents a fixed, fake kernel version; recognizing it is how a process learns it runs
/// under gVisor.
pub fn is_gvisor(proc_version: &str) -> bool {
    proc_version.contains("#1 SMP Sun Jan 10 15:06:54 PST 2016")
        || proc_version.to_ascii_lowercase().contains("gvisor")
}

/// The iptables backend, from `iptables --version` (`iptables v1.8.9 (nf_tables)`).
pub fn backend(version_line: &str) -> String {
    match version_line.split_once('(') {
        Some((_, rest)) => rest.trim_end().trim_end_matches(')').to_string(),
        // Versions before 1.8 have only the legacy backend and do not name it.
        None => "legacy".to_string(),
    }
}

fn run(
    command: &str,
    args: &[&str],
    input: Option<&str>,
) -> Result<(bool, String, String), NetlockError> {
    let tool = |detail: String| NetlockError::Tool {
        command: command.to_string(),
        detail,
    };
    let mut child = Command::new(command)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| tool(e.to_string()))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| tool(e.to_string()))?;
    }
    let output = child.wait_with_output().map_err(|e| tool(e.to_string()))?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

fn ipv6_disabled() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6")
        .map_or(true, |v| v.trim() == "1")
}

/// Locks the current network namespace for `proxy_uid`, with `refused_local` (loopback
/// addresses that forward outside) refused to every other uid, or says precisely why it could not.
pub fn apply(
    proxy_uid: u32,
    refused_local: &[std::net::IpAddr],
) -> Result<NetlockReport, NetlockError> {
    refuse_gvisor()?;
    Ok(NetlockReport {
        proxy_uid: Some(proxy_uid),
        refused_local: refused_local.iter().map(ToString::to_string).collect(),
        ..apply_both(|family| plan(family, proxy_uid, refused_local))?
    })
}

/// Locks the current network namespace as an `af` service's pod ([`pod_plan`]): nothing out
/// but loopback, replies, and `allowed`.
pub fn apply_pod(allowed: &[std::net::IpAddr]) -> Result<NetlockReport, NetlockError> {
    refuse_gvisor()?;
    Ok(NetlockReport {
        only_to: allowed.iter().map(ToString::to_string).collect(),
        ..apply_both(|family| pod_plan(family, allowed))?
    })
}

fn refuse_gvisor() -> Result<(), NetlockError> {
    if is_gvisor(&std::fs::read_to_string("/proc/version").unwrap_or_default()) {
        return Err(NetlockError::GVisor);
    }
    Ok(())
}

/// Applies `plan_for` each family (IPv6's may fail only where IPv6 is disabled) and reports it,
/// with no uid exempt and no address named: the callers say theirs.
fn apply_both(plan_for: impl Fn(Family) -> String) -> Result<NetlockReport, NetlockError> {
    let (_, version, _) = run("iptables", &["--version"], None)?;
    let ipv4 = apply_plan(Family::V4, &plan_for(Family::V4))?;
    let ipv6 = match apply_plan(Family::V6, &plan_for(Family::V6)) {
        Ok(outcome) => outcome,
        Err(_) if ipv6_disabled() => FamilyOutcome::Ipv6Disabled,
        Err(err) => return Err(err),
    };
    Ok(NetlockReport {
        backend: backend(version.trim()),
        proxy_uid: None,
        ipv6_enabled: !ipv6_disabled(),
        ipv4,
        ipv6,
        only_to: Vec::new(),
        refused_local: Vec::new(),
    })
}

/// Makes the filter table exactly `planned`, in one transaction, and reads it back.
fn apply_plan(family: Family, planned: &str) -> Result<FamilyOutcome, NetlockError> {
    let (restore, _) = family.commands();
    let before = read_rules(family)?;
    let outcome = if !drifted(planned, &before) {
        FamilyOutcome::AlreadyLocked
    } else {
        let (ok, _, stderr) = run(restore, &[], Some(planned))?;
        if !ok {
            let detail = stderr.trim().to_string();
            return Err(if detail.contains("owner") {
                NetlockError::OwnerMatchMissing {
                    family: family.name(),
                    detail,
                }
            } else {
                NetlockError::Apply {
                    family: family.name(),
                    detail,
                }
            });
        }
        let previous = normalize(&before);
        // A fresh namespace's filter table is empty or the default ACCEPT policies only.
        let untouched = previous
            .iter()
            .all(|l| l.starts_with(':') && l.ends_with(" ACCEPT"));
        if untouched {
            FamilyOutcome::Locked
        } else {
            FamilyOutcome::Replaced { previous }
        }
    };
    let after = read_rules(family)?;
    if drifted(planned, &after) {
        return Err(NetlockError::Verify {
            family: family.name(),
            found: normalize(&after),
        });
    }
    Ok(outcome)
}

/// The refusal rules of a service's namespace (see [`refusal_plan`]), applied like netlock's.
pub fn apply_refusal(
    interface: &str,
    subnets: &[String],
    platform_side: &[String],
) -> Result<NetlockReport, NetlockError> {
    apply_both(|family| refusal_plan(family, interface, subnets, platform_side))
}

/// The filter table as the kernel holds it now.
pub fn read_rules(family: Family) -> Result<String, NetlockError> {
    let (_, save) = family.commands();
    let (ok, stdout, stderr) = run(save, &["-t", "filter"], None)?;
    if !ok {
        return Err(NetlockError::Apply {
            family: family.name(),
            detail: format!("{save}: {}", stderr.trim()),
        });
    }
    Ok(stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_gvisor() {
        assert!(is_gvisor(
            "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016"
        ));
        assert!(!is_gvisor(
            "Linux version 6.18.44 (gcc 12) #1 SMP PREEMPT_DYNAMIC"
        ));
    }

    #[test]
    fn names_the_backend() {
        assert_eq!(backend("iptables v1.8.9 (nf_tables)"), "nf_tables");
        assert_eq!(backend("iptables v1.8.7 (legacy)"), "legacy");
        assert_eq!(backend("iptables v1.6.1"), "legacy");
    }
}
