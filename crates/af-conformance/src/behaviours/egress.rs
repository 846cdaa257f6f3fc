//! Egress: what the sidecar allows, captures and denies, what it records, and what it delivers.

use af_runtime::{Capability, CapturedItem, Verdict};
use serde_json::{Value, json};

use super::{check, fetch, main_env, require};
use crate::behaviour::{Area, Behaviour};
use crate::context::Ctx;
use crate::fixtures::{CAPTURED_BODY, CAPTURED_NAME, DENIED_NAME, MAIL_NAME};
use crate::harness::ORIGIN_NAME;

pub fn all() -> Vec<Behaviour> {
    let b = |name, needs, proves, check| Behaviour {
        name,
        area: Area::Egress,
        needs,
        proves,
        check,
    };
    vec![
        b(
            "egress_allowed_host_is_reached",
            None,
            "a request through the sidecar to an allowed host reaches that host and brings its answer back",
            allowed,
        ),
        b(
            "egress_unlisted_host_is_denied",
            None,
            "a request through the sidecar to a host on no list is refused (403)",
            denied,
        ),
        b(
            "egress_captured_host_is_answered_by_the_sidecar",
            None,
            "a request to a captured host gets the manifest's canned answer, from the sidecar",
            captured,
        ),
        b(
            "egress_captured_https_through_the_proxy_is_answered",
            Some(Capability::HttpsCapture),
            "an HTTPS request through a CONNECT tunnel to a captured host is answered by the sidecar behind a certificate the service's trust store (as the runtime set it) accepts, and kept in the inbox",
            captured_https_tunnel,
        ),
        b(
            "egress_captured_https_transparent_is_answered",
            Some(Capability::HttpsCapture),
            "an HTTPS request straight to a captured host (its name resolved to the sidecar) is answered the same way",
            captured_https_transparent,
        ),
        b(
            "egress_decisions_are_logged",
            Some(Capability::NetLog),
            "every decision (allow, capture, deny) is in the decision log with host and verdict",
            logged,
        ),
        b(
            "egress_captured_request_is_in_the_inbox",
            Some(Capability::Inbox),
            "a captured request is kept whole (method, path, body) in the inbox",
            inbox_http,
        ),
        b(
            "egress_mail_is_captured_into_the_inbox",
            Some(Capability::Inbox),
            "outbound mail is accepted by the sidecar and kept in the inbox, parsed",
            inbox_mail,
        ),
        b(
            "egress_mail_over_starttls_is_captured_into_the_inbox",
            Some(Capability::HttpsCapture),
            "mail sent after STARTTLS, the sink's certificate verified by the service's own trust store as the runtime set it, is accepted by the sidecar and kept in the inbox",
            inbox_mail_starttls,
        ),
        b(
            "egress_mail_over_smtps_is_captured_into_the_inbox",
            Some(Capability::HttpsCapture),
            "mail sent over implicit TLS to port 465, the sink's certificate verified by the service's own trust store as the runtime set it, is accepted by the sidecar and kept in the inbox",
            inbox_mail_smtps,
        ),
        b(
            "egress_webhook_reaches_the_service",
            Some(Capability::WebhookTrigger),
            "the sidecar delivers a request to a service as a third party would, and returns its answer",
            webhook,
        ),
        b(
            "egress_webhook_is_recorded",
            Some(Capability::NetLog),
            "a delivered webhook is in the decision log",
            webhook_logged,
        ),
    ]
}

check!(allowed, ctx, {
    let id = main_env(ctx).await?;
    let answer = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{ORIGIN_NAME}:8080/boot"),
        true,
    )
    .await?;
    require(answer["status"] == 200, || format!("{answer}"))?;
    let body: Value = serde_json::from_str(answer["body"].as_str().unwrap_or_default())
        .map_err(|e| format!("{e}: {answer}"))?;
    require(body["boot"].is_string(), || {
        format!("not the origin's answer: {answer}")
    })?;
    Ok(format!("the origin answered: {}", body["boot"]))
});

check!(denied, ctx, {
    let id = main_env(ctx).await?;
    let answer = fetch(ctx, &id, "agent", &format!("http://{DENIED_NAME}/"), true).await?;
    require(answer["status"] == 403, || format!("{answer}"))?;
    Ok(format!(
        "refused: {}",
        answer["body"].as_str().unwrap_or_default().trim()
    ))
});

check!(captured, ctx, {
    let id = main_env(ctx).await?;
    let answer = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{CAPTURED_NAME}/charges?x=1"),
        true,
    )
    .await?;
    require(
        answer["status"] == 201 && answer["body"] == CAPTURED_BODY,
        || format!("{answer}"),
    )?;
    Ok(format!("canned answer: {}", answer["body"]))
});

/// POSTs over HTTPS to the captured host, verified by the agent's trust store, and checks the
/// canned answer and the inbox.
async fn captured_https(ctx: &Ctx<'_>, via_proxy: bool, path: &str) -> Result<String, String> {
    let id = main_env(ctx).await?;
    let (_, answer) = ctx
        .agent(
            &id,
            "agent",
            "POST",
            "/https",
            json!({"url": format!("https://{CAPTURED_NAME}{path}"), "via_proxy": via_proxy, "body": "amount=700"}),
        )
        .await?;
    require(
        answer["status"] == 201 && answer["body"] == CAPTURED_BODY,
        || format!("{answer}"),
    )?;
    captured_post_kept(ctx, &id, path, "amount=700").await?;
    Ok(format!(
        "verified TLS, canned answer {}, POST {path} in the inbox",
        answer["body"]
    ))
}

check!(captured_https_tunnel, ctx, {
    captured_https(ctx, true, "/v1/refunds").await
});

