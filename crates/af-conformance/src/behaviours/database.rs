//! Database: an environment's branch (`database: {provider: container}`), reached from its own
//! services and from nothing outside the environment, and apart from every other environment's;
//! an external database (`provider: external`), reached only through the sidecar's relay.

use af_manifest::EnvironmentId;
use af_runtime::Capability;

use super::{check, decisions, landed, nothing_arrived, require, try_inside, try_outside};
use crate::behaviour::{Area, Behaviour};
use crate::context::Ctx;
use crate::fixtures;

pub fn all() -> Vec<Behaviour> {
    let b = |name, proves, check| Behaviour {
        name,
        area: Area::Database,
        needs: Some(Capability::ContainerDatabase),
        proves,
        check,
    };
    vec![
        Behaviour {
            name: "external_database_reached_only_through_the_sidecar_and_recorded",
            area: Area::Database,
            needs: Some(Capability::ExternalDatabase),
            proves: "a service reaches an external database through the sidecar's relay, which records the connection; its direct route to the database's address arrives nowhere, judged at the database host's own count of connections",
            check: external_through_the_sidecar,
        },
        b(
            "database_branch_reached_from_its_services_and_nothing_else",
            "a service reaches its environment's database server; another environment's service and a client on the platform's other networks do not, judged by the server's own log of the connections it received",
            reached_from_inside_only,
        ),
        b(
            "database_branches_are_separate",
            "two environments' branches are apart: a table made in one is not in the other, and a reset takes it away",
            separate,
        ),
    ]
}

/// The two environments with a database: ours (`agent`) and a neighbour (`neighbour`).
async fn environments(ctx: &Ctx<'_>) -> Result<(EnvironmentId, EnvironmentId), String> {
    let image = ctx.harness.engine_image();
    let database = ctx.harness.database_image().ok_or_else(|| {
        "the harness names no database image (AF_DB_IMAGE on the local runtime)".to_string()
    })?;
    let ours = ctx
        .shared(
            "database",
            &fixtures::with_database(image, &database, "agent"),
        )
        .await?;
    let theirs = ctx
        .shared(
            "database-neighbour",
            &fixtures::with_database(image, &database, "neighbour"),
        )
        .await?;
    Ok((ours, theirs))
}

/// psql on the branch of `id` (through the runtime), which must succeed: what it printed.
async fn sql(ctx: &Ctx<'_>, id: &EnvironmentId, statements: &str) -> Result<String, String> {
    let ran = ctx
        .harness
        .runtime()
        .database_shell(
            id,
            &["-X", "-At", "-v", "ON_ERROR_STOP=1"].map(String::from),
            statements.as_bytes().to_vec(),
        )
        .await
        .map_err(|err| format!("psql on {id}: {err}"))?;
    require(ran.exit_code == 0, || {
        format!("psql on {id} exited {}: {}", ran.exit_code, ran.stderr)
    })?;
    Ok(ran.stdout.trim().to_string())
}

