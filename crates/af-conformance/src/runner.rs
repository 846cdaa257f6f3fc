//! Runs a plan: each behaviour in turn, bounded in time, a record for each — passed, failed (with
//! what was seen), or skipped (with why). A behaviour that panics or overruns fails; it does not
//! stop the run.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use crate::context::Ctx;
use crate::plan::Planned;
use crate::record::{Record, Verdict};

/// Long enough for the slowest behaviour (a cron run waits up to two minutes); a bound, not a
/// performance claim.
const BEHAVIOUR_DEADLINE: Duration = Duration::from_secs(240);

pub async fn run(
    ctx: &Ctx<'_>,
    planned: &[Planned],
    runtime: &str,
    mut on_record: impl FnMut(&Record),
) -> Vec<Record> {
    let mut records = Vec::with_capacity(planned.len());
    for step in planned {
        let behaviour = step.behaviour();
        let started = Instant::now();
        let (verdict, detail) = match step {
            Planned::Skip(_, why) => (Verdict::Skipped, why.clone()),
            Planned::Run(_) => {
                let checked = AssertUnwindSafe((behaviour.check)(ctx)).catch_unwind();
                match tokio::time::timeout(BEHAVIOUR_DEADLINE, checked).await {
                    Ok(Ok(Ok(seen))) => (Verdict::Passed, seen),
                    Ok(Ok(Err(seen))) => (Verdict::Failed, seen),
                    Ok(Err(_)) => (Verdict::Failed, "the check panicked".to_string()),
                    Err(_) => (
                        Verdict::Failed,
                        format!("did not finish within {} s", BEHAVIOUR_DEADLINE.as_secs()),
                    ),
                }
            }
        };
        let record = Record {
            name: behaviour.name.to_string(),
            runtime: runtime.to_string(),
            run: ctx.run.clone(),
            verdict,
            containment: behaviour.is_containment(),
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            detail,
        };
        on_record(&record);
        records.push(record);
    }
    records
}