check!(captured_https_transparent, ctx, {
    captured_https(ctx, false, "/v1/disputes").await
});

check!(logged, ctx, {
    let id = main_env(ctx).await?;
    for url in [
        format!("http://{ORIGIN_NAME}:8080/boot"),
        format!("http://{DENIED_NAME}/logged"),
        format!("http://{CAPTURED_NAME}/logged"),
    ] {
        fetch(ctx, &id, "agent", &url, true).await?;
    }
    let log = super::decisions(ctx, &id).await?;
    for (host, verdict) in [
        (ORIGIN_NAME, Verdict::Allow),
        (DENIED_NAME, Verdict::Deny),
        (CAPTURED_NAME, Verdict::Capture),
    ] {
        require(
            log.iter().any(|r| r.host == host && r.verdict == verdict),
            || format!("no {verdict:?} record for {host} in {} records", log.len()),
        )?;
    }
    Ok(format!(
        "{} records, allow/deny/capture among them",
        log.len()
    ))
});

check!(inbox_http, ctx, {
    let id = main_env(ctx).await?;
    let (_, answer) = ctx
        .agent(
            &id,
            "agent",
            "POST",
            "/fetch",
            json!({"url": format!("http://{CAPTURED_NAME}/v1/charges"), "via_proxy": true, "method": "POST", "body": "amount=1200"}),
        )
        .await?;
    require(answer["status"] == 201, || format!("{answer}"))?;
    captured_post_kept(ctx, &id, "/v1/charges", "amount=1200").await?;
    Ok("POST /v1/charges kept with its body".into())
});

/// Requires a POST of `body` to `path` of the captured host in the environment's inbox.
async fn captured_post_kept(
    ctx: &Ctx<'_>,
    id: &af_manifest::EnvironmentId,
    path: &str,
    body: &str,
) -> Result<(), String> {
    let inbox = ctx
        .harness
        .runtime()
        .inbox(id)
        .await
        .map_err(|e| e.to_string())?;
    let kept = inbox.iter().any(|entry| {
        matches!(&entry.item, CapturedItem::Http { method, host, path: kept_path, body: kept_body, .. }
            if method == "POST" && host == CAPTURED_NAME && kept_path == path && kept_body == body)
    });
    require(kept, || format!("not in the inbox: {inbox:?}"))
}

/// How a message reaches the sidecar's SMTP sink.
#[derive(Clone, Copy)]
enum MailTransport {
    Plain,
    /// STARTTLS on 25.
    StartTls,
    /// Implicit TLS on 465.
    Smtps,
}

/// Sends one message through the sidecar's SMTP sink over `transport` and requires it in the
/// inbox, parsed.
async fn mail_kept(ctx: &Ctx<'_>, transport: MailTransport, subject: &str) -> Result<(), String> {
    let id = main_env(ctx).await?;
    let port = match transport {
        MailTransport::Plain | MailTransport::StartTls => 25,
        MailTransport::Smtps => 465,
    };
    let (_, sent) = ctx
        .agent(
            &id,
            "agent",
            "POST",
            "/mail",
            json!({"server": format!("{MAIL_NAME}:{port}"), "from": "shop@conformance.test", "to": "ana@conformance.test", "subject": subject, "body": "Thank you.",
                "starttls": matches!(transport, MailTransport::StartTls),
                "implicit_tls": matches!(transport, MailTransport::Smtps)}),
        )
        .await?;
    require(sent["sent"] == true, || {
        format!("the sidecar did not take the mail: {sent}")
    })?;
    let inbox = ctx
        .harness
        .runtime()
        .inbox(&id)
        .await
        .map_err(|e| e.to_string())?;
    let kept = inbox.iter().any(|entry| {
        matches!(&entry.item, CapturedItem::Mail { from, to, subject: kept_subject, body, .. }
            if from == "shop@conformance.test" && to.iter().any(|t| t == "ana@conformance.test")
                && kept_subject == subject && body.contains("Thank you."))
    });
    require(kept, || format!("not in the inbox: {inbox:?}"))
}

check!(inbox_mail, ctx, {
    mail_kept(ctx, MailTransport::Plain, "Order 7").await?;
    Ok("the message is in the inbox, parsed".into())
});

check!(inbox_mail_starttls, ctx, {
    mail_kept(ctx, MailTransport::StartTls, "Order 8, sealed").await?;
    Ok("STARTTLS verified against the service's trust store; the message is in the inbox".into())
});

check!(inbox_mail_smtps, ctx, {
    mail_kept(ctx, MailTransport::Smtps, "Order 9, sealed from the start").await?;
    Ok(
        "implicit TLS verified against the service's trust store; the message is in the inbox"
            .into(),
    )
});

check!(webhook, ctx, {
    let id = main_env(ctx).await?;
    let (status, answer) = ctx
        .agent(&id, "agent", "POST", "/mark/from-a-webhook", Value::Null)
        .await?;
    require(status == 200, || format!("{status} {answer}"))?;
    let (_, seen) = ctx.agent(&id, "agent", "GET", "/seen", Value::Null).await?;
    let arrived = seen
        .as_array()
        .is_some_and(|s| s.iter().any(|r| r == "POST /mark/from-a-webhook"));
    require(arrived, || format!("the service did not see it: {seen}"))?;
    Ok(format!("the service answered {status} and saw the request"))
});

check!(webhook_logged, ctx, {
    let id = main_env(ctx).await?;
    ctx.agent(&id, "agent", "POST", "/mark/recorded-webhook", Value::Null)
        .await?;
    let log = super::decisions(ctx, &id).await?;
    require(
        log.iter()
            .any(|r| r.protocol == "webhook" && r.host == "agent"),
        || format!("no webhook record among {} records", log.len()),
    )?;
    Ok("recorded".into())
});