/// The server's log of arrivals once it holds one more from `from` than the `known` first
/// entries: asked again until it does (the log is written as the server accepts, a moment after
/// the client saw the connection), for up to 10 s.
async fn arrival_from(
    ctx: &Ctx<'_>,
    id: &EnvironmentId,
    known: usize,
    from: &str,
) -> Result<Vec<String>, String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let seen = ctx.harness.database_arrivals(id).await?;
        if seen.iter().skip(known).any(|a| a == from) {
            return Ok(seen);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the server never logged a connection from {from}: {seen:?}"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

check!(reached_from_inside_only, ctx, {
    let (ours, theirs) = environments(ctx).await?;
    let address = ctx.harness.database_address(&ours).await?;
    let route = format!("database=tcp:{address}:5432");
    let agent = ctx.harness.service_address(&ours, "agent").await?;
    let reach_from_ours = || async {
        let inside = try_inside(ctx, &ours, "agent", std::slice::from_ref(&route)).await?;
        require(
            inside.get("database").map(String::as_str) == Some("escaped"),
            || format!("our own service did not reach its database: {inside:?}"),
        )
    };
    // Positive control: our own service is answered, and the server logs it.
    let before = ctx.harness.database_arrivals(&ours).await?.len();
    reach_from_ours().await?;
    let seen = arrival_from(ctx, &ours, before, &agent).await?;
    // Another environment's service, and the platform's client on its other networks.
    let neighbour = try_inside(ctx, &theirs, "neighbour", std::slice::from_ref(&route)).await?;
    require(
        neighbour.get("database").map(String::as_str) == Some("denied"),
        || format!("another environment: {neighbour:?}"),
    )?;
    let outside = try_outside(ctx, std::slice::from_ref(&route)).await?;
    require(
        outside.get("database").map(String::as_str) != Some("escaped"),
        || format!("the platform's other networks: {outside:?}"),
    )?;
    // Judged where it would have landed: our service once more, and once its connection is in
    // the log (which the server writes in the order it accepts), nothing came before it.
    reach_from_ours().await?;
    let after = arrival_from(ctx, &ours, seen.len(), &agent).await?;
    let between: Vec<&String> = after[seen.len()..]
        .iter()
        .take_while(|a| **a != agent)
        .collect();
    require(between.is_empty(), || {
        format!("the server logged connections from outside the environment: {between:?}")
    })?;
    Ok(format!(
        "our service reached {address}:5432; another environment {}, the other networks {}",
        neighbour["database"],
        outside.get("database").map_or("?", String::as_str)
    ))
});

check!(separate, ctx, {
    let (ours, theirs) = environments(ctx).await?;
    let table = format!("mark_{}", ctx.run.replace('-', "_"));
    sql(ctx, &ours, &format!("CREATE TABLE {table} (x int);")).await?;
    let exists = format!("SELECT count(*) FROM pg_tables WHERE tablename = '{table}';");
    require(sql(ctx, &ours, &exists).await? == "1", || {
        "the table is not in the branch it was made in".to_string()
    })?;
    let there = sql(ctx, &theirs, &exists).await?;
    require(there == "0", || {
        format!("the table is in the other environment's branch: {there}")
    })?;
    let status = |id: EnvironmentId| async move {
        ctx.harness
            .runtime()
            .status(&id)
            .await
            .map_err(|e| e.to_string())?
            .database
            .map(|d| d.branch)
            .ok_or_else(|| format!("{id} has no database in its status"))
    };
    let (our_branch, their_branch) = (status(ours.clone()).await?, status(theirs).await?);
    require(our_branch != their_branch, || {
        format!("one branch for both: {our_branch}")
    })?;
    ctx.harness
        .runtime()
        .reset_database(&ours)
        .await
        .map_err(|e| e.to_string())?;
    let after_reset = sql(ctx, &ours, &exists).await?;
    require(after_reset == "0", || {
        format!("the table survived a reset: {after_reset}")
    })?;
    Ok(format!(
        "{table} in {our_branch} only; gone after its reset"
    ))
});

check!(external_through_the_sidecar, ctx, {
    let id = ctx
        .shared(
            "external-database",
            &fixtures::with_external_database(ctx.harness.engine_image(), "agent"),
        )
        .await?;
    let (control, _) = ctx.harness.control_api(&id).await?;
    let sidecar = control
        .rsplit_once(':')
        .map(|(ip, _)| ip.to_string())
        .ok_or_else(|| format!("the sidecar's address {control:?}"))?;
    let database = ctx.harness.outside().operator.clone();
    // The relay listens on PostgreSQL's port: the URL's own (3128) is one the sidecar serves.
    let relay = format!("relay=tcp:{sidecar}:5432");
    // Where the relayed connection lands: the database host's listener.
    let lands = format!("database=tcp:{database}:3128");
    let before = ctx.harness.outside_hosts().arrivals().await?;
    let through = try_inside(ctx, &id, "agent", std::slice::from_ref(&relay)).await?;
    require(
        through.get("relay").map(String::as_str) == Some("escaped"),
        || format!("the service could not open the relay: {through:?}"),
    )?;
    let settled = landed(ctx, &before, std::slice::from_ref(&lands)).await?;
    let direct = format!("direct=tcp:{database}:3128");
    let inside = try_inside(ctx, &id, "agent", std::slice::from_ref(&direct)).await?;
    require(
        inside.get("direct").map(String::as_str) == Some("denied"),
        || format!("the service's direct route to the database: {inside:?}"),
    )?;
    nothing_arrived(ctx, &settled, "the service's direct route to the database").await?;
    let wanted = format!("{database}:3128");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let record = loop {
        let log = decisions(ctx, &id).await?;
        if let Some(record) = log.into_iter().find(|r| r.protocol == "relay") {
            break record;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err("the relayed connection is not in the decision log".to_string());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    require(
        record.verdict == af_runtime::Verdict::Allow
            && record.host == crate::harness::EXTERNAL_DATABASE_NAME
            && record.port == 3128
            && record.resolved == wanted
            && record.rule == "database.host",
        || format!("the relay's record: {record:?}"),
    )?;
    Ok(format!(
        "the relay at {sidecar}:5432 landed at {wanted} and was recorded ({}); the direct route was {}",
        record.rule, inside["direct"]
    ))
});
