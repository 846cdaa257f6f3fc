//! A real git server on loopback that requires a token: git's own `git http-backend` (smart HTTP,
//! clone and push) behind a small HTTP server that answers 401 to any request without the token
//! (as HTTP Basic's password, or a Bearer token), as a forge does. Every request is counted, with
//! the ones refused, so a test can see what reached it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// What reached the server.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every request.
    pub requests: AtomicUsize,
    /// Requests refused for a missing or wrong token.
    pub refused: AtomicUsize,
    /// Pushes that git accepted (git-receive-pack answered 200).
    pub pushes: AtomicUsize,
}

/// The server; its repositories live in a folder removed when it is dropped.
#[derive(Debug)]
pub struct GitServer {
    pub address: SocketAddr,
    pub token: String,
    pub root: PathBuf,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}; the tests need git"));
    assert!(
        output.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

impl GitServer {
    /// Starts on 127.0.0.1, on a port of its own, requiring `token`.
    pub async fn start(token: &str) -> GitServer {
        let root = crate::scratch("git-server");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let (serving_root, serving_token, serving_seen) =
            (root.clone(), token.to_string(), seen.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                let (root, token, seen) = (
                    serving_root.clone(),
                    serving_token.clone(),
                    serving_seen.clone(),
                );
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (root, token, seen) = (root.clone(), token.clone(), seen.clone());
                        async move {
                            Ok::<_, Infallible>(answer(request, &root, &token, &seen, peer).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        GitServer {
            address,
            token: token.to_string(),
            root,
            seen,
            task,
        }
    }

    /// The clone URL of repository `name` (no credentials in it).
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}.git", self.address)
    }

    fn bare(&self, name: &str) -> PathBuf {
        self.root.join(format!("{name}.git"))
    }

    /// A bare repository `name` whose branch `main` holds `files` in one commit; its URL.
    pub fn create_repo(&self, name: &str, files: &[(&str, &[u8])]) -> String {
        let work = self.root.join(format!("{name}.work"));
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        for (path, content) in files {
            let path = work.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        git(&work, &["add", "-A"]);
        git(
            &work,
            &["commit", "-q", "-m", "the repository's first commit"],
        );
        git(
            &self.root,
            &[
                "clone",
                "-q",
                "--bare",
                work.to_str().unwrap(),
                self.bare(name).to_str().unwrap(),
            ],
        );
        // Pushes over HTTP are refused unless the repository says otherwise.
        git(&self.bare(name), &["config", "http.receivepack", "true"]);
        std::fs::remove_dir_all(&work).unwrap();
        self.url(name)
    }

    /// The commit `reference` names in repository `name`, if it exists.
    pub fn commit(&self, name: &str, reference: &str) -> Option<String> {
        let output = Command::new("git")
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{reference}^{{commit}}"))
            .current_dir(self.bare(name))
            .output()
            .unwrap();
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// The branches of repository `name`.
    pub fn branches(&self, name: &str) -> Vec<String> {
        git(
            &self.bare(name),
            &["for-each-ref", "--format=%(refname:short)", "refs/heads"],
        )
        .lines()
        .map(str::to_string)
        .collect()
    }

    /// `path` at `reference` in repository `name`.
    pub fn file(&self, name: &str, reference: &str, path: &str) -> Option<Vec<u8>> {
        let output = Command::new("git")
            .args(["show", &format!("{reference}:{path}")])
            .current_dir(self.bare(name))
            .output()
            .unwrap();
        output.status.success().then_some(output.stdout)
    }

    /// How many commits `reference` has in repository `name`.
    pub fn commit_count(&self, name: &str, reference: &str) -> usize {
        git(&self.bare(name), &["rev-list", "--count", reference])
            .parse()
            .unwrap()
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Whether the request carries `token`: HTTP Basic with it as the password (any user, as forges
/// take a token), or a Bearer token.
fn authorized(request: &Request<Incoming>, token: &str) -> bool {
    let Some(value) = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    if let Some(bearer) = value.strip_prefix("Bearer ") {
        return bearer == token;
    }
    value
        .strip_prefix("Basic ")
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .and_then(|pair| pair.split_once(':').map(|(_, password)| password == token))
        .unwrap_or(false)
}

async fn answer(
    request: Request<Incoming>,
    root: &Path,
    token: &str,
    seen: &Seen,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    if !authorized(&request, token) {
        seen.refused.fetch_add(1, Ordering::SeqCst);
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(hyper::header::WWW_AUTHENTICATE, "Basic realm=\"git\"")
            .body(Full::new(Bytes::from_static(b"a token is required\n")))
            .unwrap();
    }
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    // The CGI meta-variables git http-backend reads (RFC 3875, and git's own GIT_PROTOCOL).
    let mut env: HashMap<&str, String> = HashMap::from([
        ("GIT_PROJECT_ROOT", root.display().to_string()),
        ("GIT_HTTP_EXPORT_ALL", "1".to_string()),
        ("REQUEST_METHOD", parts.method.to_string()),
        ("PATH_INFO", parts.uri.path().to_string()),
        (
            "QUERY_STRING",
            parts.uri.query().unwrap_or_default().to_string(),
        ),
        ("CONTENT_TYPE", header("content-type")),
        ("CONTENT_LENGTH", body.len().to_string()),
        ("HTTP_CONTENT_ENCODING", header("content-encoding")),
        ("GIT_PROTOCOL", header("git-protocol")),
        ("REMOTE_USER", "token".to_string()),
        ("REMOTE_ADDR", peer.ip().to_string()),
    ]);
    env.retain(|_, v| !v.is_empty());
    let is_push = parts.uri.path().ends_with("/git-receive-pack");
    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("git")
            .arg("http-backend")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("git http-backend");
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        });
        let output = child.wait_with_output().expect("git http-backend ran");
        let _ = writer.join();
        output
    })
    .await
    .unwrap();
    cgi_response(&output.stdout, is_push.then_some(seen))
}

/// A CGI program's output as an HTTP response: its headers (`Status:` among them) up to the first
/// blank line, then the body.
fn cgi_response(stdout: &[u8], push: Option<&Seen>) -> Response<Full<Bytes>> {
    let split = stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| {
            stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|at| (at, 2))
        });
    let Some((at, gap)) = split else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Full::new(Bytes::copy_from_slice(stdout)))
            .unwrap();
    };
    let mut response = Response::builder();
    let mut status = StatusCode::OK;
    for line in String::from_utf8_lossy(&stdout[..at]).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            status = value
                .split_whitespace()
                .next()
                .and_then(|code| code.parse().ok())
                .and_then(|code| StatusCode::from_u16(code).ok())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        } else {
            response = response.header(name, value);
        }
    }
    if let Some(seen) = push
        && status == StatusCode::OK
    {
        seen.pushes.fetch_add(1, Ordering::SeqCst);
    }
    response
        .status(status)
        .body(Full::new(Bytes::copy_from_slice(&stdout[at + gap..])))
        .unwrap()
}
