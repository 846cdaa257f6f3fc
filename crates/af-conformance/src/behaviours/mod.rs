//! The roster: every behaviour, by area. Helpers shared by the areas live here.

use std::collections::BTreeMap;

use af_manifest::EnvironmentId;
use af_runtime::{DecisionQuery, DecisionRecord, EnvironmentStatus, ServiceStatus};
use serde_json::{Value, json};

use crate::behaviour::Behaviour;
use crate::context::Ctx;
use crate::fixtures;
use crate::harness::RouteOutcome;

mod containment;
mod database;
mod egress;
mod lifecycle;
mod readiness;
mod services;

/// Defines a check: `check!(name, ctx, { ... })` is an async function over the context that
/// returns a [`crate::behaviour::CheckResult`].
macro_rules! check {
    ($name:ident, $ctx:ident, $body:block) => {
        fn $name<'a>(
            $ctx: &'a crate::context::Ctx<'a>,
        ) -> futures_util::future::BoxFuture<'a, crate::behaviour::CheckResult> {
            Box::pin(async move { $body })
        }
    };
}
pub(crate) use check;

/// Every behaviour, in the order a run takes them (the shared environments first come up with
/// their first user; the behaviours that stop a sidecar come last).
pub fn roster() -> Vec<Behaviour> {
    [
        lifecycle::all(),
        services::all(),
        readiness::all(),
        egress::all(),
        database::all(),
        containment::all(),
    ]
    .concat()
}

/// `Err(message)` unless `holds`.
pub fn require(holds: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if holds { Ok(()) } else { Err(message()) }
}

/// The shared environment most behaviours use.
pub async fn main_env(ctx: &Ctx<'_>) -> Result<EnvironmentId, String> {
    ctx.shared("main", &fixtures::main(ctx.harness.engine_image()))
        .await
}

fn outcomes(results: Vec<RouteOutcome>) -> BTreeMap<String, String> {
    results.into_iter().map(|r| (r.route, r.outcome)).collect()
}

/// `routes` tried from inside `service` of `id`: route name → outcome.
pub async fn try_inside(
    ctx: &Ctx<'_>,
    id: &EnvironmentId,
    service: &str,
    routes: &[String],
) -> Result<BTreeMap<String, String>, String> {
    let (status, answer) = ctx
        .agent(id, service, "POST", "/try", json!({ "routes": routes }))
        .await?;
    require(status == 200, || {
        format!("the agent refused /try: {answer}")
    })?;
    let results: Vec<RouteOutcome> =
        serde_json::from_value(answer.clone()).map_err(|e| format!("{e}: {answer}"))?;
    Ok(outcomes(results))
}

/// `routes` tried by the harness's permitted client: route name → outcome.
pub async fn try_outside(
    ctx: &Ctx<'_>,
    routes: &[String],
) -> Result<BTreeMap<String, String>, String> {
    Ok(outcomes(ctx.harness.try_from_outside(routes).await?))
}

/// What has reached the outside hosts that count (by address).
type Counted = BTreeMap<String, af_docker::test_hosts::Arrivals>;

