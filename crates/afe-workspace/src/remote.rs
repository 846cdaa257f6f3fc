//! The worker's side of the workspace: the only place the repository's token is used. git runs
//! here in a temporary folder, with none of the machine's git configuration, and gets the token
//! from a credential helper scoped to the repository's origin — never in a URL, an argument or a
//! file — so it cannot reach the sandbox, a bundle, a log or another host.
//!
//! - clone: `git clone` of one branch, then `git bundle create` of it: the bundle goes to the
//!   sandbox, the clone is deleted.
//! - push: the sandbox's bundle of the ticket's branches, verified and fetched into an empty
//!   repository, then pushed with `--force-with-lease` per branch ([`crate::lease`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::error::WorkspaceError;
use crate::lease::{LeaseDecision, decide_lease};

/// What the worker authenticates with: a token, offered as HTTP Basic's password with `username`
/// (forges take any user name with a token; GitHub documents `x-access-token`). Its `Debug` never
/// shows the token.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .finish()
    }
}

impl Credentials {
    /// No token: public repositories only.
    pub fn none() -> Credentials {
        Credentials {
            username: "x-access-token".to_string(),
            token: None,
        }
    }

    pub fn token(token: impl Into<String>) -> Credentials {
        Credentials {
            token: Some(token.into()),
            ..Credentials::none()
        }
    }
}

/// `scheme://host[:port]` of a URL: what the credential helper is scoped to.
pub fn origin_of(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let end = url.len() - rest.len() + rest.find('/').unwrap_or(rest.len());
    Some(&url[..end])
}

/// The environment git runs with: nothing of the machine's git configuration, no prompt, and —
/// with a token — a credential helper for `url`'s origin alone that prints the token from the
/// helper's own environment (the token is in no argument and no file).
pub fn git_environment(url: &str, credentials: &Credentials, home: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
        ("GIT_CONFIG_GLOBAL".to_string(), "/dev/null".to_string()),
        ("HOME".to_string(), home.display().to_string()),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
        // No askpass program either: a missing credential is an error, not a hang.
        ("GIT_ASKPASS".to_string(), "true".to_string()),
        ("SSH_ASKPASS".to_string(), "true".to_string()),
    ];
    let mut config = vec![
        // An empty helper first resets any helper configured elsewhere.
        ("credential.helper".to_string(), String::new()),
    ];
    if let (Some(token), Some(origin)) = (&credentials.token, origin_of(url)) {
        config.push((
            format!("credential.{origin}.helper"),
            r#"!f() { test "$1" = get && printf 'username=%s\npassword=%s\n' "$AFE_GIT_USERNAME" "$AFE_GIT_PASSWORD"; }; f"#
                .to_string(),
        ));
        env.push(("AFE_GIT_USERNAME".to_string(), credentials.username.clone()));
        env.push(("AFE_GIT_PASSWORD".to_string(), token.clone()));
    }
    env.push(("GIT_CONFIG_COUNT".to_string(), config.len().to_string()));
    for (index, (key, value)) in config.into_iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{index}"), key));
        env.push((format!("GIT_CONFIG_VALUE_{index}"), value));
    }
    env
}

/// Whether git's words say the forge refused (or asked for) credentials.
pub fn is_refusal(stderr: &str) -> bool {
    [
        "Authentication failed",
        "could not read Username",
        "could not read Password",
        "returned error: 401",
        "returned error: 403",
    ]
    .iter()
    .any(|sign| stderr.contains(sign))
}

/// A folder of the worker's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, WorkspaceError> {
        let path = std::env::temp_dir().join(format!("afe-git-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path)
            .map_err(|e| WorkspaceError::NoGit(format!("making {}: {e}", path.display())))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One git command in `dir` for `url`; its stdout, or stderr as the error.
async fn git(
    dir: &Path,
    home: &Path,
    url: &str,
    credentials: &Credentials,
    args: &[&str],
) -> Result<Result<String, String>, WorkspaceError> {
    let output = tokio::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .envs(git_environment(url, credentials, home))
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| WorkspaceError::NoGit(e.to_string()))?;
    Ok(if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
    })
}

/// A remote's failure as the error it is.
fn remote_error(operation: &'static str, url: &str, detail: String) -> WorkspaceError {
    if is_refusal(&detail) {
        WorkspaceError::Refused {
            operation,
            url: url.to_string(),
            detail,
        }
    } else {
        WorkspaceError::Remote {
            operation,
            url: url.to_string(),
            detail,
        }
    }
}

