//! A scripted executor for tests and benchmarks (`afe worker --executor scripted --script FILE`):
//! each node sleeps, optionally makes a "paid call" (a reservation, then a settlement), optionally
//! holds after it, optionally fails, optionally writes files into the ticket's workspace and
//! checkpoints it as a real git bundle — and appends what it does to a calls file, one line per
//! step, so a test can count executions across processes and time a kill to a step.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use afe_store::{NewCheckpoint, Settlement, usd_to_micros};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::executor::{NodeCall, NodeError, NodeExecutor, NodeResult};

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(default)]
    pub sleep_ms: u64,
    /// Reserve and then spend this much (0: no paid call).
    #[serde(default)]
    pub cost_usd: f64,
    /// What the provider "reports" (default: the reservation).
    #[serde(default)]
    pub settle_usd: Option<f64>,
    /// Wait this long after the paid call, before the node completes: the window between paying
    /// and committing.
    #[serde(default)]
    pub hold_after_paid_ms: u64,
    #[serde(default)]
    pub fail: bool,
    /// Save a checkpoint bundle of this many bytes.
    #[serde(default)]
    pub checkpoint_bytes: usize,
    /// Wait, after the sleep, until this file exists: a gate a test opens when it is ready,
    /// instead of a time it hopes is long enough.
    #[serde(default)]
    pub until_file: Option<PathBuf>,
    /// Files (path → content) written into the ticket's workspace, which is then committed and
    /// saved as a git bundle of what is new, as the sandbox's checkpoint saves it (needs the
    /// script's `workspaces`).
    #[serde(default)]
    pub write: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Where each step is appended: `start|paid|done|fail TICKET NODE ATTEMPT`.
    pub calls_file: PathBuf,
    #[serde(default)]
    pub default: Step,
    #[serde(default)]
    pub nodes: BTreeMap<String, Step>,
    /// Where each ticket's workspace is kept (a git repository per ticket, on this machine: it is
    /// not restored for another worker or a rerun's new ticket, which start from an empty one).
    #[serde(default)]
    pub workspaces: Option<PathBuf>,
}

#[derive(Debug)]
pub struct ScriptedExecutor {
    script: Script,
}

impl ScriptedExecutor {
    pub fn new(script: Script) -> ScriptedExecutor {
        ScriptedExecutor { script }
    }

    /// One line, written with one `write` on a file opened for appending, so lines from several
    /// processes never interleave.
    fn note(&self, step: &str, call: &NodeCall) -> Result<(), NodeError> {
        let line = format!(
            "{step} {} {} {}\n",
            call.ticket.id, call.node.id, call.attempt
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.script.calls_file)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| NodeError::Failed(format!("cannot write the calls file: {e}")))
    }
}

