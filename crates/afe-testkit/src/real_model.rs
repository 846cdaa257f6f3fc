//! A real model behind a server nobody here wrote: llama.cpp's OpenAI-compatible server
//! (`llama-cpp-python[server]`) serving SmolLM2-135M-Instruct on the CPU, both installed by
//! `scripts/install-model-server` (`.ci/install` runs it; the folder is `AFE_MODEL_SERVER_DIR`,
//! default `/var/lib/afe-model`). A test that needs it and does not find it installs it — never a
//! skip — which takes four to eight minutes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The model's file name in the folder, and its name as the server reports it.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The installed folder (venv and model), installing it first when it is missing.
pub fn model_server_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(
            std::env::var("AFE_MODEL_SERVER_DIR").unwrap_or_else(|_| "/var/lib/afe-model".into()),
        );
        if dir.join("venv/bin/python").exists() && dir.join(MODEL_FILE).exists() {
            return dir;
        }
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts/install-model-server");
        let output = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            output.status.success(),
            "the model server could not be installed into {} ({}): {}\nrun `bash .ci/install`, or set AFE_MODEL_SERVER_DIR to a folder scripts/install-model-server made",
            dir.display(),
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        dir
    })
    .clone()
}

/// A running llama.cpp server on a port of its own, requiring `key`; stopped when dropped.
#[derive(Debug)]
pub struct RealModelServer {
    child: Child,
    port: u16,
}

impl RealModelServer {
    /// Starts the server and waits until it answers `GET /v1/models` with the key.
    pub fn start(key: &str) -> RealModelServer {
        let dir = model_server_dir();
        let port = crate::free_port();
        let log = std::env::temp_dir().join(crate::unique("afe-llama-log"));
        let child = Command::new(dir.join("venv/bin/python"))
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(dir.join(MODEL_FILE))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            // A context large enough for a tool loop's few turns; both cores; the key required.
            .args(["--n_ctx", "4096", "--n_threads", "2", "--api_key", key])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting llama.cpp's server");
        let mut server = RealModelServer { child, port };
        // Loading the model takes seconds; a machine busy compiling may take much longer. The
        // bound only keeps a server that never comes up from hanging the test.
        for _ in 0..3000 {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!(
                    "llama.cpp's server exited ({status}) before it answered: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if server.get("/v1/models", key).is_some_and(|s| s == 200) {
                let _ = std::fs::remove_file(&log);
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "llama.cpp's server did not answer on port {port}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// The base URL an Agent's `baseUrl` names.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The status of a GET, or none when nothing answered.
    fn get(&self, path: &str, key: &str) -> Option<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut status = String::new();
        BufReader::new(&mut stream).read_line(&mut status).ok()?;
        let _ = stream.read_to_end(&mut Vec::new());
        status.split_whitespace().nth(1)?.parse().ok()
    }
}

impl Drop for RealModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
