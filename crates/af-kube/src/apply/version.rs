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

/// Reads the API server's version and checks it.
pub async fn check(client: &kube::Client) -> Result<(), RuntimeError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(|e| crate::error::api("reading the API server's version", e))?;
    supported(&info.git_version)
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
