//! Containment: every route of CONTAINMENT.md's battery that an environment exposes, each tried
//! from inside a running service and judged at the application layer beside a positive control.
//! None of these can be skipped.

use serde_json::{Value, json};

use super::{check, contained, fetch, main_env, require, try_inside, try_outside};
use crate::behaviour::{Area, Behaviour, IMMEDIATE_STARTUP_PROOF};
use crate::context::Ctx;
use crate::fixtures::{self, CAPTURED_BODY, CAPTURED_NAME};
use crate::harness::{ORIGIN_NAME, REBIND_NAME};

pub fn all() -> Vec<Behaviour> {
    let b = |name, proves, check| Behaviour {
        name,
        area: Area::Containment,
        needs: None,
        proves,
        check,
    };
    vec![
        b(
            "containment_probe_verdict_is_recorded",
            "the environment's containment probe ran before its services, every route denied, and status reports it",
            probe_recorded,
        ),
        b(
            "containment_e1_public_tcp",
            "E1: TCP straight to a public host fails",
            e1,
        ),
        b(
            "containment_e2_public_dns_udp",
            "E2: a UDP DNS query straight to a public resolver gets no answer",
            e2,
        ),
        b(
            "containment_e3_dns_over_tcp",
            "E3: a TCP DNS query straight to that resolver fails",
            e3,
        ),
        b(
            "containment_e4_metadata",
            "E4: the metadata endpoint 169.254.169.254 cannot be reached",
            e4,
        ),
        b(
            "containment_e5_ipv6",
            "E5: a global IPv6 host and the IPv6 metadata address fd00:ec2::254 cannot be reached",
            e5,
        ),
        b(
            "containment_e6_platform_api",
            "E6: the platform's API cannot be reached from a service",
            e6,
        ),
        b(
            "containment_e7_operator_network",
            "E7: a private-range host on the operator's network cannot be reached",
            e7,
        ),
        b(
            "containment_e8_icmp",
            "E8: an ICMP echo to a public host gets no reply",
            e8,
        ),
        b(
            "containment_e9_udp",
            "E9: arbitrary UDP to a public host gets nothing back",
            e9,
        ),
        b(
            "containment_e10_dns_tunnelling_refused",
            "E10: TXT, MX and NULL questions for outside names are refused by the sidecar, never forwarded, and recorded",
            e10,
        ),
        b(
            "containment_e11_proxy_ignoring_client_lands_on_the_sidecar",
            "E11: a client that ignores its proxy settings resolves an outside name to the sidecar, which decides and records the request",
            e11,
        ),
        b(
            "containment_e12_sni_other_than_the_connect_host_is_refused",
            "E12: a tunnel to an allowed host carrying a ClientHello for another name is closed",
            e12,
        ),
        b(
            "containment_e13_allowed_name_resolving_to_a_private_address_is_refused",
            "E13: an allowed name that resolves to a private address is not dialled (DNS rebinding)",
            e13,
        ),
        b(
            "containment_e14_ip_literals_and_special_ranges_are_refused",
            "E14: requests and tunnels to IP literals and NAT64, 6to4 and Teredo addresses are refused",
            e14,
        ),
        b(
            "containment_e15_other_environment",
            "E15: another environment's service cannot be reached, by address or by name",
            e15,
        ),
        b(
            "containment_e16_sidecar_control_api",
            "E16: the sidecar's control API refuses a workload",
            e16,
        ),
        b(
            "containment_e17_no_tampering",
            "E17: a workload cannot open raw or packet sockets or change the filter",
            e17,
        ),
        b(
            "containment_e19_dns_over_tls_and_https",
            "E19: DNS over TLS to a resolver fails, and DNS over HTTPS to it is refused unless allowed",
            e19,
        ),
        b(
            IMMEDIATE_STARTUP_PROOF,
            "E18: a service whose first instruction is a UDP query to a public resolver (which answers a permitted client) gets nothing out",
            immediate_startup,
        ),
        b(
            "containment_e20_stopped_sidecar_fails_closed",
            "E20: with the sidecar stopped nothing gets out, directly or otherwise",
            e20,
        ),
    ]
}

fn public(ctx: &Ctx<'_>) -> String {
    ctx.harness.outside().public.clone()
}

