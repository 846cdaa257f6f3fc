//! What a push does to one branch, decided before anything is sent: the remote's branch is either
//! absent (push, expecting it still absent), already ours as it is (nothing to send: a push that
//! reached the remote before its worker died is reconciled, not repeated), an earlier commit of
//! ours (push, expecting it still there), or something else — someone else's work, which is
//! never overwritten.

/// The decision for one branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseDecision {
    /// The remote already has the branch at our commit.
    AlreadyThere,
    /// Push with `--force-with-lease=<branch>:<expect>`; `expect` empty means "must not exist".
    Push { expect: String },
    /// The branch holds a commit that is not of our history.
    Refuse,
}

/// `ours` is what we push; `theirs` what the remote has (none: no such branch); `ancestor` whether
/// `theirs` is in the history of `ours`.
pub fn decide_lease(ours: &str, theirs: Option<&str>, ancestor: bool) -> LeaseDecision {
    match theirs {
        None => LeaseDecision::Push {
            expect: String::new(),
        },
        Some(theirs) if theirs == ours => LeaseDecision::AlreadyThere,
        Some(theirs) if ancestor => LeaseDecision::Push {
            expect: theirs.to_string(),
        },
        Some(_) => LeaseDecision::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_table() {
        assert_eq!(
            decide_lease("b", None, false),
            LeaseDecision::Push {
                expect: String::new()
            }
        );
        assert_eq!(
            decide_lease("b", Some("b"), false),
            LeaseDecision::AlreadyThere
        );
        assert_eq!(
            decide_lease("b", Some("a"), true),
            LeaseDecision::Push {
                expect: "a".to_string()
            }
        );
        assert_eq!(decide_lease("b", Some("x"), false), LeaseDecision::Refuse);
    }
}
