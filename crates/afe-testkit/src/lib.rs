//! Test support for afe: real servers, each test isolated. `.ci/install` installs and starts
//! PostgreSQL (role `afe`, password `afe`, may create databases) and Redis on 127.0.0.1; a test
//! whose server is missing fails and says how to start it — it is never skipped.

pub mod checkov;
pub mod git_server;
pub mod kube_script;
pub mod kubernetes_validate;
pub mod mcp_server;
pub mod model_server;
pub mod otlp_receiver;
pub mod real_model;
pub mod sandbox_image;

pub use git_server::GitServer;
pub use mcp_server::McpHttpServer;
pub use model_server::{Answer, ModelServer, Reply};
pub use otlp_receiver::OtlpReceiver;
pub use real_model::RealModelServer;
pub use sandbox_image::{
    acp_sandbox_image, sandbox_image, sandbox_objects, testkit_binary, wait_for_process,
};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use afe_config::Revision;
use sqlx::Connection;

/// The PostgreSQL database tests connect to in order to create their own.
pub fn postgres_admin_url() -> String {
    std::env::var("AFE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://afe:afe@127.0.0.1:5432/postgres".to_string())
}

pub fn redis_url() -> String {
    std::env::var("AFE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_string())
}

/// A name no other test uses: for databases, key prefixes, folders.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A database of one test's own.
#[derive(Debug)]
pub struct TestDatabase {
    pub name: String,
    pub url: String,
    /// The server's administrative URL the database was made through, and is dropped through.
    admin: String,
    removed: bool,
}

impl TestDatabase {
    /// A fresh database on the machine's PostgreSQL ([`postgres_admin_url`]).
    pub async fn create() -> TestDatabase {
        TestDatabase::create_on(&postgres_admin_url()).await
    }

    /// A fresh database on the server of `admin` (a URL of a role that may create databases).
    pub async fn create_on(admin: &str) -> TestDatabase {
        let mut conn = sqlx::PgConnection::connect(admin).await.unwrap_or_else(|err| {
            panic!(
                "PostgreSQL is not reachable at {admin} ({err}); run `bash .ci/install`, which installs and starts it, or set AFE_TEST_POSTGRES_URL"
            )
        });
        let name = unique("afe_t");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("the afe role may create databases");
        let base = admin.rsplit_once('/').map_or(admin, |(b, _)| b);
        TestDatabase {
            url: format!("{base}/{name}"),
            name,
            admin: admin.to_string(),
            removed: false,
        }
    }

    /// Drops the database (connections to it are ended first). A test that panics before it
    /// gets here still leaves nothing behind: dropping a `TestDatabase` does the same.
    pub async fn remove(mut self) {
        drop_database(&self.admin, &self.name).await;
        self.removed = true;
    }
}

async fn drop_database(admin: &str, name: &str) {
    if let Ok(mut conn) = sqlx::PgConnection::connect(admin).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await;
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop cannot await, and may run inside a runtime: a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                runtime.block_on(drop_database(&admin, &name));
            }
        })
        .join();
    }
}

/// A PostgreSQL server of the test's own — a cluster made with `initdb` in a fresh folder, on a
/// port of its own — that the test can stop and start without touching the machine's server,
/// which other tests use at the same time. Its role `afe` (password `afe`) may create databases.
#[derive(Debug)]
pub struct PrivatePostgres {
    pub port: u16,
    dir: PathBuf,
}

/// The newest PostgreSQL installed: its `bin` folder.
fn postgres_bin() -> PathBuf {
    let versions = std::fs::read_dir("/usr/lib/postgresql").unwrap_or_else(|err| {
        panic!("PostgreSQL is not installed ({err}); run `bash .ci/install`, which installs it")
    });
    let mut versions: Vec<(u32, PathBuf)> = versions
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("a PostgreSQL version in /usr/lib/postgresql")
        .1
}

