//! Environment ids: the manifest's name plus the environment a person asked for (by default their
//! git branch), turned into a name that is always a valid DNS label and Kubernetes namespace name.

use std::fmt;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Longest id. A namespace is `<namespace_prefix><id>` and must fit in 63 characters, so the prefix
/// gets the rest ([`MAX_NAMESPACE_PREFIX_LEN`]).
pub const MAX_ENVIRONMENT_ID_LEN: usize = 40;

/// Longest `runtime.namespace_prefix`, so that prefix + id always fits a 63-character namespace.
pub const MAX_NAMESPACE_PREFIX_LEN: usize = 63 - MAX_ENVIRONMENT_ID_LEN;

/// Characters of the digest appended when the readable part alone would not identify the
/// environment.
const DIGEST_LEN: usize = 8;

/// A derived environment id: lower-case letters, digits and '-', starting with a letter, at most
/// [`MAX_ENVIRONMENT_ID_LEN`] characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct EnvironmentId(String);

impl EnvironmentId {
    /// Derives the id of environment `env` (free text such as `feature/Login_2`) of the manifest
    /// named `manifest_name` (already a valid label).
    ///
    /// The same inputs always give the same id. When `env` had to be changed to fit (upper case,
    /// '/', '_', length), a digest of the original text is appended, so two branches that differ
    /// only in such characters (`feature/a`, `feature-a`) never share an environment.
    pub fn derive(manifest_name: &str, env: &str) -> EnvironmentId {
        let label = sanitize(env);
        let readable = if label.is_empty() {
            manifest_name.to_string()
        } else {
            format!("{manifest_name}-{label}")
        };
        let exact = label == env && !label.is_empty();
        if exact && readable.len() <= MAX_ENVIRONMENT_ID_LEN {
            return EnvironmentId(readable);
        }
        let digest = hex_digest(manifest_name, env);
        let keep = MAX_ENVIRONMENT_ID_LEN - DIGEST_LEN - 1;
        let head = readable[..readable.len().min(keep)].trim_end_matches('-');
        EnvironmentId(format!("{head}-{}", &digest[..DIGEST_LEN]))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EnvironmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lower case; every run of other characters becomes one '-'; no '-' at either end.
fn sanitize(env: &str) -> String {
    let mut out = String::with_capacity(env.len());
    for c in env.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

fn hex_digest(manifest_name: &str, env: &str) -> String {
    let digest = Sha256::digest(format!("{manifest_name}\n{env}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::label_problem;

    #[test]
    fn simple_names_stay_readable() {
        assert_eq!(EnvironmentId::derive("shop", "main").as_str(), "shop-main");
        assert_eq!(
            EnvironmentId::derive("shop", "pr-42").as_str(),
            "shop-pr-42"
        );
    }

    #[test]
    fn changed_names_get_a_digest_so_they_cannot_collide() {
        let slash = EnvironmentId::derive("shop", "feature/a");
        let dash = EnvironmentId::derive("shop", "feature-a");
        assert_eq!(dash.as_str(), "shop-feature-a");
        assert!(slash.as_str().starts_with("shop-feature-a-"), "{slash}");
        assert_ne!(slash, dash);
    }

    #[test]
    fn deterministic() {
        assert_eq!(
            EnvironmentId::derive("shop", "Feature/Login_2"),
            EnvironmentId::derive("shop", "Feature/Login_2")
        );
    }

    #[test]
    fn always_a_valid_label_within_the_limit() {
        let long = "x".repeat(200);
        let envs = [
            "",
            "-",
            "///",
            "ÄÖÜ",
            "main",
            "a--b",
            long.as_str(),
            "UPPER",
            "end-",
        ];
        for name in ["a", "shop", "a-very-long-application-name-x"] {
            for env in envs {
                let id = EnvironmentId::derive(name, env);
                assert!(id.as_str().len() <= MAX_ENVIRONMENT_ID_LEN, "{id}");
                assert_eq!(
                    label_problem(id.as_str(), MAX_ENVIRONMENT_ID_LEN),
                    None,
                    "{id}"
                );
            }
        }
    }

    #[test]
    fn long_names_keep_their_readable_start() {
        let id = EnvironmentId::derive("shop", &"feature-".repeat(10));
        assert!(id.as_str().starts_with("shop-feature-feature"), "{id}");
        assert_eq!(id.as_str().len(), MAX_ENVIRONMENT_ID_LEN);
    }
}