#[async_trait]
impl NodeExecutor for ScriptedExecutor {
    async fn execute(&self, call: NodeCall) -> Result<NodeResult, NodeError> {
        let step = self
            .script
            .nodes
            .get(&call.node.id)
            .unwrap_or(&self.script.default)
            .clone();
        self.note("start", &call)?;
        tokio::time::sleep(Duration::from_millis(step.sleep_ms)).await;
        if let Some(gate) = &step.until_file {
            while !gate.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let mut settlements = Vec::new();
        if step.cost_usd > 0.0 {
            let reservation = call
                .wallet
                .reserve("scripted", usd_to_micros(step.cost_usd))
                .await?;
            self.note("paid", &call)?;
            settlements.push(Settlement {
                reservation: reservation.id,
                usd_micros: usd_to_micros(step.settle_usd.unwrap_or(step.cost_usd)),
                tokens_in: 100,
                tokens_out: 10,
            });
            tokio::time::sleep(Duration::from_millis(step.hold_after_paid_ms)).await;
        }
        if step.fail {
            self.note("fail", &call)?;
            return Err(NodeError::Failed(format!(
                "node {} failed as scripted",
                call.node.id
            )));
        }
        let checkpoint = if !step.write.is_empty() {
            let root = self.script.workspaces.as_ref().ok_or_else(|| {
                NodeError::Failed("a step that writes files needs the script's workspaces".into())
            })?;
            Some(
                commit_files(
                    &root.join(&call.ticket.id),
                    &call.ticket.id,
                    &call.node.id,
                    &step.write,
                )
                .await
                .map_err(NodeError::Failed)?,
            )
        } else {
            (step.checkpoint_bytes > 0).then(|| NewCheckpoint {
                head: String::new(),
                git_ref: format!("refs/afe/{}/{}", call.ticket.id, call.node.id),
                parent: None,
                bundle: (0..step.checkpoint_bytes)
                    .map(|i| (i % 251) as u8)
                    .collect(),
            })
        };
        self.note("done", &call)?;
        Ok(NodeResult {
            output: json!({"node": call.node.id, "attempt": call.attempt}),
            settlements,
            checkpoint,
        })
    }
}

async fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=afe", "-c", "user.email=afe@afe.invalid"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// Writes `files` into the ticket's repository, commits them on its work branch and returns the
/// bundle of that commit alone (what is new since the branch's last head), as the sandbox's
/// checkpoint does.
async fn commit_files(
    repo: &Path,
    ticket: &str,
    node: &str,
    files: &BTreeMap<String, String>,
) -> Result<NewCheckpoint, String> {
    let branch = format!("refs/heads/afe/{ticket}/work");
    std::fs::create_dir_all(repo).map_err(|e| e.to_string())?;
    git(repo, &["init", "-q"]).await?;
    let previous = git(repo, &["rev-parse", "-q", "--verify", &branch])
        .await
        .ok()
        .map(|out| String::from_utf8_lossy(&out).trim().to_string());
    for (path, content) in files {
        let file = repo.join(path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(&file, content).map_err(|e| e.to_string())?;
    }
    git(repo, &["add", "-A"]).await?;
    let message = format!("afe: the workspace after node {node}");
    git(repo, &["commit", "-q", "--allow-empty", "-m", &message]).await?;
    let head = git(repo, &["rev-parse", "HEAD"]).await?;
    let head = String::from_utf8_lossy(&head).trim().to_string();
    git(repo, &["update-ref", &branch, &head]).await?;
    let mut bundle = vec!["bundle", "create", "-q", "-", branch.as_str()];
    let not_previous = previous.map(|p| format!("^{p}"));
    if let Some(not) = &not_previous {
        bundle.push(not);
    }
    Ok(NewCheckpoint {
        bundle: git(repo, &bundle).await?,
        git_ref: branch,
        head,
        parent: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The second bundle carries only what is new: it needs the first, as a sandbox's does.
    #[tokio::test]
    async fn written_files_are_saved_as_bundles_of_what_is_new() {
        let root = std::env::temp_dir().join(format!("afe-scripted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let files = |text: &str| BTreeMap::from([("notes.txt".to_string(), text.to_string())]);
        let first = commit_files(&root.join("repo"), "t", "n1", &files("a\n"))
            .await
            .unwrap();
        let second = commit_files(&root.join("repo"), "t", "n2", &files("a\nb\n"))
            .await
            .unwrap();
        assert_eq!(first.git_ref, "refs/heads/afe/t/work");
        assert_ne!(first.head, second.head);
        let check = root.join("check");
        std::fs::create_dir_all(&check).unwrap();
        git(&check, &["init", "-q", "--bare"]).await.unwrap();
        let fetch = |n: usize, bundle: &[u8]| {
            let file = root.join(format!("{n}.bundle"));
            std::fs::write(&file, bundle).unwrap();
            file.display().to_string()
        };
        let (one, two) = (fetch(1, &first.bundle), fetch(2, &second.bundle));
        assert!(
            git(&check, &["fetch", "-q", &two, "refs/heads/*:refs/x/*"])
                .await
                .is_err(),
            "the second bundle alone lacks its parent"
        );
        git(&check, &["fetch", "-q", &one, "refs/heads/*:refs/x/*"])
            .await
            .unwrap();
        git(&check, &["fetch", "-q", &two, "+refs/heads/*:refs/x/*"])
            .await
            .unwrap();
        let shown = git(&check, &["show", &format!("{}:notes.txt", second.head)])
            .await
            .unwrap();
        assert_eq!(shown, b"a\nb\n");
        let _ = std::fs::remove_dir_all(&root);
    }
}
