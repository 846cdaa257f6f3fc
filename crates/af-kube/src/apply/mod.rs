//! Applying an environment to a cluster, with kube-rs. Built so far: the fit check against the
//! cluster (nodes and pods read, then [`crate::fit`]'s arithmetic); the namespace's lifecycle
//! (created labelled as ours, a foreign one refused with AF-RUN-045, one still terminating waited
//! out, deleted and waited for until gone); the containment probe Pod (run, verdict read and
//! judged as on every runtime, an unpullable image said at once); migration Jobs (applied, waited
//! for, a failure carrying the migration's last lines); removing what the manifest no longer has.

pub mod cluster;
pub mod fit;
pub mod job;
pub mod namespace;
pub mod objects;
pub mod probe;
pub mod prune;
pub mod published;
pub mod readiness;
pub mod version;

/// The field manager of every server-side apply: one, so a second `up` owns what the first set.
pub const FIELD_MANAGER: &str = "af";

/// How long, and how often, something the cluster does is waited for.
#[derive(Clone, Copy, Debug)]
pub struct Patience {
    pub timeout: std::time::Duration,
    pub interval: std::time::Duration,
}

impl Default for Patience {
    fn default() -> Patience {
        Patience {
            timeout: std::time::Duration::from_secs(300),
            interval: std::time::Duration::from_secs(1),
        }
    }
}
