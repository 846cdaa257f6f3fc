//! Which behaviours a run runs and which it skips, decided before anything runs. A run that would
//! skip a containment behaviour — for a missing capability or by the selection knob — is refused:
//! a runtime must not be able to declare its way out of containment.

use af_runtime::Capabilities;

use crate::behaviour::Behaviour;

/// What happens to one behaviour in a run.
#[derive(Clone, Debug)]
pub enum Planned {
    Run(Behaviour),
    Skip(Behaviour, String),
}

impl Planned {
    pub fn behaviour(&self) -> &Behaviour {
        match self {
            Planned::Run(b) | Planned::Skip(b, _) => b,
        }
    }
}

/// Narrowing a run to some behaviours (for a quick local iteration). Containment behaviours are
/// never narrowed away.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Run only the behaviours whose name contains one of these (all when empty).
    pub only: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum PlanError {
    /// These containment behaviours would have been skipped.
    ContainmentSkipped(Vec<String>),
    /// A selection that matches nothing on the roster.
    UnknownSelection(String),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::ContainmentSkipped(names) => write!(
                f,
                "refusing a run that would skip containment behaviours ({}): containment cannot be skipped by a capability or a selection",
                names.join(", ")
            ),
            PlanError::UnknownSelection(text) => {
                write!(f, "--only {text:?} matches no behaviour on the roster")
            }
        }
    }
}

pub fn plan(
    roster: &[Behaviour],
    capabilities: &Capabilities,
    selection: &Selection,
) -> Result<Vec<Planned>, PlanError> {
    if let Some(unknown) = selection
        .only
        .iter()
        .find(|text| !roster.iter().any(|b| b.name.contains(text.as_str())))
    {
        return Err(PlanError::UnknownSelection(unknown.clone()));
    }
    let planned: Vec<Planned> = roster
        .iter()
        .map(|behaviour| {
            let unsupported = behaviour
                .needs
                .filter(|needed| !capabilities.supports(*needed));
            let selected = selection.only.is_empty()
                || selection
                    .only
                    .iter()
                    .any(|text| behaviour.name.contains(text.as_str()));
            match (unsupported, selected) {
                (Some(needed), _) => Planned::Skip(
                    *behaviour,
                    format!(
                        "the {} runtime does not support {}",
                        capabilities.runtime(),
                        needed.describe()
                    ),
                ),
                (None, false) => Planned::Skip(*behaviour, "not selected (--only)".to_string()),
                (None, true) => Planned::Run(*behaviour),
            }
        })
        .collect();
    let skipped_containment: Vec<String> = planned
        .iter()
        .filter_map(|p| match p {
            Planned::Skip(b, _) if b.is_containment() => Some(b.name.to_string()),
            _ => None,
        })
        .collect();
    if skipped_containment.is_empty() {
        Ok(planned)
    } else {
        Err(PlanError::ContainmentSkipped(skipped_containment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::behaviour::{Area, CheckResult};
    use crate::context::Ctx;
    use af_runtime::Capability;
    use futures_util::future::BoxFuture;

    fn passes<'a>(_: &'a Ctx<'a>) -> BoxFuture<'a, CheckResult> {
        Box::pin(async { Ok(String::new()) })
    }

    fn behaviour(name: &'static str, area: Area, needs: Option<Capability>) -> Behaviour {
        Behaviour {
            name,
            area,
            needs,
            proves: "",
            check: passes,
        }
    }

    fn roster() -> Vec<Behaviour> {
        vec![
            behaviour("lifecycle_up", Area::Lifecycle, None),
            behaviour(
                "readiness_strict",
                Area::Readiness,
                Some(Capability::AnyStatusIsReady),
            ),
            behaviour("containment_e1", Area::Containment, None),
        ]
    }

    fn names(planned: &[Planned]) -> Vec<(String, bool)> {
        planned
            .iter()
            .map(|p| (p.behaviour().name.to_string(), matches!(p, Planned::Run(_))))
            .collect()
    }

    #[test]
    fn a_missing_capability_skips_by_name() {
        let local = Capabilities::new("local", []);
        let planned = plan(&roster(), &local, &Selection::default()).unwrap();
        assert_eq!(
            names(&planned),
            [
                ("lifecycle_up".into(), true),
                ("readiness_strict".into(), false),
                ("containment_e1".into(), true)
            ]
        );
        let Planned::Skip(_, reason) = &planned[1] else {
            panic!()
        };
        assert!(
            reason.contains("the local runtime does not support"),
            "{reason}"
        );
    }

    #[test]
    fn containment_cannot_be_skipped_by_a_capability() {
        let mut roster = roster();
        roster[2].needs = Some(Capability::NetLog);
        let err = plan(&roster, &Capabilities::new("k", []), &Selection::default()).unwrap_err();
        assert_eq!(
            err,
            PlanError::ContainmentSkipped(vec!["containment_e1".into()])
        );
    }

    #[test]
    fn containment_cannot_be_skipped_by_the_selection() {
        let only_lifecycle = Selection {
            only: vec!["lifecycle".into()],
        };
        let err = plan(&roster(), &Capabilities::new("local", []), &only_lifecycle).unwrap_err();
        assert_eq!(
            err,
            PlanError::ContainmentSkipped(vec!["containment_e1".into()])
        );
        // Selecting containment too is fine: the rest is skipped by name.
        let both = Selection {
            only: vec!["lifecycle".into(), "containment".into()],
        };
        let planned = plan(&roster(), &Capabilities::new("local", []), &both).unwrap();
        assert_eq!(
            names(&planned),
            [
                ("lifecycle_up".into(), true),
                ("readiness_strict".into(), false),
                ("containment_e1".into(), true)
            ]
        );
        let nothing = Selection {
            only: vec!["nonesuch".into()],
        };
        assert!(matches!(
            plan(&roster(), &Capabilities::new("local", []), &nothing),
            Err(PlanError::UnknownSelection(_))
        ));
    }
}
