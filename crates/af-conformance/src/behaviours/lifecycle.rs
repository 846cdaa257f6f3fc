//! Lifecycle: up, idempotent up, changes, down, and objects that are not ours.

use af_runtime::RunCode;
use serde_json::Value;

use super::{check, require};
use crate::behaviour::{Area, Behaviour};
use crate::fixtures;

pub fn all() -> Vec<Behaviour> {
    let b = |name, proves, check| Behaviour {
        name,
        area: Area::Lifecycle,
        needs: None,
        proves,
        check,
    };
    vec![
        b(
            "lifecycle_up_brings_every_service_ready",
            "af up returns only once every instance of every service is ready, and status says so",
            up_ready,
        ),
        b(
            "lifecycle_up_again_changes_nothing",
            "a second up of the same manifest leaves every instance as it was and says nothing changed",
            up_again,
        ),
        b(
            "lifecycle_changed_service_is_replaced_and_others_kept",
            "a changed manifest replaces only the service that changed",
            changed_service,
        ),
        b(
            "lifecycle_removed_service_goes",
            "a service taken out of the manifest is removed by the next up",
            removed_service,
        ),
        b(
            "lifecycle_down_removes_every_labelled_object",
            "down leaves no object carrying the environment's label",
            down_removes,
        ),
        b(
            "lifecycle_down_returns_only_when_gone",
            "when down returns, status already finds nothing",
            down_waits,
        ),
        b(
            "lifecycle_foreign_object_refused_by_up",
            "an object with the environment's name and without our label is refused by up (AF-RUN-045) and left untouched",
            foreign_up,
        ),
        b(
            "lifecycle_foreign_object_refused_by_down",
            "down refuses (AF-RUN-045) and leaves alone an object with our name and without our label",
            foreign_down,
        ),
        b(
            "lifecycle_down_of_an_absent_environment_succeeds",
            "down of an environment that does not exist succeeds and creates nothing",
            down_absent,
        ),
    ]
}

fn two_agents(image: &str, marker: &str) -> String {
    fixtures::manifest(
        "afc",
        image,
        &[
            fixtures::agent("agent", &[], ""),
            fixtures::agent("other", &[], &format!("    env: {{MARKER: {marker}}}\n")),
        ],
        "",
    )
}

async fn boot(
    ctx: &crate::context::Ctx<'_>,
    id: &af_manifest::EnvironmentId,
    service: &str,
) -> Result<Value, String> {
    Ok(ctx.agent(id, service, "GET", "/boot", Value::Null).await?.1["boot"].clone())
}

check!(up_ready, ctx, {
    let id = ctx.id("lc-ready");
    let report = ctx
        .up("lc-ready", &two_agents(ctx.harness.engine_image(), "one"))
        .await
        .map_err(|e| e.to_string())?;
    let status = super::status(ctx, &id).await?;
    require(status.services.len() == 2, || format!("{status:?}"))?;
    for service in &status.services {
        require(
            service.ready == service.wanted && service.wanted == 1,
            || {
                format!(
                    "{} is {}/{} ready",
                    service.name, service.ready, service.wanted
                )
            },
        )?;
    }
    // Ready means answering: each agent answers at once.
    for service in ["agent", "other"] {
        require(boot(ctx, &id, service).await?.is_string(), || {
            format!("{service} has no boot id")
        })?;
    }
    Ok(format!(
        "{} services ready; up reported {:?}",
        status.services.len(),
        report.status.services.len()
    ))
});

check!(up_again, ctx, {
    let image = ctx.harness.engine_image();
    let id = ctx.id("lc-again");
    ctx.up("lc-again", &two_agents(image, "one"))
        .await
        .map_err(|e| e.to_string())?;
    let before = boot(ctx, &id, "agent").await?;
    let again = ctx
        .up("lc-again", &two_agents(image, "one"))
        .await
        .map_err(|e| e.to_string())?;
    let after = boot(ctx, &id, "agent").await?;
    require(again.unchanged, || {
        "the second up says it changed something".into()
    })?;
    require(before == after, || {
        format!("the instance was replaced: {before} -> {after}")
    })?;
    Ok(format!("unchanged; agent boot {before} kept"))
});

