//! Services: names, replicas, sizes, migrations, order, cron, builds, failures.

use af_runtime::Capability;
use serde_json::Value;

use super::{check, fetch, main_env, require};
use crate::behaviour::{Area, Behaviour};
use crate::context::Ctx;
use crate::fixtures;

pub fn all() -> Vec<Behaviour> {
    let b = |name, needs, proves, check| Behaviour {
        name,
        area: Area::Services,
        needs,
        proves,
        check,
    };
    vec![
        b(
            "services_resolve_each_other_by_name",
            None,
            "a service reaches another by its name (http://peer:8080), directly",
            resolve_by_name,
        ),
        b(
            "services_replicas_all_ready",
            None,
            "replicas: 2 is two ready instances",
            replicas,
        ),
        b(
            "services_resources_applied_and_read_back",
            None,
            "cpu and memory are applied to the running instances, as the platform reports them",
            resources,
        ),
        b(
            "services_unsized_service_gets_no_limits",
            None,
            "a service that names no size runs with none, not with zero",
            no_sizes,
        ),
        b(
            "services_get_the_sidecar_as_proxy_and_each_other_as_no_proxy",
            None,
            "every service's HTTP_PROXY is the sidecar, and NO_PROXY names the other services",
            proxy_settings,
        ),
        b(
            "services_migration_runs_before_its_service",
            Some(Capability::Migrations),
            "a service's migration has finished before its first instance starts",
            migration_first,
        ),
        b(
            "services_depends_on_orders_start",
            None,
            "a service starts only after the services it depends on are ready",
            depends_on,
        ),
        b(
            "services_migration_runs_once",
            Some(Capability::Migrations),
            "an up that keeps the service does not run its migration again",
            migration_once,
        ),
        b(
            "services_failed_migration_stops_up_and_is_never_retried",
            Some(Capability::Migrations),
            "a failing migration stops up, naming the migration; it ran once and its service never started",
            migration_fails,
        ),
        b(
            "services_cron_runs_on_its_schedule",
            Some(Capability::CronSchedules),
            "a cron service's command runs on the schedule (every minute here)",
            cron_runs,
        ),
        b(
            "services_built_from_their_context",
            None,
            "a service with build: runs the image built from its context",
            built,
        ),
        b(
            "services_failed_build_names_the_service",
            None,
            "an image that fails to build stops up with the service's name and the builder's message",
            failed_build,
        ),
        b(
            "services_exiting_service_fails_up_with_its_cause",
            None,
            "a service that exits stops up with the service, its exit and its last log lines",
            exits,
        ),
    ]
}

async fn ordering_env(ctx: &Ctx<'_>) -> Result<af_manifest::EnvironmentId, String> {
    ctx.shared("order", &fixtures::ordering(ctx.harness.engine_image()))
        .await
}

async fn marks(ctx: &Ctx<'_>, id: &af_manifest::EnvironmentId) -> Result<Vec<String>, String> {
    let (_, marks) = ctx
        .agent(id, "ledger", "GET", "/marks", Value::Null)
        .await?;
    serde_json::from_value(marks.clone()).map_err(|e| format!("{e}: {marks}"))
}

fn position(marks: &[String], name: &str) -> Option<usize> {
    marks.iter().position(|m| m == name)
}

check!(resolve_by_name, ctx, {
    let id = main_env(ctx).await?;
    let answer = fetch(ctx, &id, "agent", "http://peer:8080/boot", false).await?;
    require(answer["status"] == 200, || {
        format!("agent → http://peer:8080: {answer}")
    })?;
    Ok(format!("peer answered: {}", answer["body"]))
});

check!(replicas, ctx, {
    let id = main_env(ctx).await?;
    let peer = super::service_status(ctx, &id, "peer").await?;
    require(peer.ready == 2 && peer.wanted == 2, || {
        format!("peer {}/{}", peer.ready, peer.wanted)
    })?;
    Ok("peer 2/2 ready".into())
});

check!(resources, ctx, {
    let id = main_env(ctx).await?;
    let peer = super::service_status(ctx, &id, "peer").await?;
    require(peer.applied_cpu_millis == Some(250), || {
        format!("cpu {:?}", peer.applied_cpu_millis)
    })?;
    require(peer.applied_memory_bytes == Some(64 << 20), || {
        format!("memory {:?}", peer.applied_memory_bytes)
    })?;
    Ok("250m and 64Mi read back off the running instances".into())
});

check!(no_sizes, ctx, {
    let id = main_env(ctx).await?;
    let agent = super::service_status(ctx, &id, "agent").await?;
    require(
        agent.applied_cpu_millis.is_none() && agent.applied_memory_bytes.is_none(),
        || {
            format!(
                "an unsized service runs with {:?} / {:?}",
                agent.applied_cpu_millis, agent.applied_memory_bytes
            )
        },
    )?;
    Ok("no cpu, no memory limit".into())
});

check!(proxy_settings, ctx, {
    let id = main_env(ctx).await?;
    let (_, proxy) = ctx
        .agent(&id, "agent", "GET", "/env/HTTP_PROXY", Value::Null)
        .await?;
    let (_, no_proxy) = ctx
        .agent(&id, "agent", "GET", "/env/NO_PROXY", Value::Null)
        .await?;
    let proxy = proxy["value"].as_str().unwrap_or_default().to_string();
    let no_proxy = no_proxy["value"].as_str().unwrap_or_default().to_string();
    require(proxy.starts_with("http://"), || {
        format!("HTTP_PROXY is {proxy:?}")
    })?;
    require(no_proxy.split(',').any(|h| h == "peer"), || {
        format!("NO_PROXY is {no_proxy:?}")
    })?;
    // The proxy named is the one that decides: a request through it to an unlisted host is denied.
    let denied = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{}/", fixtures::DENIED_NAME),
        true,
    )
    .await?;
    require(denied["status"] == 403, || {
        format!("through {proxy}: {denied}")
    })?;
    Ok(format!("HTTP_PROXY={proxy}, NO_PROXY={no_proxy}"))
});