/// One branch of a repository, as a bundle that holds it whole.
#[derive(Clone, PartialEq, Eq)]
pub struct Cloned {
    pub url: String,
    pub branch: String,
    /// `refs/heads/<branch>`: the ref the bundle carries.
    pub git_ref: String,
    pub head: String,
    pub bundle: Vec<u8>,
}

impl std::fmt::Debug for Cloned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cloned")
            .field("url", &self.url)
            .field("branch", &self.branch)
            .field("head", &self.head)
            .field("bundle_bytes", &self.bundle.len())
            .finish()
    }
}

/// Clones `branch` of `url` (its default branch when none) and returns it as a bundle.
pub async fn clone_to_bundle(
    url: &str,
    branch: Option<&str>,
    credentials: &Credentials,
) -> Result<Cloned, WorkspaceError> {
    let scratch = Scratch::new()?;
    let home = scratch.0.join("home");
    std::fs::create_dir_all(&home).map_err(|e| WorkspaceError::NoGit(e.to_string()))?;
    let repo = scratch.0.join("repo");
    let repo_arg = repo.display().to_string();
    let mut args = vec!["clone", "--quiet", "--no-tags", "--single-branch"];
    if let Some(branch) = branch {
        args.extend(["--branch", branch]);
    }
    args.extend(["--", url, &repo_arg]);
    git(&scratch.0, &home, url, credentials, &args)
        .await?
        .map_err(|detail| remote_error("cloning", url, detail))?;
    let local = |args: &'static [&'static str]| git(&repo, &home, url, credentials, args);
    let branch = local(&["symbolic-ref", "--short", "HEAD"])
        .await?
        .map_err(|detail| remote_error("reading the branch of", url, detail))?;
    let head = local(&["rev-parse", "HEAD"])
        .await?
        .map_err(|detail| remote_error("reading the head of", url, detail))?;
    let git_ref = format!("refs/heads/{branch}");
    let bundle_path = scratch.0.join("clone.bundle");
    let bundle_arg = bundle_path.display().to_string();
    git(
        &repo,
        &home,
        url,
        credentials,
        &["bundle", "create", "--quiet", &bundle_arg, &git_ref],
    )
    .await?
    .map_err(|detail| WorkspaceError::Bundle {
        what: format!("the bundle of {url}"),
        detail,
    })?;
    let bundle = std::fs::read(&bundle_path).map_err(|e| WorkspaceError::Bundle {
        what: format!("the bundle of {url}"),
        detail: e.to_string(),
    })?;
    Ok(Cloned {
        url: url.to_string(),
        branch,
        git_ref,
        head,
        bundle,
    })
}

/// What a push did: the branches it moved, and those the remote already had as they are (a push
/// interrupted after it reached the remote is reconciled, not repeated).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pushed {
    pub moved: BTreeMap<String, String>,
    pub already: BTreeMap<String, String>,
}