check!(probe_recorded, ctx, {
    let id = main_env(ctx).await?;
    let status = super::status(ctx, &id).await?;
    let summary = status
        .containment
        .ok_or("status has no containment verdict")?;
    require(summary.contained && !summary.routes.is_empty(), || {
        format!("{summary:?}")
    })?;
    require(
        summary
            .routes
            .iter()
            .all(|(_, outcome)| outcome == "denied"),
        || format!("{summary:?}"),
    )?;
    Ok(format!(
        "{} routes denied at {}",
        summary.routes.len(),
        summary.checked_at
    ))
});

check!(e1, ctx, {
    contained(ctx, &[format!("e1-public-tcp=tcp:{}:3128", public(ctx))]).await
});
check!(e2, ctx, {
    contained(ctx, &[format!("e2-public-dns=dns:{}:53", public(ctx))]).await
});
check!(e3, ctx, {
    contained(ctx, &[format!("e3-dns-over-tcp=tcp:{}:53", public(ctx))]).await
});
check!(e4, ctx, {
    contained(
        ctx,
        &[format!(
            "e4-metadata=tcp:{}:3128",
            ctx.harness.outside().metadata
        )],
    )
    .await
});
check!(e5, ctx, {
    let outside = ctx.harness.outside();
    contained(
        ctx,
        &[
            format!("e5-global-v6=tcp:[{}]:3128", outside.global_v6),
            format!("e5-metadata-v6=tcp:[{}]:3128", outside.metadata_v6),
        ],
    )
    .await
});
check!(e7, ctx, {
    contained(
        ctx,
        &[format!(
            "e7-operator=tcp:{}:3128",
            ctx.harness.outside().operator
        )],
    )
    .await
});
check!(e8, ctx, {
    contained(ctx, &[format!("e8-icmp=icmp:{}", public(ctx))]).await
});
check!(e9, ctx, {
    contained(ctx, &[format!("e9-udp=udp:{}:53", public(ctx))]).await
});

/// A route the harness vouches for (its own positive control), denied from inside the service.
async fn vouched(
    ctx: &Ctx<'_>,
    name: &str,
    kind: &str,
    target: (String, bool),
) -> Result<String, String> {
    let (address, answers) = target;
    require(answers, || {
        format!("positive control: nothing answers the platform's side at {address}")
    })?;
    let id = main_env(ctx).await?;
    let inside = try_inside(ctx, &id, "agent", &[format!("{name}={kind}:{address}")]).await?;
    require(
        inside.get(name).map(String::as_str) == Some("denied"),
        || format!("{inside:?}"),
    )?;
    Ok(format!(
        "{address} answers the platform's side; from inside: denied"
    ))
}

check!(e6, ctx, {
    let id = main_env(ctx).await?;
    let target = ctx.harness.platform_api(&id).await?;
    vouched(ctx, "e6-platform-api", "tcp", target).await
});

check!(e16, ctx, {
    let id = main_env(ctx).await?;
    let target = ctx.harness.control_api(&id).await?;
    vouched(ctx, "e16-control-api", "http", target).await
});

/// The sidecar's address as the service knows it: the host of its HTTP_PROXY.
async fn sidecar_ip(ctx: &Ctx<'_>, id: &af_manifest::EnvironmentId) -> Result<String, String> {
    let (_, proxy) = ctx
        .agent(id, "agent", "GET", "/env/HTTP_PROXY", Value::Null)
        .await?;
    proxy["value"]
        .as_str()
        .and_then(|p| p.strip_prefix("http://"))
        .and_then(|p| p.rsplit_once(':'))
        .map(|(host, _)| host.to_string())
        .ok_or_else(|| format!("no HTTP_PROXY: {proxy}"))
}

async fn ask_dns(
    ctx: &Ctx<'_>,
    id: &af_manifest::EnvironmentId,
    server: &str,
    name: &str,
    qtype: u16,
) -> Result<Value, String> {
    Ok(ctx
        .agent(
            id,
            "agent",
            "POST",
            "/dns",
            json!({"server": server, "name": name, "qtype": qtype}),
        )
        .await?
        .1)
}

