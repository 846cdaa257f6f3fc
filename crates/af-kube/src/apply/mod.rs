//! Applying an environment to a cluster, with kube-rs. Built so far: the fit check against the
//! cluster (nodes and pods read, then [`crate::fit`]'s arithmetic); the namespace's lifecycle
//! (created labelled as ours, a foreign one refused with AF-RUN-045, one still terminating waited
//! out, deleted and waited for until gone); the containment probe Pod (run, verdict read and
//! judged as on every runtime, an unpullable image said at once).

pub mod fit;
pub mod namespace;
pub mod probe;
