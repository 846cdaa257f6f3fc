//! An environment's database as data (`database: {provider: container}`): the names of its
//! server, volumes and branch, the connection string the services get, the create bodies of the
//! server and its one-shots, and the SQL that makes the template and the branch.
//!
//! The layout, and why. Each environment has a PostgreSQL server of its own on its internal
//! network, so isolation between environments is the network's (judged at the server's listener),
//! not a permission inside a shared server. The server runs in a pod exactly as a service does —
//! a holder with the refusal rules, its startup gate, then the server in the holder's namespace —
//! because its image is the manifest's choice: it gets no more of the network than a service. A new environment's server does not start empty: its
//! data directory is a copy of a **template volume** — a cluster into which the manifest's `seed`
//! was applied once, kept per (image, seed) — so neither initdb nor the seed runs again. Inside
//! it the **branch** is made from the template database with `CREATE DATABASE … TEMPLATE`, which
//! is also how `af db reset` makes it fresh (docs/performance.md has both measured).
//!
//! Who may do what. The services connect as [`OWNER`], which owns the branch and nothing else and
//! is not a superuser: no `COPY … PROGRAM`, no reading the server's files, no untrusted extension.
//! The superuser `postgres` has no password (it cannot log in over the network at all) and is used
//! only by af, through `docker exec` on the container's own socket.

use std::collections::HashMap;

use af_manifest::EnvironmentId;
use bollard::models::{ContainerCreateBody, HostConfig};

use super::containers::OneShot;
use super::hardening::confined_read_only;
use crate::names;

/// The role of the database's pod holder, `af-<env>-database`: the name the services reach the
/// server by.
pub const HOLDER_ROLE: &str = "database";
/// The server's role (its container is `af-<env>-database-server`, in the holder's namespace).
pub const ROLE: &str = "database-server";
/// The role of the volume that holds the environment's data directory.
pub const DATA_ROLE: &str = "database-data";
/// The role of a template volume; it belongs to no environment (`af down` keeps it).
pub const TEMPLATE_ROLE: &str = "database-template";
/// The port the server listens on, on the internal network only; nothing is published.
pub const PORT: u16 = 5432;
/// The role the services connect as: owns the branch, is not a superuser.
pub const OWNER: &str = "app";
/// The database the seed is applied into; nobody connects to it after.
pub const TEMPLATE_DATABASE: &str = "af_template";
/// The file a finished template volume carries at its root: a volume without it was left by an
/// interrupted build and is built again.
pub const TEMPLATE_READY: &str = "AF_TEMPLATE_READY";
/// Where a template volume is mounted while it is copied.
pub const TEMPLATE_MOUNT: &str = "/af-template";
/// The data directory when the image names none (the official image's).
pub const DEFAULT_PGDATA: &str = "/var/lib/postgresql/data";
/// The user the server runs as, in the image's own `/etc/passwd` (both the official image and
/// af's have it).
pub const SERVER_USER: &str = "postgres";
/// On the server container: the password of [`OWNER`], kept so that a second `af up` hands the
/// services the same connection string (and so keeps them as they run).
pub const PASSWORD_LABEL: &str = "dev.antifailure.database-password";
/// On the server container and template volumes: the template it was made from.
pub const TEMPLATE_LABEL: &str = "dev.antifailure.database-template";

/// The branch's database name: the environment id, made an identifier.
pub fn branch(env: &EnvironmentId) -> String {
    env.as_str().replace('-', "_")
}

/// The environment's server container.
pub fn server_name(env: &EnvironmentId) -> String {
    names::container(env, ROLE)
}

/// The holder of the server's pod: its address and name on the internal network.
pub fn holder_name(env: &EnvironmentId) -> String {
    names::container(env, HOLDER_ROLE)
}

/// The environment's data volume.
pub fn data_volume(env: &EnvironmentId) -> String {
    names::container(env, DATA_ROLE)
}

/// The template volume for an image (by id) and a seed (by content; empty for none).
pub fn template_volume(image_id: &str, seed: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let seed_digest: String = Sha256::digest(seed)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // The layout's own version goes in too: a template made by an older af is not reused.
    format!(
        "af-db-template-{}",
        names::spec_digest(&["template-v1", image_id, &seed_digest, OWNER])
    )
}

