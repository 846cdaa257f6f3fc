//! `database: {provider: container}` on the real daemon: each environment's branch made from the
//! seed's template, reached by its services (and its migration) with the connection string af
//! hands them, as a role that owns the branch and is not a superuser; `af db reset`; two
//! environments' branches apart; the server reached from nothing outside its environment, judged
//! where the connection would land — the server's own log of every connection it received —
//! beside a positive control from the environment's own service; what a seed or a missing image
//! does; and `down` taking the server and its data, not the template.
//!
//! The service is the database image itself running `sleep`, so the tests reach the branch with
//! its psql, from inside the service's pod.

mod support;

use af_docker::{LocalRuntime, one_shot};
use af_manifest::EnvironmentId;
use af_runtime::{Environment, ProgressEvent, ProgressSink, RunCode, Runtime};
use bollard::Docker;

struct Quiet;

impl ProgressSink for Quiet {
    fn emit(&self, _: ProgressEvent) {}
}

const SEED: &str = "CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL);\nINSERT INTO orders (item) VALUES ('seeded');\n";

/// A folder with the seed and a manifest whose service `api` is the database image sleeping (its
/// psql is the tests' client) and whose migration makes a table in the branch.
fn manifest_dir(tag: &str, seed: &str, image: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("af-db-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("seed.sql"), seed).unwrap();
    std::fs::write(
        dir.join("af.yaml"),
        format!(
            "name: afdb\nruntime: {{provider: local}}\nservices:\n  api:\n    image: {db}\n    command: [sleep, infinity]\n    migrate: [sh, -c, 'psql \"$DATABASE_URL\" -q -c \"CREATE TABLE IF NOT EXISTS migrated (x int)\"']\ndatabase:\n  provider: container\n  image: {image}\n  seed: seed.sql\n",
            db = support::db_image(),
        ),
    )
    .unwrap();
    dir
}

fn environment(dir: &std::path::Path, name: &str) -> Environment {
    Environment {
        id: EnvironmentId::derive("afdb", &format!("{name}-{}", std::process::id())),
        manifest: af_manifest::load(dir.join("af.yaml")).unwrap(),
        manifest_dir: dir.to_path_buf(),
    }
}

/// psql in `container` (a service's application container, or any container with psql) with the
/// service's own connection string, or `target` when given; (status, output).
async fn psql(docker: &Docker, container: &str, target: Option<&str>, sql: &str) -> (i64, String) {
    let connect = target.map_or_else(|| "\"$DATABASE_URL\"".to_string(), str::to_string);
    let script = format!("psql {connect} -X -q -At -v ON_ERROR_STOP=1 -f - 2>&1");
    let ran = one_shot::exec(
        docker,
        container,
        "postgres",
        vec!["sh".into(), "-c".into(), script],
        sql.as_bytes().to_vec(),
    )
    .await
    .unwrap();
    (ran.exit_code, ran.stdout.trim().to_string())
}

/// [`psql`] with the service's own connection string, which must succeed: what it printed.
async fn answer(docker: &Docker, container: &str, sql: &str) -> String {
    let (status, said) = psql(docker, container, None, sql).await;
    assert_eq!(status, 0, "{sql} in {container}: {said}");
    said
}

async fn inspect(docker: &Docker, container: &str) -> bollard::models::ContainerInspectResponse {
    docker
        .inspect_container(
            container,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap_or_else(|e| panic!("inspecting {container}: {e}"))
}

async fn address_of(docker: &Docker, container: &str, network: &str) -> String {
    inspect(docker, container)
        .await
        .network_settings
        .and_then(|n| n.networks)
        .and_then(|mut n| n.remove(network))
        .and_then(|e| e.ip_address)
        .unwrap_or_else(|| panic!("{container} has no address on {network}"))
}

/// The server's arrivals (`af_docker::database::arrivals`) once they include `from` at least
/// `times` times: asked again until they do (the server writes the line as it accepts, a moment
/// after the client saw the connection), for up to 10 s.
async fn arrivals_with(
    docker: &Docker,
    env: &EnvironmentId,
    from: &str,
    times: usize,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let seen = af_docker::database::arrivals(docker, env).await;
        let count = seen.iter().filter(|a| *a == from).count();
        if count >= times || std::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Two environments of one manifest (with the seed), both up, removed when the test ends.
struct TwoUp {
    docker: Docker,
    runtime: LocalRuntime,
    dir: std::path::PathBuf,
    one: Environment,
    two: Environment,
    _cleanup: (support::Teardown, support::Teardown),
}

async fn two_environments_up(tag: &str, names: [&str; 2]) -> TwoUp {
    let (docker, _) = support::daemon_and_engine().await;
    let dir = manifest_dir(tag, SEED, &support::db_image());
    let (one, two) = (environment(&dir, names[0]), environment(&dir, names[1]));
    let _cleanup = (
        support::Teardown(docker.clone(), one.id.clone()),
        support::Teardown(docker.clone(), two.id.clone()),
    );
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());
    for env in [&one, &two] {
        runtime
            .up(env, &Quiet)
            .await
            .unwrap_or_else(|e| panic!("up of {}: {e}", env.id));
    }
    TwoUp {
        docker,
        runtime,
        dir,
        one,
        two,
        _cleanup,
    }
}

/// A label of `container`, which it must have.
async fn label_of(docker: &Docker, container: &str, label: &str) -> String {
    inspect(docker, container)
        .await
        .config
        .and_then(|c| c.labels)
        .and_then(|mut l| l.remove(label))
        .unwrap_or_else(|| panic!("{container} has no label {label}"))
}

#[tokio::test]
async fn each_environment_gets_its_own_branch_from_the_seed_and_reset_makes_it_fresh_again() {
    let TwoUp {
        docker,
        runtime,
        dir,
        one,
        two,
        _cleanup,
    } = two_environments_up("branches", ["one", "two"]).await;
    let api = |env: &Environment| format!("af-{}-api-0", env.id);

    // The seed's row and the migration's table are in each branch.
    assert_eq!(
        answer(&docker, &api(&one), "SELECT item FROM orders;").await,
        "seeded"
    );
    assert_eq!(
        answer(&docker, &api(&one), "SELECT count(*) FROM migrated;").await,
        "0",
        "the migration ran against the branch"
    );
    // An order in one environment is not in the other's branch.
    assert_eq!(
        answer(
            &docker,
            &api(&one),
            "INSERT INTO orders (item) VALUES ('one''s'); SELECT count(*) FROM orders;"
        )
        .await,
        "2"
    );
    assert_eq!(
        answer(&docker, &api(&two), "SELECT count(*) FROM orders;").await,
        "1"
    );

    // The services' role owns its branch and is no superuser: it makes tables, and cannot run a
    // program in the server's container.
    assert_eq!(
        answer(
            &docker,
            &api(&one),
            "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user;"
        )
        .await,
        "app|f"
    );
    let (status, said) = psql(
        &docker,
        &api(&one),
        None,
        "COPY (SELECT 1) TO PROGRAM 'id';",
    )
    .await;
    assert!(
        status != 0 && said.contains("pg_execute_server_program"),
        "{said}"
    );

    // af status names the branch and its size; the connection string is in no status.
    let status = runtime.status(&one.id).await.unwrap();
    let database = status.database.clone().expect("a database in the status");
    assert_eq!(database.branch, one.id.as_str().replace('-', "_"));
    assert!(database.running);
    assert!(database.size_bytes.unwrap_or(0) > 1 << 20, "{database:?}");
    let password = label_of(
        &docker,
        &format!("af-{}-database-server", one.id),
        "dev.antifailure.database-password",
    )
    .await;
    assert!(!serde_json::to_string(&status).unwrap().contains(&password));

    // af db psql runs as the branch's owner through the container.
    let shell = runtime
        .database_shell(
            &one.id,
            &["-At".to_string()],
            b"SELECT count(*) FROM orders;".to_vec(),
        )
        .await
        .unwrap();
    assert_eq!((shell.exit_code, shell.stdout.trim()), (0, "2"));

    // af db reset: back to the seed, while the service stays connected to the same string.
    runtime.reset_database(&one.id).await.unwrap();
    assert_eq!(
        answer(&docker, &api(&one), "SELECT item FROM orders;").await,
        "seeded"
    );

    // A second up changes nothing: the same password, the same server, the same data.
    answer(
        &docker,
        &api(&one),
        "INSERT INTO orders (item) VALUES ('kept');",
    )
    .await;
    let again = runtime.up(&one, &Quiet).await.unwrap();
    assert!(again.unchanged, "a second up keeps the database as it runs");
    assert_eq!(
        answer(&docker, &api(&one), "SELECT count(*) FROM orders;").await,
        "2"
    );

    // A pod that stopped (a restarted machine) is made again around the same data.
    for container in ["database-server", "database"] {
        docker
            .stop_container(
                &format!("af-{}-{container}", one.id),
                None::<bollard::query_parameters::StopContainerOptions>,
            )
            .await
            .unwrap();
    }
    let restarted = runtime.up(&one, &Quiet).await.unwrap();
    assert!(
        !restarted.unchanged,
        "the stopped database was started again"
    );
    assert_eq!(
        answer(&docker, &api(&one), "SELECT count(*) FROM orders;").await,
        "2",
        "its data was kept"
    );

    // down takes the server and its data volume; the template stays for the next environment.
    runtime.down(&one.id, &Quiet).await.unwrap();
    let left = af_docker::teardown::volumes(&docker, &one.id)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        docker
            .inspect_container(
                &format!("af-{}-database-server", one.id),
                None::<bollard::query_parameters::InspectContainerOptions>
            )
            .await
            .is_err()
    );
    let template = label_of(
        &docker,
        &format!("af-{}-database-server", two.id),
        "dev.antifailure.database-template",
    )
    .await;
    assert!(docker.inspect_volume(&template).await.is_ok());
    runtime.down(&two.id, &Quiet).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A container of the test's own on `network`, with psql (the database image, sleeping).
struct Client {
    docker: Docker,
    name: String,
}

impl Client {
    async fn on(docker: &Docker, name: &str, network: &str) -> Client {
        let _ = one_shot::remove(docker, name).await;
        one_shot::create_and_start(
            docker,
            name,
            bollard::models::ContainerCreateBody {
                image: Some(support::db_image()),
                user: Some("postgres".into()),
                cmd: Some(vec!["sleep".into(), "infinity".into()]),
                host_config: Some(bollard::models::HostConfig {
                    network_mode: Some(network.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            &[],
        )
        .await
        .unwrap();
        Client {
            docker: docker.clone(),
            name: name.to_string(),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let (docker, name) = (self.docker.clone(), self.name.clone());
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async { one_shot::remove(&docker, &name).await })
        })
        .join()
        .unwrap()
        .unwrap();
    }
}

#[tokio::test]
async fn the_branch_answers_its_own_services_and_nothing_outside_its_environment() {
    let TwoUp {
        docker,
        runtime: _runtime,
        dir,
        one: ours,
        two: theirs,
        _cleanup,
    } = two_environments_up("reach", ["ours", "theirs"]).await;
    let server = format!("af-{}-database-server", ours.id);
    let pod = format!("af-{}-database", ours.id);
    let internal = af_docker::names::internal_network(&ours.id);
    let server_ip = address_of(&docker, &pod, &internal).await;
    let our_api = format!("af-{}-api-0", ours.id);
    let our_holder = format!("af-{}-api-0-holder", ours.id);
    let our_api_ip = address_of(&docker, &our_holder, &internal).await;
    // Every attempt names the server by address, with the password: only the network stands in
    // the way.
    let password = label_of(&docker, &server, "dev.antifailure.database-password").await;
    let target = format!(
        "'postgres://app:{password}@{server_ip}:5432/{}?connect_timeout=3'",
        ours.id.as_str().replace('-', "_")
    );

    // The positive control: our own service, by the same address, is answered and logged.
    assert_eq!(
        psql(&docker, &our_api, Some(&target), "SELECT 'reached';").await,
        (0, "reached".to_string())
    );
    let logged = arrivals_with(&docker, &ours.id, &our_api_ip, 1).await;
    assert!(logged.contains(&our_api_ip), "{logged:?} from {our_api_ip}");
    // What keeps everything else out: the server is in its pod's namespace, whose holder is on
    // the environment's internal network alone, and nothing publishes a port on the host.
    let inspected = inspect(&docker, &server).await;
    let holder = inspect(&docker, &pod).await;
    assert_eq!(
        inspected
            .host_config
            .as_ref()
            .and_then(|h| h.network_mode.clone()),
        holder.id.as_ref().map(|id| format!("container:{id}"))
    );
    let networks: Vec<String> = holder
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default()
        .into_keys()
        .collect();
    assert_eq!(networks, std::slice::from_ref(&internal));
    for host_config in [inspected.host_config, holder.host_config] {
        let published = host_config.and_then(|h| h.port_bindings);
        assert!(
            published.as_ref().is_none_or(|p| p.is_empty()),
            "{published:?}"
        );
    }

    // Another environment's service.
    let their_api = format!("af-{}-api-0", theirs.id);
    let their_ip = address_of(
        &docker,
        &format!("af-{}-api-0-holder", theirs.id),
        &af_docker::names::internal_network(&theirs.id),
    )
    .await;
    let (status, said) = psql(&docker, &their_api, Some(&target), "SELECT 'reached';").await;
    assert_ne!(status, 0, "another environment reached our branch: {said}");

    // A container on the daemon's default network, and one on a network of its own: the host's
    // other networks, with no refusal rules of af's in the way.
    let bridge = Client::on(
        &docker,
        &format!("afdb-bridge-{}", std::process::id()),
        "bridge",
    )
    .await;
    let (status, said) = psql(&docker, &bridge.name, Some(&target), "SELECT 'reached';").await;
    assert_ne!(status, 0, "the default network reached our branch: {said}");
    let network = format!("afdb-net-{}", std::process::id());
    let _ = docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: network.clone(),
            ..Default::default()
        })
        .await;
    let other = Client::on(
        &docker,
        &format!("afdb-other-{}", std::process::id()),
        &network,
    )
    .await;
    let (status, said) = psql(&docker, &other.name, Some(&target), "SELECT 'reached';").await;
    let other_ip = address_of(&docker, &other.name, &network).await;
    let bridge_ip = address_of(&docker, &bridge.name, "bridge").await;
    drop((bridge, other));
    let _ = docker.remove_network(&network).await;
    assert_ne!(status, 0, "another network reached our branch: {said}");

    // Judged where it would have landed: the server logged none of them — read once our own
    // service's second connection, made after them, is in the log (written in accept order).
    let ours_before = logged.iter().filter(|a| **a == our_api_ip).count();
    assert_eq!(
        psql(&docker, &our_api, Some(&target), "SELECT 'reached';").await,
        (0, "reached".to_string())
    );
    let logged = arrivals_with(&docker, &ours.id, &our_api_ip, ours_before + 1).await;
    for stranger in [&their_ip, &bridge_ip, &other_ip] {
        assert!(
            !logged.contains(stranger),
            "{stranger} reached the server: {logged:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether a TCP connection from `container` (as `user`, with its bash) to `target` opens.
async fn connects(docker: &Docker, container: &str, user: &str, target: &str) -> bool {
    let (host, port) = target.rsplit_once(':').unwrap();
    let script = format!("exec 3<>/dev/tcp/{host}/{port}");
    one_shot::exec(
        docker,
        container,
        user,
        vec![
            "timeout".into(),
            "5".into(),
            "bash".into(),
            "-c".into(),
            script,
        ],
        Vec::new(),
    )
    .await
    .unwrap()
    .exit_code
        == 0
}

/// The database's image is the manifest's choice, so its pod is held to a service's rules: from
/// the server's own namespace the host's side of the network (where a platform API listens) is
/// refused, judged at a listener there, beside a container on the same network without those
/// rules whose connection arrives.
#[tokio::test]
async fn the_database_runs_under_a_services_refusal_rules() {
    let (docker, _) = support::daemon_and_engine().await;
    let dir = manifest_dir("rules", SEED, &support::db_image());
    let env = environment(&dir, "rules");
    let _cleanup = support::Teardown(docker.clone(), env.id.clone());
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());
    runtime
        .up(&env, &Quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let internal = af_docker::names::internal_network(&env.id);
    let layout = af_docker::networks::layout(&docker, &internal)
        .await
        .unwrap();
    let gateway = layout
        .gateways
        .iter()
        .find(|g| !g.contains(':'))
        .unwrap()
        .clone();
    // The listener, on the host's side of the environment's network.
    let listener = std::net::TcpListener::bind((gateway.as_str(), 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let target = format!("{gateway}:{}", listener.local_addr().unwrap().port());
    let arrived = |listener: &std::net::TcpListener| {
        let mut from = Vec::new();
        while let Ok((_, peer)) = listener.accept() {
            from.push(peer.ip().to_string());
        }
        from
    };

    let control = Client::on(
        &docker,
        &format!("afdb-rules-{}", std::process::id()),
        &internal,
    )
    .await;
    let control_ip = address_of(&docker, &control.name, &internal).await;
    assert!(
        connects(&docker, &control.name, "postgres", &target).await,
        "the positive control did not connect"
    );
    let server = format!("af-{}-database-server", env.id);
    let server_ip = address_of(&docker, &format!("af-{}-database", env.id), &internal).await;
    assert!(
        !connects(&docker, &server, "postgres", &target).await,
        "the database's namespace reached the host's side of its network"
    );
    let from = arrived(&listener);
    drop(control);
    assert!(from.contains(&control_ip), "{from:?}");
    assert!(!from.contains(&server_ip), "{from:?}");
    runtime.down(&env.id, &Quiet).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_failing_seed_and_a_missing_image_stop_up_with_their_codes_and_leave_no_template() {
    let (docker, _) = support::daemon_and_engine().await;
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());

    let broken = "CREATE TABLE t (x int);\nINSERT INTO nowhere VALUES (1);\n";
    let dir = manifest_dir("seed", broken, &support::db_image());
    let env = environment(&dir, "seed");
    let _cleanup = support::Teardown(docker.clone(), env.id.clone());
    let err = runtime.up(&env, &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::SeedFailed, "{err}");
    assert!(
        err.to_string().contains("seed.sql") && err.to_string().contains("nowhere"),
        "{err}"
    );
    let image = af_docker::database::image(&docker, &support::db_image())
        .await
        .unwrap();
    let template = af_docker::plan::database::template_volume(&image.id, broken.as_bytes());
    assert!(
        docker.inspect_volume(&template).await.is_err(),
        "a failed template is not kept"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let dir = manifest_dir("image", SEED, "af-test-no-such-image:never");
    let env = environment(&dir, "image");
    let _cleanup = support::Teardown(docker.clone(), env.id.clone());
    let err = runtime.up(&env, &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::DatabaseImageMissing, "{err}");
    assert!(err.help().contains("database.image"), "{}", err.help());
    let made = af_docker::teardown::containers(&docker, &env.id)
        .await
        .unwrap();
    assert!(made.is_empty(), "nothing is started: {made:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The "existing database" of `provider: external`: PostgreSQL (the database image) at `ip` on an
/// outside network of the test's own, answering to `name` there, logging every connection it
/// receives. Removed when dropped, before its network.
struct ExternalServer {
    docker: Docker,
    container: String,
}

const EXTERNAL_PASSWORD: &str = "external-password-0123";

/// The external database's start: a CA, a server certificate for NAME signed by it, then the
/// image's own entrypoint with TLS on and every connection logged.
const TLS_SERVER: &str = "set -e; cd /tmp; \
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=af-test-ca -keyout ca.key -out ca.crt 2>/dev/null; \
openssl req -newkey rsa:2048 -nodes -subj /CN=NAME -addext subjectAltName=DNS:NAME -keyout server.key -out server.csr 2>/dev/null; \
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -copy_extensions copy -out server.crt 2>/dev/null; \
chmod 600 server.key; \
exec /usr/local/bin/af-postgres-entrypoint postgres -c log_connections=on -c ssl=on -c ssl_cert_file=/tmp/server.crt -c ssl_key_file=/tmp/server.key";

impl ExternalServer {
    async fn start(docker: &Docker, outside: &support::Outside, ip: &str, name: &str) -> Self {
        use bollard::models::{
            ContainerCreateBody, EndpointIpamConfig, EndpointSettings, NetworkingConfig,
        };
        let container = format!("{}-external-db", outside.network);
        let server = ExternalServer {
            docker: docker.clone(),
            container: container.clone(),
        };
        let _ = one_shot::remove(docker, &container).await;
        let body = ContainerCreateBody {
            image: Some(support::db_image()),
            user: Some("postgres".into()),
            env: Some(vec![
                format!("POSTGRES_PASSWORD={EXTERNAL_PASSWORD}"),
                "POSTGRES_USER=ext".into(),
                "POSTGRES_DB=orders".into(),
            ]),
            // TLS with a certificate for `name` from a CA of its own, made at start.
            entrypoint: Some(vec![
                "sh".into(),
                "-c".into(),
                TLS_SERVER.replace("NAME", name),
            ]),
            networking_config: Some(NetworkingConfig {
                endpoints_config: Some(std::collections::HashMap::from([(
                    outside.network.clone(),
                    EndpointSettings {
                        aliases: Some(vec![name.to_string()]),
                        ipam_config: Some(EndpointIpamConfig {
                            ipv4_address: Some(ip.to_string()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                )])),
            }),
            ..Default::default()
        };
        docker
            .create_container(
                Some(
                    bollard::query_parameters::CreateContainerOptionsBuilder::new()
                        .name(&container)
                        .build(),
                ),
                body,
            )
            .await
            .unwrap_or_else(|e| panic!("creating {container}: {e}"));
        docker
            .start_container(
                &container,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .unwrap();
        // Ready once it answers over TCP (its first start makes the cluster, then restarts).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let ready = one_shot::exec(
                docker,
                &container,
                "postgres",
                ["pg_isready", "-h", ip, "-p", "5432"]
                    .map(String::from)
                    .to_vec(),
                Vec::new(),
            )
            .await
            .is_ok_and(|ran| ran.exit_code == 0);
            if ready {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the external database never answered: {}",
                af_docker::service::last_log_lines(docker, &container, 20).await
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        server
    }

    /// The addresses it logged a connection from, in order.
    async fn arrivals(&self) -> Vec<String> {
        af_docker::plan::database::connections_received(
            &af_docker::service::last_log_lines(&self.docker, &self.container, 100_000).await,
        )
    }

    /// [`Self::arrivals`] once `from` is among them after the first `known`; for up to 10 s.
    async fn arrival_from(&self, known: usize, from: &str) -> Vec<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let seen = self.arrivals().await;
            if seen.iter().skip(known).any(|a| a == from) || std::time::Instant::now() >= deadline {
                return seen;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ExternalServer {
    fn drop(&mut self) {
        let (docker, container) = (self.docker.clone(), self.container.clone());
        support::removed_when_dropped(async move {
            let _ = one_shot::remove(&docker, &container).await;
        });
    }
}

/// A manifest whose service `api` (the database image sleeping: its psql is the client) uses an
/// external database read from `EXTERNAL_URL`, with `database_lines` more under `database:`.
fn external_manifest(tag: &str, database_lines: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("af-db-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("af.yaml"),
        format!(
            "name: afdb\nruntime: {{provider: local}}\nservices:\n  api:\n    image: {db}\n    command: [sleep, infinity]\ndatabase:\n  provider: external\n  url_from_env: EXTERNAL_URL\n{database_lines}",
            db = support::db_image(),
        ),
    )
    .unwrap();
    dir
}

/// `provider: external`: the service reaches an existing database only through the sidecar's
/// relay — its connection string keeps the database's name, which inside the environment is the
/// sidecar's — and every connection is in the decision log with its bytes each way. Judged at the
/// database's own log of the connections it received: through the relay they come from the
/// sidecar; the service's direct route to the database's address lands nowhere, while a client on
/// the database's network (the positive control) lands at once, with nothing before it. TLS is the
/// client's and the server's: `sslmode=verify-full` with the server's CA works through the relay
/// (the name was kept, and the sidecar presents nothing of its own), and fails when aimed at the
/// sidecar's address, which the certificate does not name. A host the manifest neither names nor
/// allows stops `af up` before anything is made (AF-RUN-071).
#[tokio::test]
async fn an_external_database_is_reached_only_through_the_sidecar_and_recorded() {
    let (docker, image) = support::daemon_and_engine().await;
    let outside = support::Outside::create(&docker, &image, "extdb", "10.214.91.0/24").await;
    let server = ExternalServer::start(&docker, &outside, "10.214.91.20", "db.external.test").await;
    // Its readiness check connected from its own address; what arrives after is the test's.
    let known = server.arrival_from(0, "10.214.91.20").await.len();
    let url = format!("postgres://ext:{EXTERNAL_PASSWORD}@db.external.test:5432/orders");
    let variables = {
        let url = url.clone();
        move |name: &str| (name == "EXTERNAL_URL").then(|| url.clone())
    };
    let runtime =
        LocalRuntime::new(docker.clone(), support::unanswered_targets()).with_variables(variables);

    // Neither named nor allowed: refused before anything exists.
    let refused_dir = external_manifest("ext-refused", "");
    let refused = environment(&refused_dir, "ext-refused");
    let _refused_cleanup = support::Teardown(docker.clone(), refused.id.clone());
    let err = runtime.up(&refused, &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::ExternalDatabaseHostNotAllowed, "{err}");
    assert!(!err.to_string().contains(EXTERNAL_PASSWORD), "{err}");
    assert!(
        af_docker::teardown::containers(&docker, &refused.id)
            .await
            .unwrap()
            .is_empty(),
        "nothing was made"
    );

    let dir = external_manifest("ext", "  host: db.external.test\n");
    let env = environment(&dir, "ext");
    let _cleanup = support::Teardown(docker.clone(), env.id.clone());
    runtime
        .up(&env, &Quiet)
        .await
        .unwrap_or_else(|e| panic!("up: {e}"));
    let api = af_docker::names::container(&env.id, "api-0");
    let holder = af_docker::names::container(&env.id, "api-0-holder");
    let sidecar = af_docker::names::container(&env.id, "sidecar");
    // The sidecar's egress side reaches the database's network, as its route out would.
    docker
        .connect_network(
            &outside.network,
            bollard::models::NetworkConnectRequest {
                container: sidecar.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let sidecar_there = address_of(&docker, &sidecar, &outside.network).await;
    let status = runtime.status(&env.id).await.unwrap();
    let status_relay_ip = address_of(
        &docker,
        &sidecar,
        &af_docker::names::internal_network(&env.id),
    )
    .await;
    assert_eq!(status.database, None, "an external database has no branch");
    assert_eq!(
        status.external_database,
        Some(af_runtime::ExternalDatabaseStatus {
            host: "db.external.test".into(),
            port: 5432,
            relay: format!("{status_relay_ip}:5432"),
            named_by: Some("database.host".into()),
        })
    );
    let given = inspect(&docker, &api)
        .await
        .config
        .and_then(|c| c.env)
        .unwrap_or_default();
    assert!(
        given.contains(&format!("DATABASE_URL={url}")),
        "the service's connection string keeps the database's name"
    );

    // Through the relay: a write and a read with the service's own connection string.
    let said = answer(
        &docker,
        &api,
        "CREATE TABLE relayed (item text); INSERT INTO relayed VALUES ('through the sidecar'); SELECT item FROM relayed;",
    )
    .await;
    assert_eq!(said, "through the sidecar");
    let seen = server.arrival_from(known, &sidecar_there).await;
    assert_eq!(
        &seen[known..],
        std::slice::from_ref(&sidecar_there),
        "the database saw the sidecar and nothing else"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let record = loop {
        let log = runtime
            .net_log(&env.id, &af_runtime::DecisionQuery::default())
            .await
            .unwrap();
        if let Some(record) = log.into_iter().find(|r| r.protocol == "relay") {
            break record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no relay record in the decision log"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(record.verdict, af_runtime::Verdict::Allow);
    assert_eq!(
        (record.host.as_str(), record.port),
        ("db.external.test", 5432)
    );
    assert_eq!(record.resolved, "10.214.91.20:5432");
    assert_eq!(record.rule, "database.host");
    assert!(
        record.bytes_up > 100 && record.bytes_down > 100,
        "bytes each way: {record:?}"
    );
    assert_eq!(
        record.client,
        address_of(
            &docker,
            &holder,
            &af_docker::names::internal_network(&env.id)
        )
        .await
    );

    // TLS through the relay is the client's and the server's: with the server's CA, verify-full
    // checks the certificate against the name in the connection string, which the relay kept.
    let ca = one_shot::exec(
        &docker,
        &server.container,
        "postgres",
        ["cat", "/tmp/ca.crt"].map(String::from).to_vec(),
        Vec::new(),
    )
    .await
    .unwrap()
    .stdout;
    let copied = one_shot::exec(
        &docker,
        &api,
        "postgres",
        ["sh", "-c", "cat > /tmp/ca.crt"].map(String::from).to_vec(),
        ca.into_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(copied.exit_code, 0, "{}", copied.stderr);
    let verified = "\"$DATABASE_URL?sslmode=verify-full&sslrootcert=/tmp/ca.crt\"";
    let (status, said) = psql(
        &docker,
        &api,
        Some(verified),
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid();",
    )
    .await;
    assert_eq!(
        (status, said.as_str()),
        (0, "t"),
        "verify-full through the relay"
    );
    // The control: the same certificate does not name the sidecar's address, so verify-full
    // aimed at the relay by address is refused — the sidecar presented nothing of its own.
    let by_address = format!(
        "'postgres://ext:{EXTERNAL_PASSWORD}@{}:5432/orders?sslmode=verify-full&sslrootcert=/tmp/ca.crt'",
        status_relay_ip
    );
    let (status, said) = psql(&docker, &api, Some(&by_address), "SELECT 1;").await;
    assert_ne!(status, 0, "verify-full by the sidecar's address: {said}");
    assert!(said.contains("does not match host name"), "{said}");

    // Both went through the relay: once the database has logged them, what comes next is new.
    let seen = server.arrival_from(seen.len() + 1, &sidecar_there).await;
    assert_eq!(
        seen[known..],
        [
            sidecar_there.clone(),
            sidecar_there.clone(),
            sidecar_there.clone()
        ],
        "the database saw the sidecar and nothing else"
    );

    // The direct route: the service aims at the database's own address, and fails.
    let (status, said) = psql(
        &docker,
        &api,
        Some(&format!(
            "postgres://ext:{EXTERNAL_PASSWORD}@10.214.91.20:5432/orders?connect_timeout=3"
        )),
        "SELECT 1;",
    )
    .await;
    assert_ne!(
        status, 0,
        "the service reached the database directly: {said}"
    );
    // Positive control: a client on the database's network lands at once, and the log holds
    // nothing between the sidecar's connection and it.
    let control = one_shot::start_holder(&docker, &env.id, "ext-control", &image, &outside.network)
        .await
        .unwrap();
    let control_ip = address_of(&docker, &control, &outside.network).await;
    let control_client = one_shot::OneShot {
        role: "ext-control-client".into(),
        image: support::db_image(),
        args: ["pg_isready", "-h", "10.214.91.20", "-p", "5432"]
            .map(String::from)
            .to_vec(),
        network_mode: format!("container:{control}"),
        user: Some("postgres".into()),
        ..Default::default()
    };
    let probe = one_shot::run(&docker, &env.id, &control_client)
        .await
        .unwrap();
    let after = server.arrival_from(seen.len(), &control_ip).await;
    assert_eq!(
        after[seen.len()..].first(),
        Some(&control_ip),
        "the positive control landed, with nothing before it: {after:?} ({})",
        probe.stdout
    );
    drop(server);
}
