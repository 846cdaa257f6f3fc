//! The adapter's own commands in a sandbox, the same on every platform: the sandbox's idle
//! process and the check that says it is ready. Both are POSIX shell, the sandbox image's
//! contract (docs/afe-sandbox.md).

use af_sidecar_api::config::ALLOWLIST_PROXY_PORT;

/// The sandbox's own process: it makes the workspace's folders, then idles; the ticket's commands
/// arrive as execs.
pub const IDLE: &str =
    "mkdir -p /workspace/repo /workspace/worktrees && while :; do sleep 3600; done";

/// The command that says a sandbox is ready, run in it as its user: the workspace's folders are
/// made and, with egress, the proxy listens on 127.0.0.1:3128 — read from the namespace's own
/// socket table, which the sandbox shares with its proxy (state 0A is LISTEN), so readiness costs
/// one command and asks nothing of the proxy.
pub fn ready_check(has_proxy: bool) -> Vec<String> {
    let mut script = format!("test -d {}", crate::workspace::REPO);
    if has_proxy {
        script.push_str(&format!(
            " && grep -q '^ *[0-9]*: 0100007F:{ALLOWLIST_PROXY_PORT:04X} 00000000:0000 0A ' /proc/net/tcp"
        ));
    }
    vec!["sh".to_string(), "-c".to_string(), script]
}

/// What a sandbox with egress has in its environment to find its proxy (every common spelling),
/// and what it reaches directly (itself).
pub fn proxy_variables() -> Vec<(String, String)> {
    let proxy = format!("http://127.0.0.1:{ALLOWLIST_PROXY_PORT}");
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        env.push((name.to_string(), proxy.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_string(), "localhost,127.0.0.1,::1".to_string()));
    }
    env
}

/// The command that writes `payload` at `path` (confined already) as the sandbox's user, and
/// what goes on its stdin. Inside the sandbox: a symlink the ticket made leads nowhere that user
/// could not write anyway.
pub fn put_command<'a>(path: &str, payload: &'a crate::Payload) -> (Vec<String>, &'a [u8]) {
    let (script, bytes) = match payload {
        crate::Payload::File(bytes) => (r#"mkdir -p "$(dirname "$1")" && cat > "$1""#, bytes),
        crate::Payload::Tar(bytes) => (r#"mkdir -p "$1" && tar -x -f - -C "$1""#, bytes),
    };
    let argv = ["sh", "-c", script, "sh", path]
        .iter()
        .map(|s| s.to_string())
        .collect();
    (argv, bytes)
}

/// What a put's command said: refused, with its words, when it failed.
pub fn put_outcome(path: String, ran: &crate::ExecOutput) -> Result<(), crate::SandboxError> {
    if ran.succeeded() {
        Ok(())
    } else {
        Err(crate::SandboxError::PathRefused {
            path,
            why: ran.stderr.text().trim().to_string(),
        })
    }
}

/// The command that reads `path` (confined already): a file's bytes, or a tar of a directory.
pub fn get_command(path: &str, tar: bool) -> Vec<String> {
    let argv: &[&str] = if tar {
        &["tar", "-c", "-f", "-", "-C", path, "."]
    } else {
        &["cat", path]
    };
    argv.iter().map(|s| s.to_string()).collect()
}

/// What a get's command read, kept up to `limit`: refused when it failed or read more.
pub fn get_outcome(
    path: String,
    ran: crate::ExecOutput,
    tar: bool,
    limit: usize,
) -> Result<crate::Payload, crate::SandboxError> {
    if !ran.succeeded() || ran.stdout.dropped > 0 {
        return Err(crate::SandboxError::PathRefused {
            path,
            why: if ran.stdout.dropped > 0 {
                format!("larger than {limit} bytes")
            } else {
                ran.stderr.text().trim().to_string()
            },
        });
    }
    Ok(if tar {
        crate::Payload::Tar(ran.stdout.bytes)
    } else {
        crate::Payload::File(ran.stdout.bytes)
    })
}