check!(changed_service, ctx, {
    let image = ctx.harness.engine_image();
    let id = ctx.id("lc-change");
    ctx.up("lc-change", &two_agents(image, "one"))
        .await
        .map_err(|e| e.to_string())?;
    let (agent_before, other_before) = (
        boot(ctx, &id, "agent").await?,
        boot(ctx, &id, "other").await?,
    );
    let changed = ctx
        .up("lc-change", &two_agents(image, "two"))
        .await
        .map_err(|e| e.to_string())?;
    let (agent_after, other_after) = (
        boot(ctx, &id, "agent").await?,
        boot(ctx, &id, "other").await?,
    );
    require(!changed.unchanged, || "up says nothing changed".into())?;
    require(agent_before == agent_after, || {
        "the unchanged service was replaced".into()
    })?;
    require(other_before != other_after, || {
        "the changed service was not replaced".into()
    })?;
    let (_, marker) = ctx
        .agent(&id, "other", "GET", "/env/MARKER", Value::Null)
        .await?;
    require(marker["value"] == "two", || {
        format!("the new setting is not applied: {marker}")
    })?;
    Ok("only the changed service was replaced, with its new setting".into())
});

check!(removed_service, ctx, {
    let image = ctx.harness.engine_image();
    let id = ctx.id("lc-remove");
    ctx.up("lc-remove", &two_agents(image, "one"))
        .await
        .map_err(|e| e.to_string())?;
    let one = fixtures::manifest("afc", image, &[fixtures::agent("agent", &[], "")], "");
    ctx.up("lc-remove", &one).await.map_err(|e| e.to_string())?;
    let status = super::status(ctx, &id).await?;
    let names: Vec<&str> = status.services.iter().map(|s| s.name.as_str()).collect();
    require(names == ["agent"], || {
        format!("services after removing one: {names:?}")
    })?;
    Ok("the removed service is gone".into())
});

check!(down_removes, ctx, {
    let id = ctx.id("lc-down");
    ctx.up("lc-down", &two_agents(ctx.harness.engine_image(), "one"))
        .await
        .map_err(|e| e.to_string())?;
    let before = ctx.harness.leftovers(&id).await?;
    require(!before.is_empty(), || {
        "up created no labelled object".into()
    })?;
    ctx.down(&id).await.map_err(|e| e.to_string())?;
    let after = ctx.harness.leftovers(&id).await?;
    require(after.is_empty(), || format!("left behind: {after:?}"))?;
    Ok(format!(
        "{} labelled objects before down, none after",
        before.len()
    ))
});

check!(down_waits, ctx, {
    let id = ctx.id("lc-wait");
    ctx.up("lc-wait", &two_agents(ctx.harness.engine_image(), "one"))
        .await
        .map_err(|e| e.to_string())?;
    ctx.down(&id).await.map_err(|e| e.to_string())?;
    let status = super::status(ctx, &id).await?;
    require(status.services.is_empty(), || {
        format!("status right after down: {status:?}")
    })?;
    Ok("status finds nothing the moment down returns".into())
});

check!(foreign_up, ctx, {
    let id = ctx.id("lc-foreign-up");
    ctx.harness.plant_foreign(&id).await?;
    let result = ctx
        .up(
            "lc-foreign-up",
            &two_agents(ctx.harness.engine_image(), "one"),
        )
        .await;
    let present = ctx.harness.foreign_present(&id).await;
    ctx.harness.remove_foreign(&id).await?;
    let err = match result {
        Ok(_) => return Err("up went ahead beside a foreign object".into()),
        Err(err) => err,
    };
    require(err.code() == RunCode::NotOurs, || {
        format!("not AF-RUN-045: {err}")
    })?;
    require(present?, || "the foreign object was touched".into())?;
    Ok(format!("refused: {err}"))
});

check!(foreign_down, ctx, {
    let id = ctx.id("lc-foreign-down");
    ctx.harness.plant_foreign(&id).await?;
    let result = ctx.down(&id).await;
    let present = ctx.harness.foreign_present(&id).await;
    ctx.harness.remove_foreign(&id).await?;
    let err = match result {
        Ok(()) => return Err("down went ahead over a foreign object".into()),
        Err(err) => err,
    };
    require(err.code() == RunCode::NotOurs, || {
        format!("not AF-RUN-045: {err}")
    })?;
    require(present?, || "the foreign object was removed".into())?;
    Ok(format!("refused: {err}"))
});

check!(down_absent, ctx, {
    let id = ctx.id("lc-absent");
    ctx.down(&id).await.map_err(|e| e.to_string())?;
    let left = ctx.harness.leftovers(&id).await?;
    require(left.is_empty(), || {
        format!("down of nothing created {left:?}")
    })?;
    Ok("nothing to remove, nothing created".into())
});