check!(migration_first, ctx, {
    let id = ordering_env(ctx).await?;
    let marks = marks(ctx, &id).await?;
    match (position(&marks, "migrate-b"), position(&marks, "b")) {
        (Some(m), Some(s)) if m < s => Ok(format!("marks {marks:?}")),
        _ => Err(format!(
            "the migration did not finish before the service started: {marks:?}"
        )),
    }
});

check!(depends_on, ctx, {
    let id = ordering_env(ctx).await?;
    let marks = marks(ctx, &id).await?;
    match (position(&marks, "b"), position(&marks, "c")) {
        (Some(b), Some(c)) if b < c => Ok(format!("marks {marks:?}")),
        _ => Err(format!("c did not start after b: {marks:?}")),
    }
});

check!(migration_once, ctx, {
    let id = ordering_env(ctx).await?;
    let again = ctx
        .up("order", &fixtures::ordering(ctx.harness.engine_image()))
        .await
        .map_err(|e| e.to_string())?;
    let marks = marks(ctx, &id).await?;
    let runs = marks.iter().filter(|m| *m == "migrate-b").count();
    require(runs == 1, || {
        format!("the migration ran {runs} times: {marks:?}")
    })?;
    Ok(format!(
        "one run after a second up (unchanged: {})",
        again.unchanged
    ))
});

check!(migration_fails, ctx, {
    let id = ctx.id("failing-migration");
    let result = ctx
        .up(
            "failing-migration",
            &fixtures::failing_migration(ctx.harness.engine_image()),
        )
        .await;
    let err = match result {
        Ok(_) => return Err("up succeeded past a failing migration".into()),
        Err(err) => err.to_string(),
    };
    require(err.contains("migrat") && err.contains("service d"), || {
        format!("the error does not name the migration: {err}")
    })?;
    let marks = marks(ctx, &id).await?;
    let runs = marks.iter().filter(|m| *m == "migrate-d").count();
    require(runs == 1, || {
        format!("the migration ran {runs} times: {marks:?}")
    })?;
    require(position(&marks, "d").is_none(), || {
        format!("the service started: {marks:?}")
    })?;
    Ok(format!(
        "stopped: {}",
        err.lines().next().unwrap_or_default()
    ))
});

check!(cron_runs, ctx, {
    let id = ordering_env(ctx).await?;
    // Every minute: within two minutes of the environment's start a run must have posted.
    for _ in 0..130 {
        let marks = marks(ctx, &id).await?;
        if position(&marks, "tick").is_some() {
            return Ok(format!("marks {marks:?}"));
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Err("no scheduled run in two minutes".into())
});

check!(built, ctx, {
    let context = ctx.harness.scratch_dir().join("built");
    std::fs::create_dir_all(&context).map_err(|e| e.to_string())?;
    std::fs::write(
        context.join("Dockerfile"),
        format!(
            "FROM {}\nENV CONFORMANCE_MARK=built-from-context\n",
            ctx.harness.engine_image()
        ),
    )
    .map_err(|e| e.to_string())?;
    let manifest = "name: afc\nruntime: {provider: local}\nservices:\n  agent:\n    build: ./built\n    args: [agent]\n    port: 8080\n";
    let id = ctx.id("built");
    ctx.up("built", manifest).await.map_err(|e| e.to_string())?;
    let (_, mark) = ctx
        .agent(&id, "agent", "GET", "/env/CONFORMANCE_MARK", Value::Null)
        .await?;
    require(mark["value"] == "built-from-context", || format!("{mark}"))?;
    Ok("the running service carries what its Dockerfile set".into())
});

check!(failed_build, ctx, {
    let context = ctx.harness.scratch_dir().join("broken");
    std::fs::create_dir_all(&context).map_err(|e| e.to_string())?;
    std::fs::write(
        context.join("Dockerfile"),
        "FROM scratch\nCOPY missing-file /nowhere\n",
    )
    .map_err(|e| e.to_string())?;
    let manifest = "name: afc\nruntime: {provider: local}\nservices:\n  brokenservice:\n    build: ./broken\n    port: 8080\n";
    let err = match ctx.up("broken-build", manifest).await {
        Ok(_) => return Err("a broken build came up".into()),
        Err(err) => err.to_string(),
    };
    require(err.contains("brokenservice"), || {
        format!("the service is not named: {err}")
    })?;
    require(err.contains("missing-file"), || {
        format!("the builder's message is not passed on: {err}")
    })?;
    Ok(err.lines().next().unwrap_or_default().to_string())
});

check!(exits, ctx, {
    let manifest = fixtures::manifest(
        "afc",
        ctx.harness.engine_image(),
        &[
            "  quitter:\n    image: IMAGE\n    args: [no-such-subcommand]\n    port: 8080\n"
                .to_string(),
        ],
        "",
    );
    let err = match ctx.up("exits", &manifest).await {
        Ok(_) => return Err("a service that exits came up".into()),
        Err(err) => err.to_string(),
    };
    require(err.contains("quitter"), || {
        format!("the service is not named: {err}")
    })?;
    require(err.contains("no-such-subcommand"), || {
        format!("its last lines are not shown: {err}")
    })?;
    Ok(err.lines().next().unwrap_or_default().to_string())
});
