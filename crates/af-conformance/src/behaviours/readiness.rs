//! Readiness: the port, the health path, and the one documented difference between runtimes.

use af_runtime::Capability;
use serde_json::Value;

use super::{check, main_env, require};
use crate::behaviour::{Area, Behaviour};
use crate::fixtures;

pub fn all() -> Vec<Behaviour> {
    let b = |name, needs, proves, check| Behaviour {
        name,
        area: Area::Readiness,
        needs,
        proves,
        check,
    };
    vec![
        b(
            "readiness_waits_for_the_port",
            None,
            "a service that opens its port late is not reported ready before it does",
            waits_for_port,
        ),
        b(
            "readiness_polls_the_health_path",
            Some(Capability::HealthPaths),
            "with a health_path, readiness asks the service for it",
            polls_health,
        ),
        b(
            "readiness_any_health_status_counts_locally",
            Some(Capability::AnyStatusIsReady),
            "locally, a health path answering 500 is ready (the process listens and routes)",
            any_status,
        ),
        b(
            "readiness_health_status_must_be_2xx_or_3xx",
            Some(Capability::HealthMustSucceed),
            "where the platform decides readiness (Kubernetes), a health path answering 500 is not ready",
            strict_status,
        ),
    ]
}

check!(waits_for_port, ctx, {
    let id = ctx.id("late-port");
    ctx.up(
        "late-port",
        &fixtures::single(
            ctx.harness.engine_image(),
            &["--listen-after-ms", "3000"],
            "",
        ),
    )
    .await
    .map_err(|e| e.to_string())?;
    // Right after up: the service answers (it would not, had up returned before the port opened).
    let (status, boot) = ctx.agent(&id, "agent", "GET", "/boot", Value::Null).await?;
    require(status == 200, || {
        format!("not answering right after up: {status} {boot}")
    })?;
    Ok("answering the moment up returned".into())
});

check!(polls_health, ctx, {
    let id = main_env(ctx).await?;
    let (_, seen) = ctx.agent(&id, "agent", "GET", "/seen", Value::Null).await?;
    let polled = seen
        .as_array()
        .is_some_and(|requests| requests.iter().any(|r| r == "GET /healthz"));
    require(polled, || {
        format!("the agent was never asked for /healthz: {seen}")
    })?;
    Ok(format!("requests the service saw: {seen}"))
});

check!(any_status, ctx, {
    let id = ctx.id("health-500");
    ctx.up(
        "health-500",
        &fixtures::single(
            ctx.harness.engine_image(),
            &["--health-status", "500"],
            "    health_path: /healthz\n",
        ),
    )
    .await
    .map_err(|e| e.to_string())?;
    let status = super::status(ctx, &id).await?;
    require(status.services.iter().all(|s| s.ready == s.wanted), || {
        format!("{status:?}")
    })?;
    Ok("ready with a health path answering 500".into())
});

check!(strict_status, ctx, {
    let result = ctx
        .up(
            "health-500-strict",
            &fixtures::single(
                ctx.harness.engine_image(),
                &["--health-status", "500"],
                "    health_path: /healthz\n",
            ),
        )
        .await;
    match result {
        Ok(_) => Err("ready with a health path answering 500".into()),
        Err(err) => Ok(format!("not ready: {err}")),
    }
});