check!(e10, ctx, {
    let id = main_env(ctx).await?;
    let server = format!("{}:53", sidecar_ip(ctx, &id).await?);
    let name = "tunnel.exfiltrate.example";
    // Positive control: the responder answers this client (an address question).
    let address = ask_dns(ctx, &id, &server, name, 1).await?;
    require(
        address["rcode"] == 0
            && address["addresses"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
        || format!("positive control: the responder does not answer an A question: {address}"),
    )?;
    for (qtype, label) in [(16, "TXT"), (15, "MX"), (10, "NULL")] {
        let answer = ask_dns(ctx, &id, &server, name, qtype).await?;
        let refused = matches!(answer["rcode"].as_u64(), Some(3 | 5))
            && answer["addresses"].as_array().is_some_and(|a| a.is_empty());
        require(refused, || format!("{label} for an outside name: {answer}"))?;
    }
    let log = super::decisions(ctx, &id).await?;
    require(
        log.iter()
            .any(|r| r.protocol == "dns" && r.host == name && r.method == "TXT"),
        || "the refused TXT question is not in the decision log".into(),
    )?;
    Ok("A answered with the sidecar; TXT, MX, NULL refused and recorded".into())
});

check!(e11, ctx, {
    let id = main_env(ctx).await?;
    let answer = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{CAPTURED_NAME}/straight"),
        false,
    )
    .await?;
    require(
        answer["status"] == 201 && answer["body"] == CAPTURED_BODY,
        || format!("a direct request to an outside name did not land on the sidecar: {answer}"),
    )?;
    let log = super::decisions(ctx, &id).await?;
    require(
        log.iter()
            .any(|r| r.host == CAPTURED_NAME && r.protocol == "http-transparent"),
        || "the direct request is not in the decision log as a transparent one".into(),
    )?;
    Ok("decided by the sidecar (captured) and recorded".into())
});

async fn tunnel(
    ctx: &Ctx<'_>,
    id: &af_manifest::EnvironmentId,
    target: &str,
    sni: &str,
) -> Result<Value, String> {
    Ok(ctx
        .agent(
            id,
            "agent",
            "POST",
            "/connect",
            json!({"target": target, "sni": sni}),
        )
        .await?
        .1)
}

check!(e12, ctx, {
    let id = main_env(ctx).await?;
    let target = format!("{ORIGIN_NAME}:8080");
    // Positive control: the same tunnel with the right name stays open to the origin.
    let honest = tunnel(ctx, &id, &target, ORIGIN_NAME).await?;
    require(
        honest["connect_status"] == 200 && honest["after_hello"] != "closed",
        || format!("positive control: an honest tunnel to the allowed host: {honest}"),
    )?;
    let fronted = tunnel(ctx, &id, &target, "evil.conformance.test").await?;
    require(
        fronted["after_hello"] == "closed" || fronted["connect_status"] != 200,
        || format!("a ClientHello for another name went through: {fronted}"),
    )?;
    Ok(format!("honest: {honest}; fronted: {fronted}"))
});

check!(e13, ctx, {
    let operator = ctx.harness.outside().operator.clone();
    let open = try_outside(ctx, &[format!("rebind-target=tcp:{operator}:3128")]).await?;
    require(
        open.get("rebind-target").map(String::as_str) == Some("escaped"),
        || format!("positive control: the private host does not answer: {open:?}"),
    )?;
    let id = main_env(ctx).await?;
    let answer = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{REBIND_NAME}:3128/"),
        true,
    )
    .await?;
    require(answer["status"] != 200 && answer["status"].is_u64(), || {
        format!("{answer}")
    })?;
    Ok(format!("refused with {}", answer["status"]))
});

check!(e14, ctx, {
    let id = main_env(ctx).await?;
    // Positive control: the same proxy lets an allowed name through.
    let allowed = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{ORIGIN_NAME}:8080/boot"),
        true,
    )
    .await?;
    require(allowed["status"] == 200, || {
        format!("positive control: {allowed}")
    })?;
    let literal = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{}:3128/", public(ctx)),
        true,
    )
    .await?;
    require(literal["status"] == 403, || {
        format!("an IP literal: {literal}")
    })?;
    for target in [
        "[64:ff9b::cb00:710a]:443",
        "[2002:cb00:710a::1]:443",
        "[2001:0:cb00:710a::1]:443",
    ] {
        let answer = tunnel(ctx, &id, target, "x.conformance.test").await?;
        require(answer["connect_status"] == 403, || {
            format!("CONNECT {target}: {answer}")
        })?;
    }
    Ok("IP literal, NAT64, 6to4 and Teredo refused".into())
});