/// Whether an object carrying `labels` is one of af's templates.
pub fn is_template(labels: &HashMap<String, String>) -> bool {
    labels.get(af_runtime::MANAGED_LABEL).map(String::as_str) == Some("true")
        && labels.get(names::ROLE_LABEL).map(String::as_str) == Some(TEMPLATE_ROLE)
}

/// The labels of a template volume: af's, of no environment.
pub fn template_labels(image: &str) -> HashMap<String, String> {
    HashMap::from([
        (af_runtime::MANAGED_LABEL.to_string(), "true".to_string()),
        (names::ROLE_LABEL.to_string(), TEMPLATE_ROLE.to_string()),
        (
            "dev.antifailure.database-image".to_string(),
            image.to_string(),
        ),
    ])
}

/// How the services reach their branch.
#[derive(Clone, PartialEq, Eq)]
pub struct Connection {
    /// The server's name on the internal network (its pod holder's).
    pub host: String,
    pub database: String,
    pub password: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Connection")
            .field("host", &self.host)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub fn for_environment(env: &EnvironmentId, password: String) -> Connection {
        Connection {
            host: holder_name(env),
            database: branch(env),
            password,
        }
    }

    /// `postgres://app:PASSWORD@HOST:5432/BRANCH`: what every service gets in the manifest's
    /// `database.env`. The password is URL-safe as made ([`new_password`]).
    pub fn url(&self) -> String {
        format!(
            "postgres://{OWNER}:{}@{}:{PORT}/{}",
            self.password, self.host, self.database
        )
    }
}

/// The variable every service gets the connection string in (`database.env`).
#[derive(Clone, PartialEq, Eq)]
pub struct Variable {
    pub name: String,
    pub url: String,
}

impl Variable {
    /// `NAME=url`, as a container's environment takes it.
    pub fn assignment(&self) -> String {
        format!("{}={}", self.name, self.url)
    }
}

impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the connection string: it carries the password.
        f.debug_struct("Variable")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A password for [`OWNER`]: 128 random bits as hex digits (as the sidecar's control token is
/// made), safe in a URL and in SQL quotes.
pub fn new_password() -> std::io::Result<String> {
    af_sidecar_api::new_control_token()
}

/// The digest of what a server is made from: a second `up` keeps a server with the same one.
pub fn server_spec(image_id: &str, template: &str, internal: &str) -> String {
    names::spec_digest(&["database-v1", image_id, template, internal])
}

/// What a server container is made from.
#[derive(Clone, Debug)]
pub struct Server<'a> {
    pub image: &'a str,
    /// `container:<holder>` (the pod's namespace), or `none` for the template's build.
    pub network: &'a str,
    /// The volume mounted as its data directory.
    pub volume: &'a str,
    pub pgdata: &'a str,
    /// Variables for its entrypoint (the template's build passes `POSTGRES_PASSWORD`, which
    /// initdb needs and nothing keeps).
    pub env_vars: Vec<String>,
    pub labels: HashMap<String, String>,
}

/// The server's container: the image as its `postgres` user, no capability, no new privileges,
/// a read-only root with scratch space for the socket and temporary files, its data volume, in
/// its pod's namespace (or none), no port published. Every connection is logged (`log_connections`), which is
/// where a test judges who reached it.
pub fn server(server: Server<'_>) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(server.image.to_string()),
        user: Some(SERVER_USER.to_string()),
        cmd: Some(
            [
                "postgres",
                "-c",
                "log_connections=on",
                "-c",
                "listen_addresses=*",
            ]
            .map(String::from)
            .to_vec(),
        ),
        env: Some(server.env_vars),
        labels: Some(server.labels),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{}:{}", server.volume, server.pgdata)]),
            // The daemon gives a tmpfs the mode of the image's directory under it (root owns it):
            // the official image's socket directory is writable by everyone, sticky, and af's is
            // made the same (scripts/build-db-image).
            tmpfs: Some(HashMap::from([
                ("/var/run/postgresql".to_string(), String::new()),
                ("/tmp".to_string(), String::new()),
            ])),
            ..confined_read_only(server.network)
        }),
        ..Default::default()
    }
}