/// Pushes every branch of `bundle` to `url`, each with a lease: a branch the remote does not have
/// must still not exist, one it has must still be where it was and be a commit of this bundle's
/// history; a branch that holds anything else is refused ([`WorkspaceError::Diverged`]).
pub async fn push_bundle(
    url: &str,
    bundle: &[u8],
    credentials: &Credentials,
) -> Result<Pushed, WorkspaceError> {
    let scratch = Scratch::new()?;
    let home = scratch.0.join("home");
    let repo = scratch.0.join("repo.git");
    for dir in [&home, &repo] {
        std::fs::create_dir_all(dir).map_err(|e| WorkspaceError::NoGit(e.to_string()))?;
    }
    let bundle_path = scratch.0.join("push.bundle");
    std::fs::write(&bundle_path, bundle).map_err(|e| WorkspaceError::NoGit(e.to_string()))?;
    let bundle_arg = bundle_path.display().to_string();
    let local = |args: Vec<String>| {
        let (repo, home) = (repo.clone(), home.clone());
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            git(&repo, &home, url, credentials, &args).await
        }
    };
    let words = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    local(words(&["init", "--quiet", "--bare"]))
        .await?
        .map_err(WorkspaceError::NoGit)?;
    local(words(&["bundle", "verify", "--quiet", &bundle_arg]))
        .await?
        .map_err(|detail| WorkspaceError::Bundle {
            what: "the sandbox's bundle of the ticket's branches".to_string(),
            detail,
        })?;
    let heads = local(words(&["bundle", "list-heads", &bundle_arg]))
        .await?
        .map_err(|detail| WorkspaceError::Bundle {
            what: "the sandbox's bundle of the ticket's branches".to_string(),
            detail,
        })?;
    let ours: BTreeMap<String, String> = heads
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, name)| name.starts_with("refs/heads/"))
        .map(|(sha, name)| (name.to_string(), sha.to_string()))
        .collect();
    local(words(&[
        "fetch",
        "--quiet",
        "--no-tags",
        &bundle_arg,
        "refs/heads/*:refs/heads/*",
    ]))
    .await?
    .map_err(|detail| WorkspaceError::Bundle {
        what: "the sandbox's bundle of the ticket's branches".to_string(),
        detail,
    })?;
    let mut ls_remote = words(&["ls-remote", "--heads", url]);
    ls_remote.extend(ours.keys().cloned());
    let listed = local(ls_remote)
        .await?
        .map_err(|detail| remote_error("reading the branches of", url, detail))?;
    let theirs: BTreeMap<String, String> = listed
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(sha, name)| (name.to_string(), sha.to_string()))
        .collect();
    let mut pushed = Pushed::default();
    let mut push = words(&["push", "--quiet", "--porcelain", url]);
    for (branch, sha) in &ours {
        let found = theirs.get(branch);
        let ancestor = match found {
            Some(remote) if remote != sha => {
                local(words(&["merge-base", "--is-ancestor", remote, sha]))
                    .await?
                    .is_ok()
            }
            _ => false,
        };
        match decide_lease(sha, found.map(String::as_str), ancestor) {
            LeaseDecision::AlreadyThere => {
                pushed.already.insert(branch.clone(), sha.clone());
            }
            LeaseDecision::Push { expect } => {
                push.push(format!("--force-with-lease={branch}:{expect}"));
                pushed.moved.insert(branch.clone(), sha.clone());
            }
            LeaseDecision::Refuse => {
                return Err(WorkspaceError::Diverged {
                    url: url.to_string(),
                    branch: branch.clone(),
                    found: found.cloned().unwrap_or_default(),
                });
            }
        }
    }
    if pushed.moved.is_empty() {
        return Ok(pushed);
    }
    for branch in pushed.moved.keys() {
        push.push(format!("{branch}:{branch}"));
    }
    local(push)
        .await?
        .map_err(|detail| remote_error("pushing to", url, detail))?;
    Ok(pushed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_offered_to_the_repositorys_origin_only_and_named_nowhere_but_one_variable() {
        let env = git_environment(
            "https://git.example.com:8443/team/repo.git",
            &Credentials::token("s3cret-token"),
            Path::new("/tmp/h"),
        );
        let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        assert_eq!(get("GIT_CONFIG_COUNT"), Some("2"));
        assert_eq!(get("GIT_CONFIG_KEY_0"), Some("credential.helper"));
        assert_eq!(get("GIT_CONFIG_VALUE_0"), Some(""));
        assert_eq!(
            get("GIT_CONFIG_KEY_1"),
            Some("credential.https://git.example.com:8443.helper")
        );
        let holding: Vec<&str> = env
            .iter()
            .filter(|(_, v)| v.contains("s3cret-token"))
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(holding, ["AFE_GIT_PASSWORD"]);
        assert_eq!(get("GIT_TERMINAL_PROMPT"), Some("0"));
        assert_eq!(get("GIT_CONFIG_GLOBAL"), Some("/dev/null"));
        let public = git_environment("https://a.example/r", &Credentials::none(), Path::new("/h"));
        assert!(!public.iter().any(|(k, _)| k == "AFE_GIT_PASSWORD"));
        assert!(format!("{:?}", Credentials::token("s3cret-token")).contains("(hidden)"));
    }

    #[test]
    fn origins_and_refusals() {
        assert_eq!(
            origin_of("http://127.0.0.1:9/r.git"),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(origin_of("https://h.example"), Some("https://h.example"));
        assert_eq!(origin_of("/local/path"), None);
        assert!(is_refusal(
            "fatal: could not read Username for 'http://x': terminal prompts disabled"
        ));
        assert!(is_refusal("fatal: Authentication failed for 'http://x/'"));
        assert!(!is_refusal("fatal: repository 'http://x/' not found"));
    }
}
