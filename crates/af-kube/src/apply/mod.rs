//! Applying an environment to a cluster, with kube-rs. Only the namespace's lifecycle is built so
//! far: creating it labelled as ours (refusing one that is not, AF-RUN-045), waiting out one still
//! terminating, and deleting it and waiting until it is gone.

pub mod namespace;
