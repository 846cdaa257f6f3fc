//! Opening a ticket's sandbox is idempotent: what exists for the ticket is reused while its
//! signature is the one wanted and it is usable, and recreated otherwise.

/// What an adapter found of a ticket's sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Existing {
    /// The signature it was made with (its label).
    pub signature: String,
    /// Whether it still runs.
    pub running: bool,
}

/// What to do to open a ticket's sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenAction {
    /// It exists, runs, and is made as wanted: use it as it is.
    Reuse,
    /// It exists but is made otherwise, or stopped: remove it (workspace included) and create it.
    Recreate,
    /// There is none: create it.
    Create,
}

/// The decision for a ticket whose sandbox should have `wanted` as its signature.
pub fn decide(existing: Option<&Existing>, wanted: &str) -> OpenAction {
    match existing {
        None => OpenAction::Create,
        Some(found) if found.running && found.signature == wanted => OpenAction::Reuse,
        Some(_) => OpenAction::Recreate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_is_reused_only_while_it_runs_as_wanted() {
        let found = |signature: &str, running| Existing {
            signature: signature.into(),
            running,
        };
        assert_eq!(decide(None, "a"), OpenAction::Create);
        assert_eq!(decide(Some(&found("a", true)), "a"), OpenAction::Reuse);
        assert_eq!(decide(Some(&found("b", true)), "a"), OpenAction::Recreate);
        assert_eq!(
            decide(Some(&found("a", false)), "a"),
            OpenAction::Recreate,
            "a stopped sandbox is not resumed: what ran in it may have been cut"
        );
    }
}
