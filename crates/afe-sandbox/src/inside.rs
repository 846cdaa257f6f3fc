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
