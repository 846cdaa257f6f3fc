//! The oldest Kubernetes af supports, checked against the API server before `up` changes
//! anything. 1.30 is where what af renders is proved (strict schemas from 1.30 on), and it has
//! everything the objects rely on: the sidecar's `net.ipv4.ip_unprivileged_port_start` allowed
//! by every kubelet by default (1.22), Pod Security admission enforcing the namespace's labels
//! (1.25), and NetworkPolicy `endPort` (1.25). An older kubelet rejects the sidecar's pod
//! (`SysctlForbidden`) and an older API server ignores the Pod Security labels, so an older
//! cluster is refused rather than half working.

use af_runtime::{RuntimeError, RuntimeErrorKind};

/// The oldest supported minor version, as `major.minor`.
pub const MINIMUM: &str = "1.30";

/// `(major, minor)` of a `gitVersion` (`v1.30.2`, `v1.29.4+k3s1`, `v1.31.0-gke.1`).
pub fn major_minor(git_version: &str) -> Option<(u32, u32)> {
    let mut parts = git_version.trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// Whether `git_version` is at least [`MINIMUM`]; a version that cannot be read is refused too,
/// since nothing can be said for it.
pub fn supported(git_version: &str) -> Result<(), RuntimeError> {
    let minimum = major_minor(MINIMUM).expect("MINIMUM reads as a version");
    match major_minor(git_version) {
        Some(found) if found >= minimum => Ok(()),
        _ => Err(RuntimeErrorKind::ClusterTooOld {
            found: git_version.to_string(),
            minimum: MINIMUM.to_string(),
        }
        .into()),
    }
}

/// The variable that lets af go on with one Kubernetes version older than [`MINIMUM`]
/// (`major.minor`, as `1.20`): for a test cluster whose version is known, never silently — every
/// `up` says what it is doing and what does not hold there.
pub const ALLOW_VARIABLE: &str = "AF_KUBERNETES_ALLOW_VERSION";

/// What af knows not to hold on a cluster older than [`MINIMUM`], said with every allowed `up`.
const OLDER_LIMITS: &str = "an API server before 1.25 ignores the namespace's Pod Security labels; a kubelet before 1.22 refuses the sidecar's pod (SysctlForbidden) unless it allows net.ipv4.ip_unprivileged_port_start; NetworkPolicy endPort needs 1.25 (docs/runtimes.md, \"Clusters older than 1.30\")";

/// Whether `git_version` may be used: supported, or older and exactly the version `allowed`
/// names — then the warning to give. Anything else older is refused (AF-RUN-059).
pub fn judge(git_version: &str, allowed: Option<&str>) -> Result<Option<String>, RuntimeError> {
    let refused = match supported(git_version) {
        Ok(()) => return Ok(None),
        Err(refused) => refused,
    };
    let found = major_minor(git_version);
    match allowed.and_then(|a| major_minor(a).map(|m| (a, m))) {
        Some((allowed, wanted)) if found == Some(wanted) => Ok(Some(format!(
            "this cluster runs Kubernetes {git_version}, older than {MINIMUM}, the oldest af supports; {ALLOW_VARIABLE}={allowed} makes af go on anyway. Not proved there: {OLDER_LIMITS}"
        ))),
        _ => Err(refused),
    }
}

/// Reads the API server's version and judges it; the warning an allowed older version carries.
pub async fn check(
    client: &kube::Client,
    allowed: Option<&str>,
) -> Result<Option<String>, RuntimeError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(|e| crate::error::api("reading the API server's version", e))?;
    judge(&info.git_version, allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_distributions_write_them() {
        assert_eq!(major_minor("v1.30.2"), Some((1, 30)));
        assert_eq!(major_minor("v1.29.4+k3s1"), Some((1, 29)));
        assert_eq!(major_minor("v1.31.0-gke.1200"), Some((1, 31)));
        assert_eq!(major_minor("1.33"), Some((1, 33)));
        assert_eq!(major_minor("latest"), None);
    }

    #[test]
    fn an_older_version_goes_on_only_when_it_is_the_one_allowed_and_says_so() {
        let warning = judge("v1.20.2", Some("1.20")).unwrap().unwrap();
        assert!(warning.contains("v1.20.2"), "{warning}");
        assert!(
            warning.contains("AF_KUBERNETES_ALLOW_VERSION=1.20"),
            "{warning}"
        );
        assert!(warning.contains("Pod Security"), "{warning}");
        assert_eq!(
            judge("v1.33.1", Some("1.20")).unwrap(),
            None,
            "no warning where none is due"
        );
        for (found, allowed) in [
            ("v1.20.2", None),
            ("v1.20.2", Some("1.21")),
            ("v1.21.0", Some("1.20")),
            ("v1.20.2", Some("yes")),
            ("unknown", Some("1.20")),
        ] {
            let err = judge(found, allowed).unwrap_err();
            assert_eq!(
                err.code(),
                af_runtime::RunCode::ClusterTooOld,
                "{found} {allowed:?}"
            );
        }
    }

    #[test]
    fn older_and_unreadable_versions_are_refused() {
        assert!(supported("v1.30.0").is_ok());
        assert!(supported("v1.37.1").is_ok());
        assert!(supported("v2.0.0").is_ok());
        for old in ["v1.20.15", "v1.29.9", "v0.99.0", "unknown"] {
            let err = supported(old).unwrap_err();
            assert_eq!(err.code(), af_runtime::RunCode::ClusterTooOld, "{old}");
            assert!(err.to_string().contains(old), "{err}");
        }
    }
}
