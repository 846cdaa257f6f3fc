//! Test support for afe: real servers, each test isolated. `.ci/install` installs and starts
//! PostgreSQL (role `afe`, password `afe`, may create databases) and Redis on 127.0.0.1; a test
//! whose server is missing fails and says how to start it — it is never skipped.

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
}

impl TestDatabase {
    pub async fn create() -> TestDatabase {
        let admin = postgres_admin_url();
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|err| {
            panic!(
                "PostgreSQL is not reachable at {admin} ({err}); run `bash .ci/install`, which installs and starts it, or set AFE_TEST_POSTGRES_URL"
            )
        });
        let name = unique("afe_t");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("the afe role may create databases");
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        TestDatabase {
            url: format!("{base}/{name}"),
            name,
        }
    }

    /// Drops the database (connections to it are ended first).
    pub async fn drop(self) {
        if let Ok(mut conn) = sqlx::PgConnection::connect(&postgres_admin_url()).await {
            let _ = sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut conn)
            .await;
        }
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

/// A config with one flow, `work`, of `nodes` exec nodes in a chain (`n1` ← `n2` ← …), input
/// Schema `job`, and the flow's budget when given; returned as its revision.
pub fn chain_revision(nodes: usize, budget_usd: Option<f64>) -> Revision {
    let dir = scratch("afe-config");
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
