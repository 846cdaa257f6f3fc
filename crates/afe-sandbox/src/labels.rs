//! What marks a sandbox as a ticket's, set when it is created and readable by anything that can
//! list the platform's objects — the reaper (a later issue) finds sandboxes without the store.

/// The ticket a sandbox (and its volume) belongs to; everything of a ticket is removed by it.
pub const TICKET: &str = "afe.ticket";
/// Who manages it, in Kubernetes' recommended label.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "afe");
/// The signature it was made with ([`crate::SandboxSpec::signature`]).
pub const SIGNATURE: &str = "afe.signature";
/// Its lifecycle state when it was made (always `open`; where a platform's labels cannot change,
/// the adapter keeps the current state and heartbeat beside them: [`crate::Lifecycle`]).
pub const STATE: &str = "afe.state";
/// Which part of the ticket's sandbox an object is (an adapter may make several: a container for
/// the ticket's commands, one holding its network, its proxy).
pub const ROLE: &str = "afe.role";

/// The labels of `ticket`'s sandbox made with `signature`.
pub fn for_ticket(ticket: &str, signature: &str) -> Vec<(String, String)> {
    vec![
        (TICKET.to_string(), ticket.to_string()),
        (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
        (SIGNATURE.to_string(), signature.to_string()),
        (STATE.to_string(), "open".to_string()),
    ]
}

/// The annotation a platform that can change them (Kubernetes) keeps the lifecycle marker in
/// ([`crate::Marker`], JSON), on the sandbox and its volume: what a reaper reads.
pub const LIFECYCLE: &str = "afe.dev/lifecycle";