/// `program` as the `postgres` user when this runs as root (PostgreSQL refuses to run as root).
fn as_postgres(program: &Path) -> Command {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if is_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn must_run(mut command: Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert!(
        output.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl PrivatePostgres {
    pub async fn start() -> PrivatePostgres {
        let dir = std::env::temp_dir().join(unique("afe-postgres"));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status();
        let password = dir.join("password");
        std::fs::write(&password, "afe\n").unwrap();
        let _ = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&password)
            .status();
        let bin = postgres_bin();
        let mut init = as_postgres(&bin.join("initdb"));
        init.args(["--username", "afe", "--auth", "md5", "--pwfile"])
            .arg(&password)
            .arg("-D")
            .arg(dir.join("data"));
        must_run(init, "initdb");
        let server = PrivatePostgres {
            port: free_port(),
            dir,
        };
        server.resume().await;
        server
    }

    /// The URL of its `postgres` database as `afe`, for [`TestDatabase::create_on`].
    pub fn admin_url(&self) -> String {
        format!("postgres://afe:afe@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut command = as_postgres(&postgres_bin().join("pg_ctl"));
        command.arg("-D").arg(self.dir.join("data")).args(args);
        command
    }

    /// Starts the server (again) on its port and folder, and waits until it takes connections.
    pub async fn resume(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        let mut start = self.pg_ctl(&["-w", "-o", &options, "-l"]);
        start.arg(self.dir.join("log")).arg("start");
        must_run(start, "pg_ctl start");
        for _ in 0..200 {
            if sqlx::PgConnection::connect(&self.admin_url()).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "the private PostgreSQL did not take connections on port {}",
            self.port
        );
    }

    /// Stops the server at once, as a crash would (`immediate`: no checkpoint first).
    pub fn stop(&self) {
        must_run(self.pg_ctl(&["-m", "immediate", "stop"]), "pg_ctl stop");
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A SQLite store file in a fresh folder.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("afe.db").display())
}

/// A fresh empty folder.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes into `dir` a config with one flow, `work`, of `nodes` exec nodes in a chain (`n1` ←
/// `n2` ← …), input Schema `job` (an integer `n`), and the flow's budget when given.
pub fn chain_config(dir: &Path, nodes: usize, budget_usd: Option<f64>) {
    let mut flow = String::from(
        "apiVersion: afe.dev/v1alpha1\nkind: Flow\nmetadata: {name: work}\nspec:\n  input: job\n",
    );
    if let Some(usd) = budget_usd {
        flow.push_str(&format!("  budget: {{usd: {usd}}}\n"));
    }
    flow.push_str("  nodes:\n");
    for n in 1..=nodes {
        let needs = if n == 1 {
            String::new()
        } else {
            format!(", needs: [n{}]", n - 1)
        };
        flow.push_str(&format!(
            "    - {{id: n{n}, exec: [step, \"{n}\"]{needs}}}\n"
        ));
    }
    std::fs::write(dir.join("flow.yaml"), flow).unwrap();
    std::fs::write(
        dir.join("schema.yaml"),
        "apiVersion: afe.dev/v1alpha1\nkind: Schema\nmetadata: {name: job}\nspec:\n  fields: {n: integer}\n",
    )
    .unwrap();
}

/// A SQLite store in `dir` with `chain_revision(nodes, budget_usd)` stored and published as the
/// current revision (what `afe serve -c` would have done).
pub async fn published_chain_store(
    dir: &Path,
    nodes: usize,
    budget_usd: Option<f64>,
) -> afe_store::SqlStore {
    use afe_store::{Admin, Store};
    let store = afe_store::SqlStore::connect(&sqlite_url(dir))
        .await
        .unwrap();
    let revision = chain_revision(nodes, budget_usd);
    store
        .put_revision(&revision.hash, &revision.normalized)
        .await
        .unwrap();
    store.publish_revision(&revision.hash).await.unwrap();
    store
}

/// The revision of `chain_config`'s config.
pub fn chain_revision(nodes: usize, budget_usd: Option<f64>) -> Revision {
    let dir = scratch("afe-config");
    chain_config(&dir, nodes, budget_usd);
    let config = afe_config::load_folder(&dir).unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(&dir).unwrap();
    Revision::of(&config)
}

/// A Redis server of the test's own, on a port of its own, that the test can stop and start
/// (with its append-only file, as the engine runs Redis).
#[derive(Debug)]
pub struct PrivateRedis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl PrivateRedis {
    pub async fn start() -> PrivateRedis {
        let mut redis = PrivateRedis {
            port: free_port(),
            dir: scratch("afe-redis"),
            child: None,
        };
        redis.resume().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server again on the same port and folder.
    pub async fn resume(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--appendonly", "yes", "--save", ""])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "redis-server cannot start ({err}); run `bash .ci/install`, which installs it"
                )
            });
        self.child = Some(child);
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not open port {}", self.port);
    }

    /// Stops the server (SIGTERM: it writes its append-only file and exits).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serves HTTP/1 on `listener` until the task is aborted, each request handed to `handle`: the
/// test servers' (MCP over HTTP, the OTLP receiver) one loop.
pub fn serve_http<F, Fut, B>(
    listener: tokio::net::TcpListener,
    handle: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let serve = hyper::service::service_fn(move |request| {
                    let answer = handle(request);
                    async move { Ok::<_, std::convert::Infallible>(answer.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), serve)
                    .await;
            });
        }
    })
}

/// Compares `text` with the reviewed file `name` in `dir` (a crate's `tests/golden/`), and writes
/// it there instead when `AFE_UPDATE_GOLDEN` is set.
pub fn golden(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if std::env::var_os("AFE_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, text).unwrap();
    }
    let kept = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (AFE_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(text, kept, "{name} differs from its golden");
}
