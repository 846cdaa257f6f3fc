//! The environments behaviours bring up, as manifests. Every service runs the engine image's
//! conformance agent (`af-proxy agent`), so nothing is built or pulled unless a behaviour is
//! about building.

use crate::harness::{
    EXTERNAL_DATABASE_NAME, EXTERNAL_DATABASE_VARIABLE, ORIGIN_CIDR, ORIGIN_NAME, OutsideAddresses,
    REBIND_NAME,
};

/// A captured host with a canned answer the behaviours recognise.
pub const CAPTURED_NAME: &str = "captured.conformance.test";
pub const CAPTURED_BODY: &str = r#"{"captured":true}"#;
/// A host on no list.
pub const DENIED_NAME: &str = "denied.conformance.test";
/// A mail host: resolved to the sidecar, whose SMTP sink captures.
pub const MAIL_NAME: &str = "smtp.conformance.test";

/// An agent service: port 8080, extra agent flags, extra YAML lines (indented four spaces).
pub fn agent(name: &str, flags: &[&str], extra: &str) -> String {
    let mut args = vec!["agent".to_string()];
    args.extend(flags.iter().map(|f| f.to_string()));
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "  {name}:\n    image: IMAGE\n    args: [{}]\n    port: 8080\n{extra}",
        args.join(", ")
    )
}

/// A whole manifest: `name`, the services (from [`agent`] or written out), an egress section.
pub fn manifest(name: &str, image: &str, services: &[String], egress: &str) -> String {
    format!(
        "name: {name}\nruntime: {{provider: local}}\nservices:\n{}{egress}",
        services.concat()
    )
    .replace("IMAGE", image)
}

/// The egress section of the fixtures that reach outside: the origin allowed (by name, and its
/// documentation network by CIDR), the rebinding name allowed, one host captured with a canned
/// answer, another captured plainly, mail captured.
pub fn egress() -> String {
    format!(
        "egress:\n  allow: [{ORIGIN_NAME}, \"{ORIGIN_CIDR}\", {REBIND_NAME}]\n  capture:\n    - host: {CAPTURED_NAME}\n      response: {{status: 201, body: '{CAPTURED_BODY}'}}\n    - hooks.conformance.test\n  mail: capture\n"
    )
}

/// The shared environment most behaviours use: `agent` (one instance, a health path, no sizes)
/// and `peer` (two instances, sized), the standard egress.
pub fn main(image: &str) -> String {
    manifest(
        "afc",
        image,
        &[
            agent("agent", &[], "    health_path: /healthz\n"),
            agent(
                "peer",
                &[],
                "    replicas: 2\n    resources: {cpu: 250m, memory: 64Mi}\n",
            ),
        ],
        &egress(),
    )
}

/// An agent `service` and the environment's database branch from `database_image` (no seed).
pub fn with_database(image: &str, database_image: &str, service: &str) -> String {
    format!(
        "{}database:\n  provider: container\n  image: {database_image}\n",
        manifest("afc", image, &[agent(service, &[], "")], "")
    )
}

/// An agent `service` and an external database, named for the sidecar's relay by `database.host`
/// (no egress rule allows it).
pub fn with_external_database(image: &str, service: &str) -> String {
    format!(
        "{}database:\n  provider: external\n  url_from_env: {EXTERNAL_DATABASE_VARIABLE}\n  host: {EXTERNAL_DATABASE_NAME}\n",
        manifest("afc", image, &[agent(service, &[], "")], "")
    )
}

/// Start order, migrations and cron: `ledger` keeps marks; `b` (after its migration) and `c`
/// (after `b`) post theirs when they start; `tick` posts one a minute.
pub fn ordering(image: &str) -> String {
    let mark = |name: &str| format!("http://ledger:8080/mark/{name}");
    manifest(
        "afc",
        image,
        &[
            agent("ledger", &[], ""),
            agent(
                "b",
                &["--announce", &mark("b")],
                &format!(
                    "    migrate: [/af-proxy, call, \"{}\"]\n    depends_on: [ledger]\n",
                    mark("migrate-b")
                ),
            ),
            agent("c", &["--announce", &mark("c")], "    depends_on: [b]\n"),
            format!(
                "  tick:\n    image: IMAGE\n    command: [/af-proxy, call, \"{}\"]\n    cron: \"* * * * *\"\n    depends_on: [ledger]\n",
                mark("tick")
            ),
        ],
        "",
    )
}

/// A migration that posts its mark and then fails: `up` must stop, once, and `d` never start.
pub fn failing_migration(image: &str) -> String {
    manifest(
        "afc",
        image,
        &[
            agent("ledger", &[], ""),
            agent(
                "d",
                &["--announce", "http://ledger:8080/mark/d"],
                "    migrate: [/af-proxy, call, \"http://ledger:8080/mark/migrate-d\", --exit-with, \"1\"]\n    depends_on: [ledger]\n",
            ),
        ],
        "",
    )
}

/// One agent, nothing else: the lifecycle behaviours' environment.
pub fn single(image: &str, flags: &[&str], extra: &str) -> String {
    manifest("afc", image, &[agent("agent", flags, extra)], &egress())
}

/// The startup window: the agent's first action is a UDP DNS query to the public resolver.
pub fn first_udp(image: &str, outside: &OutsideAddresses) -> String {
    single(
        image,
        &["--first-udp-dns", &format!("{}:53", outside.public)],
        "",
    )
}
