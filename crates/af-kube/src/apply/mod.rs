//! Applying an environment to a cluster, with kube-rs. Built so far: the fit check against the
//! cluster (nodes and pods read, then [`crate::fit`]'s arithmetic), and the namespace's lifecycle
//! (created labelled as ours, a foreign one refused with AF-RUN-045, one still terminating waited
//! out, deleted and waited for until gone).

pub mod fit;
pub mod namespace;