/// The outside hosts' counters once what `routes` sent them is all in: at least `before` plus
/// what the routes add. A host counts a connection as its server accepts it, a moment after the
/// client saw it established, so the counters are asked again (for up to 10 s) until they show
/// it; `Err` says which host never did — the positive control did not land.
pub async fn landed(ctx: &Ctx<'_>, before: &Counted, routes: &[String]) -> Result<Counted, String> {
    let expected = crate::outside::expected_arrivals(routes);
    // Only hosts that count: a route to anything else is judged by its answer alone.
    let all_in = |now: &Counted| {
        expected.iter().all(|(host, add)| match now.get(host) {
            None => true,
            Some(is) => {
                let was = before.get(host).copied().unwrap_or_default();
                is.connections >= was.connections + add.connections
                    && is.dns_queries >= was.dns_queries + add.dns_queries
            }
        })
    };
    let mut now = ctx.harness.outside_hosts().arrivals().await?;
    for _ in 0..100 {
        if all_in(&now) {
            return Ok(now);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        now = ctx.harness.outside_hosts().arrivals().await?;
    }
    Err(format!(
        "positive control: what the permitted client sent never arrived at the outside hosts: before {before:?}, now {now:?}, expected more by {expected:?}"
    ))
}

/// Requires that nothing arrived at any outside host since `settled`: asked at once and again
/// half a second later, so that a connection accepted a moment late is seen too.
pub async fn nothing_arrived(ctx: &Ctx<'_>, settled: &Counted, what: &str) -> Result<(), String> {
    for wait in [0, 500] {
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        let now = ctx.harness.outside_hosts().arrivals().await?;
        require(&now == settled, || {
            format!("{what} arrived at an outside host: before {settled:?}, after {now:?}")
        })?;
    }
    Ok(())
}

/// The core of most containment behaviours: every route escapes for the permitted client (so
/// its listener answers, and what it sent is counted where it landed), and is denied from inside
/// a running service of the main environment — judged at the outside hosts, which counted
/// nothing of it, as well as by the outcome the service saw.
pub async fn contained(ctx: &Ctx<'_>, routes: &[String]) -> Result<String, String> {
    let before = ctx.harness.outside_hosts().arrivals().await?;
    let open = try_outside(ctx, routes).await?;
    for route in routes {
        let name = route.split('=').next().unwrap_or_default();
        require(
            open.get(name).map(String::as_str) == Some("escaped"),
            || format!("positive control: {name} did not answer a permitted client: {open:?}"),
        )?;
    }
    let settled = landed(ctx, &before, routes).await?;
    let id = main_env(ctx).await?;
    let inside = try_inside(ctx, &id, "agent", routes).await?;
    for route in routes {
        let name = route.split('=').next().unwrap_or_default();
        require(
            inside.get(name).map(String::as_str) == Some("denied"),
            || format!("{name} from inside a service: {inside:?}"),
        )?;
    }
    nothing_arrived(ctx, &settled, "a route tried from inside a service").await?;
    Ok(format!(
        "permitted client: {open:?}; from inside: {inside:?}; nothing arrived outside"
    ))
}

/// The environment's status, as the runtime reports it.
pub async fn status(ctx: &Ctx<'_>, id: &EnvironmentId) -> Result<EnvironmentStatus, String> {
    ctx.harness
        .runtime()
        .status(id)
        .await
        .map_err(|e| e.to_string())
}

/// One service's status.
pub async fn service_status(
    ctx: &Ctx<'_>,
    id: &EnvironmentId,
    name: &str,
) -> Result<ServiceStatus, String> {
    status(ctx, id)
        .await?
        .services
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("status has no service {name}"))
}

/// Every decision the environment's sidecar recorded.
pub async fn decisions(ctx: &Ctx<'_>, id: &EnvironmentId) -> Result<Vec<DecisionRecord>, String> {
    ctx.harness
        .runtime()
        .net_log(id, &DecisionQuery::default())
        .await
        .map_err(|e| e.to_string())
}

/// A fetch by the agent of `service` in `id`: `{"status", "body"}` or `{"error"}`.
pub async fn fetch(
    ctx: &Ctx<'_>,
    id: &EnvironmentId,
    service: &str,
    url: &str,
    via_proxy: bool,
) -> Result<Value, String> {
    let (_, answer) = ctx
        .agent(
            id,
            service,
            "POST",
            "/fetch",
            json!({"url": url, "via_proxy": via_proxy}),
        )
        .await?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roster_is_large_named_once_and_never_lets_containment_be_skipped() {
        let roster = roster();
        assert!(roster.len() >= 40, "{} behaviours", roster.len());
        let mut names: Vec<&str> = roster.iter().map(|b| b.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a name twice");
        for behaviour in &roster {
            assert!(
                !(behaviour.is_containment() && behaviour.needs.is_some()),
                "{} is containment and names a capability",
                behaviour.name
            );
            assert!(
                !behaviour.proves.is_empty(),
                "{} says what it proves",
                behaviour.name
            );
        }
        assert!(
            roster
                .iter()
                .any(|b| b.name == crate::behaviour::IMMEDIATE_STARTUP_PROOF && b.is_containment())
        );
    }
}
