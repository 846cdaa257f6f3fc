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

/// The core of most containment behaviours: every route escapes for the permitted client (so
/// its listener answers), and is denied from inside a running service of the main environment.
pub async fn contained(ctx: &Ctx<'_>, routes: &[String]) -> Result<String, String> {
    let open = try_outside(ctx, routes).await?;
    for route in routes {
        let name = route.split('=').next().unwrap_or_default();
        require(
            open.get(name).map(String::as_str) == Some("escaped"),
            || format!("positive control: {name} did not answer a permitted client: {open:?}"),
        )?;
    }
    let id = main_env(ctx).await?;
    let inside = try_inside(ctx, &id, "agent", routes).await?;
    for route in routes {
        let name = route.split('=').next().unwrap_or_default();
        require(
            inside.get(name).map(String::as_str) == Some("denied"),
            || format!("{name} from inside a service: {inside:?}"),
        )?;
    }
    Ok(format!(
        "permitted client: {open:?}; from inside: {inside:?}"
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