/// The labels of an environment's server: af's, its template, and [`OWNER`]'s password.
pub fn server_labels(
    env: &EnvironmentId,
    spec: &str,
    template: &str,
    password: &str,
) -> HashMap<String, String> {
    let mut labels = super::containers::labels_with_spec(env, ROLE, Some(spec));
    labels.insert(TEMPLATE_LABEL.to_string(), template.to_string());
    labels.insert(PASSWORD_LABEL.to_string(), password.to_string());
    labels
}

/// The one-shot that fills an environment's new data volume from `template`, with no network, as
/// the server's user. It fails (status 3) when the template is not finished.
pub fn copy_template(image: &str, template: &str, volume: &str, pgdata: &str) -> OneShot {
    OneShot {
        role: "database-copy".to_string(),
        image: image.to_string(),
        network_mode: "none".to_string(),
        entrypoint: Some(vec![
            "sh".to_string(),
            "-c".to_string(),
            format!(
                "test -f {TEMPLATE_MOUNT}/{TEMPLATE_READY} || exit 3; cp -a {TEMPLATE_MOUNT}/. \"$0\"/ && rm -f \"$0\"/{TEMPLATE_READY} \"$0\"/postmaster.pid"
            ),
            pgdata.to_string(),
        ]),
        user: Some(SERVER_USER.to_string()),
        binds: vec![
            format!("{template}:{TEMPLATE_MOUNT}:ro"),
            format!("{volume}:{pgdata}"),
        ],
        ..Default::default()
    }
}

/// psql as the superuser on the server's own socket, stopping at the first error: the command af
/// runs in the server's container for every step below.
pub fn psql_as_superuser(database: &str) -> Vec<String> {
    [
        "psql",
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        "/var/run/postgresql",
        "-U",
        SERVER_USER,
        "-d",
        database,
    ]
    .map(String::from)
    .to_vec()
}

/// psql as [`OWNER`] on the server's socket, on `database`: the seed, and `af db psql`.
pub fn psql_as_owner(database: &str, args: &[String]) -> Vec<String> {
    let mut cmd: Vec<String> = [
        "psql",
        "-X",
        "-h",
        "/var/run/postgresql",
        "-U",
        OWNER,
        "-d",
        database,
    ]
    .map(String::from)
    .to_vec();
    cmd.extend(args.iter().cloned());
    cmd
}

/// psql applying the seed (on its standard input) to `database` as [`OWNER`]: in one transaction
/// (all of it or nothing, and one commit rather than one per statement), stopping at the first
/// error.
pub fn apply_seed(database: &str) -> Vec<String> {
    let mut cmd = psql_as_owner(database, &[]);
    cmd.extend(
        [
            "-q",
            "--single-transaction",
            "-v",
            "ON_ERROR_STOP=1",
            "-f",
            "-",
        ]
        .map(String::from),
    );
    cmd
}

/// The template's roles and database, before the seed: [`OWNER`] owns the template's schema (so
/// what the seed makes is the services' own), the template itself is the superuser's, and the
/// superuser gets no password (no login over the network).
pub fn template_setup_sql() -> String {
    format!(
        "CREATE ROLE {OWNER} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;\n\
         CREATE DATABASE {TEMPLATE_DATABASE};\n\
         ALTER ROLE {SERVER_USER} PASSWORD NULL;\n\
         \\connect {TEMPLATE_DATABASE}\n\
         ALTER SCHEMA public OWNER TO {OWNER};\n\
         GRANT CONNECT, TEMPORARY ON DATABASE {TEMPLATE_DATABASE} TO {OWNER};\n"
    )
}

/// After the seed: nobody connects to the template again, so a branch can always be copied
/// from it.
pub fn template_seal_sql() -> String {
    format!(
        "ALTER DATABASE {TEMPLATE_DATABASE} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false;\n\
         CHECKPOINT;\n"
    )
}

