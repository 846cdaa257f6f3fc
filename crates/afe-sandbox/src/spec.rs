//! What a ticket's sandbox is made from. Its signature — image, limits, the names of the
//! environment variables it gets, its egress — decides whether an existing sandbox is the one the
//! ticket wants: unchanged, it is reused; changed, it is recreated. The variables' values are not
//! in the signature (a rotated secret does not throw a workspace away), and never in a label.

use std::collections::BTreeMap;
use std::fmt::Write;

use af_manifest::HostRule;
use sha2::{Digest, Sha256};

/// A ticket's sandbox.
#[derive(Clone, PartialEq)]
pub struct SandboxSpec {
    /// The ticket's id, as the store keeps it.
    pub ticket: String,
    pub image: String,
    /// CPUs (`sandbox.cpus`); none: no limit.
    pub cpus: Option<f64>,
    /// Memory in bytes (`sandbox.memory`); none: no limit.
    pub memory_bytes: Option<u64>,
    /// The variables the sandbox's processes get: only those the flow names, name → value.
    pub env: BTreeMap<String, String>,
    /// The hosts its proxy lets through (`sandbox.egress`); empty: no proxy, nothing leaves.
    pub egress: Vec<HostRule>,
    /// The RuntimeClass the flow names (Kubernetes; Kata, say); none: the platform's default.
    pub runtime_class: Option<String>,
}

impl std::fmt::Debug for SandboxSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the variables' values: they may be secrets.
        f.debug_struct("SandboxSpec")
            .field("ticket", &self.ticket)
            .field("image", &self.image)
            .field("cpus", &self.cpus)
            .field("memory_bytes", &self.memory_bytes)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("egress", &self.egress)
            .field("runtime_class", &self.runtime_class)
            .finish()
    }
}

impl SandboxSpec {
    /// The signature: 16 hex digits of the SHA-256 of the canonical JSON of the image, the limits,
    /// the sorted variable names, the sorted egress rules and the runtime class when one is named
    /// (left out otherwise, so a sandbox made before the field existed keeps its signature).
    /// Short enough for a label.
    pub fn signature(&self) -> String {
        let mut egress: Vec<String> = self.egress.iter().map(ToString::to_string).collect();
        egress.sort();
        egress.dedup();
        // Keys written in sorted order: the text is the same whether JSON maps sort their keys
        // or keep their insertion order (serde_json's `preserve_order`, which a dependency of
        // the workspace turns on).
        let mut canonical = serde_json::json!({
            "cpus": self.cpus,
            "egress": egress,
            "env": self.env.keys().collect::<Vec<_>>(),
            "image": self.image,
            "memory_bytes": self.memory_bytes,
        })
        .to_string();
        if let Some(class) = &self.runtime_class {
            // Sorted after every other key, as a JSON object with sorted keys writes it.
            canonical.pop();
            canonical.push_str(&format!(
                ",\"runtime_class\":{}}}",
                serde_json::Value::from(class.as_str())
            ));
        }
        let digest = Sha256::digest(canonical.as_bytes());
        let mut out = String::with_capacity(16);
        for byte in &digest[..8] {
            let _ = write!(out, "{byte:02x}");
        }
        out
    }

    /// Whether the sandbox gets a proxy: only with egress. Without, nothing leaves at all.
    pub fn has_egress(&self) -> bool {
        !self.egress.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        SandboxSpec {
            ticket: "t-1".into(),
            image: "afe/sandbox:1".into(),
            cpus: Some(2.0),
            memory_bytes: Some(4 << 30),
            env: BTreeMap::from([("API_KEY".to_string(), "s3cret".to_string())]),
            egress: vec![
                af_manifest::parse_host_rule("pypi.org").unwrap(),
                af_manifest::parse_host_rule("*.pythonhosted.org").unwrap(),
            ],
            runtime_class: None,
        }
    }

    #[test]
    fn the_signature_changes_with_what_makes_the_sandbox_and_only_with_that() {
        let base = spec();
        let signature = base.signature();
        assert_eq!(signature.len(), 16);
        let same = |change: &dyn Fn(&mut SandboxSpec)| {
            let mut other = base.clone();
            change(&mut other);
            other.signature() == signature
        };
        assert!(
            same(&|s| s.ticket = "t-2".into()),
            "the ticket is not the sandbox's make"
        );
        assert!(
            same(&|s| {
                s.env.insert("API_KEY".into(), "rotated".into());
            }),
            "a variable's value is not in the signature"
        );
        assert!(
            same(&|s| s.egress.reverse()),
            "egress order does not matter"
        );
        assert!(!same(&|s| s.image = "afe/sandbox:2".into()));
        assert!(!same(&|s| s.cpus = Some(1.0)));
        assert!(!same(&|s| s.memory_bytes = None));
        assert!(!same(&|s| {
            s.env.insert("OTHER".into(), "x".into());
        }));
        assert!(!same(&|s| s.egress.pop().map(drop).unwrap_or(())));
        assert!(!same(&|s| s.runtime_class = Some("kata".into())));
    }

    #[test]
    fn values_never_show_in_debug_output() {
        let text = format!("{:?}", spec());
        assert!(
            text.contains("API_KEY") && !text.contains("s3cret"),
            "{text}"
        );
    }
}