check!(e15, ctx, {
    let image = ctx.harness.engine_image();
    let other = ctx
        .shared(
            "neighbour",
            &fixtures::manifest("afc", image, &[fixtures::agent("neighbour", &[], "")], ""),
        )
        .await?;
    let (_, their_boot) = ctx
        .agent(&other, "neighbour", "GET", "/boot", Value::Null)
        .await?;
    let address = ctx.harness.service_address(&other, "neighbour").await?;
    let route = format!("e15-by-address=tcp:{address}:8080");
    // Positive control: the neighbour answers its own environment at that address.
    let theirs = try_inside(ctx, &other, "neighbour", std::slice::from_ref(&route)).await?;
    require(
        theirs.get("e15-by-address").map(String::as_str) == Some("escaped"),
        || format!("positive control: {theirs:?}"),
    )?;
    let id = main_env(ctx).await?;
    let ours = try_inside(ctx, &id, "agent", &[route]).await?;
    require(
        ours.get("e15-by-address").map(String::as_str) == Some("denied"),
        || format!("{ours:?}"),
    )?;
    let by_name = fetch(ctx, &id, "agent", "http://neighbour:8080/boot", false).await?;
    let reached = by_name["body"]
        .as_str()
        .is_some_and(|b| b.contains(their_boot["boot"].as_str().unwrap_or("?")));
    require(!reached, || {
        format!("reached the neighbour by name: {by_name}")
    })?;
    Ok(format!("by address denied; by name: {}", by_name["status"]))
});

check!(e17, ctx, {
    let id = main_env(ctx).await?;
    let (_, tried) = ctx
        .agent(&id, "agent", "POST", "/tamper", Value::Null)
        .await?;
    for attempt in ["raw_socket", "packet_socket", "iptables_flush"] {
        let outcome = tried[attempt].as_str().unwrap_or_default();
        require(outcome.starts_with("denied"), || {
            format!("{attempt}: {tried}")
        })?;
    }
    // Refused for lack of privilege, not for some accident of the image.
    let raw = tried["raw_socket"].as_str().unwrap_or_default();
    require(
        raw.contains("not permitted") || raw.contains("ermission"),
        || format!("{tried}"),
    )?;
    Ok(format!("{tried}"))
});

check!(e19, ctx, {
    let dot = contained(ctx, &[format!("e19-dns-over-tls=tcp:{}:853", public(ctx))]).await?;
    let id = main_env(ctx).await?;
    let doh = fetch(
        ctx,
        &id,
        "agent",
        "http://dns.conformance.test/dns-query?dns=AAAB",
        true,
    )
    .await?;
    require(doh["status"] == 403, || {
        format!("DNS over HTTPS to an unlisted resolver: {doh}")
    })?;
    Ok(format!("{dot}; DoH refused"))
});

check!(immediate_startup, ctx, {
    let resolver = format!("first-udp=dns:{}:53", public(ctx));
    let open = try_outside(ctx, std::slice::from_ref(&resolver)).await?;
    require(
        open.get("first-udp").map(String::as_str) == Some("escaped"),
        || format!("positive control: the resolver does not answer a permitted client: {open:?}"),
    )?;
    let id = ctx.id("first-udp");
    ctx.up(
        "first-udp",
        &fixtures::first_udp(ctx.harness.engine_image(), ctx.harness.outside()),
    )
    .await
    .map_err(|e| e.to_string())?;
    let (_, boot) = ctx.agent(&id, "agent", "GET", "/boot", Value::Null).await?;
    require(boot["first_udp"]["outcome"] == "denied", || {
        format!("the service's first action: {}", boot["first_udp"])
    })?;
    Ok(format!("first action: {}", boot["first_udp"]))
});

check!(e20, ctx, {
    let id = ctx.id("sidecar-stop");
    ctx.up(
        "sidecar-stop",
        &fixtures::single(ctx.harness.engine_image(), &[], ""),
    )
    .await
    .map_err(|e| e.to_string())?;
    // Positive control: with its sidecar, the service gets to the allowed origin.
    let before = fetch(
        ctx,
        &id,
        "agent",
        &format!("http://{ORIGIN_NAME}:8080/boot"),
        true,
    )
    .await?;
    require(before["status"] == 200, || {
        format!("positive control: {before}")
    })?;
    ctx.harness.stop_sidecar(&id).await?;
    let routes = [
        format!("e1=tcp:{}:3128", public(ctx)),
        format!("e2=dns:{}:53", public(ctx)),
        format!("e9=udp:{}:53", public(ctx)),
        format!("origin-direct=tcp:{}", ctx.harness.origin_address()),
    ];
    let settled = ctx.harness.outside_hosts().arrivals().await?;
    let after = ctx.harness.try_in_service(&id, "agent", &routes).await?;
    for result in &after {
        require(result.outcome == "denied", || {
            format!("with the sidecar stopped: {after:?}")
        })?;
    }
    super::nothing_arrived(ctx, &settled, "a route tried with the sidecar stopped").await?;
    Ok(format!(
        "{} routes denied with the sidecar stopped",
        after.len()
    ))
});