/// At every start of an environment's server: [`OWNER`]'s password, and the branch if it does
/// not exist yet (a restarted server keeps its data).
pub fn branch_sql(branch: &str, password: &str) -> String {
    format!(
        "ALTER ROLE {OWNER} PASSWORD '{password}';\n\
         SELECT format('CREATE DATABASE %I OWNER {OWNER} TEMPLATE {TEMPLATE_DATABASE}', '{branch}') \
         WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '{branch}')\\gexec\n"
    )
}

/// `af db reset`: the branch dropped (its connections ended) and made again from the template.
pub fn reset_sql(branch: &str) -> String {
    format!(
        "DROP DATABASE IF EXISTS {branch} WITH (FORCE);\n\
         CREATE DATABASE {branch} OWNER {OWNER} TEMPLATE {TEMPLATE_DATABASE};\n"
    )
}

/// The addresses a server's log says it received connections from (`log_connections`), in the
/// order it accepted them: where a route to the database is judged.
pub fn connections_received(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| line.split("connection received: host=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The branch's size in bytes, printed alone.
pub fn size_sql(branch: &str) -> String {
    format!("SELECT pg_database_size('{branch}');\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_string_names_the_server_the_branch_and_the_owner_and_debug_hides_the_password()
     {
        let env = EnvironmentId::derive("shop", "feature-x");
        let connection = Connection::for_environment(&env, "s3cret".into());
        assert_eq!(
            connection.url(),
            "postgres://app:s3cret@af-shop-feature-x-database:5432/shop_feature_x"
        );
        assert!(!format!("{connection:?}").contains("s3cret"));
    }

    #[test]
    fn passwords_are_long_url_safe_and_new_each_time() {
        let (a, b) = (new_password().unwrap(), new_password().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn connections_are_read_off_the_log_in_order() {
        let log = "LOG:  database system is ready\n\
                   2026-12-05 LOG:  connection received: host=10.213.7.130 port=40312\n\
                   LOG:  connection authorized: user=app\n\
                   2026-12-05 LOG:  connection received: host=[local]\n";
        assert_eq!(connections_received(log), ["10.213.7.130", "[local]"]);
    }

    #[test]
    fn a_template_is_per_image_and_seed() {
        let one = template_volume("sha256:a", b"create table t();");
        assert_eq!(one, template_volume("sha256:a", b"create table t();"));
        assert_ne!(one, template_volume("sha256:b", b"create table t();"));
        assert_ne!(one, template_volume("sha256:a", b"create table u();"));
        assert!(one.starts_with("af-db-template-"));
    }

    #[test]
    fn the_server_gives_up_everything_and_publishes_nothing() {
        let env = EnvironmentId::derive("shop", "main");
        let body = server(Server {
            image: "af-postgres:latest",
            network: "container:af-shop-main-database",
            volume: "af-shop-main-database-data",
            pgdata: DEFAULT_PGDATA,
            env_vars: Vec::new(),
            labels: server_labels(&env, "spec", "tmpl", "pw"),
        });
        let host = body.host_config.unwrap();
        assert_eq!(body.user.as_deref(), Some("postgres"));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.cap_add, None);
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_string()])
        );
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.port_bindings, None);
        assert_eq!(host.publish_all_ports, None);
        assert_eq!(
            host.network_mode.as_deref(),
            Some("container:af-shop-main-database")
        );
        assert!(body.exposed_ports.is_none());
    }

    #[test]
    fn the_branch_is_made_once_and_reset_from_the_template() {
        let sql = branch_sql("shop_main", "pw");
        assert!(sql.contains("WHERE NOT EXISTS"), "{sql}");
        assert!(sql.contains("TEMPLATE af_template"), "{sql}");
        let reset = reset_sql("shop_main");
        assert!(reset.starts_with("DROP DATABASE IF EXISTS shop_main WITH (FORCE)"));
        assert!(template_seal_sql().contains("ALLOW_CONNECTIONS false"));
        assert!(template_setup_sql().contains("NOSUPERUSER"));
    }
}
