//! A node's checkpoint as a diff: what the node changed in the ticket's workspace. The ticket's
//! bundles up to that checkpoint are fetched, in order, into a scratch repository, and git
//! compares the checkpoint's commit with the one before it (the first checkpoint, a clone's,
//! is listed as the files it holds). Serve needs `git` for this route only.

use std::path::Path;

use afe_store::{Admin, Checkpoint};
use tokio::process::Command;

/// Diffs longer than this are cut (the page would not be read past it anyway).
pub const MAX_DIFF: usize = 256 * 1024;

/// What a checkpoint changed.
#[derive(Debug)]
pub struct WorkspaceDiff {
    pub checkpoint: Checkpoint,
    /// The commit before (none for the first checkpoint).
    pub from: Option<String>,
    pub text: String,
    pub truncated: bool,
}

/// Why no diff could be made.
#[derive(Debug)]
pub enum DiffError {
    Store(afe_store::StoreError),
    /// The ticket has no such checkpoint.
    NoCheckpoint(i64),
    /// git failed or is missing; what it said.
    Git(String),
}

impl From<afe_store::StoreError> for DiffError {
    fn from(err: afe_store::StoreError) -> DiffError {
        DiffError::Store(err)
    }
}

async fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>, DiffError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .await
        .map_err(|e| DiffError::Git(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(DiffError::Git(format!(
            "git {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// The diff of checkpoint `id` of `ticket`.
pub async fn diff(store: &dyn Admin, ticket: &str, id: i64) -> Result<WorkspaceDiff, DiffError> {
    let checkpoints = store.checkpoints(ticket).await?;
    let at = checkpoints
        .iter()
        .position(|c| c.id == id)
        .ok_or(DiffError::NoCheckpoint(id))?;
    let target = checkpoints[at].clone();
    if target.head.is_empty() {
        return Err(DiffError::Git(
            "this checkpoint was saved by an afe that did not record its commit".to_string(),
        ));
    }
    let scratch =
        std::env::temp_dir().join(format!("afe-diff-{}-{}-{}", std::process::id(), ticket, id));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| DiffError::Git(e.to_string()))?;
    let made = async {
        git(&scratch, &["init", "-q", "--bare"]).await?;
        for (n, checkpoint) in checkpoints[..=at].iter().enumerate() {
            let file = scratch.join(format!("{n}.bundle"));
            std::fs::write(&file, store.bundle(checkpoint.id).await?)
                .map_err(|e| DiffError::Git(e.to_string()))?;
            let file = file.display().to_string();
            let refspec = format!("+refs/heads/*:refs/afe/{n}/*");
            git(&scratch, &["fetch", "-q", "--no-tags", &file, &refspec]).await?;
        }
        let from = at
            .checked_sub(1)
            .map(|before| checkpoints[before].head.clone())
            .filter(|head| !head.is_empty());
        let text = match &from {
            Some(from) => git(&scratch, &["diff", "--stat", "--patch", from, &target.head]).await?,
            None => git(&scratch, &["show", "--stat", "--format=%s", &target.head]).await?,
        };
        Ok::<_, DiffError>((from, text))
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    let (from, text) = made?;
    let truncated = text.len() > MAX_DIFF;
    let text = String::from_utf8_lossy(&text[..text.len().min(MAX_DIFF)]).into_owned();
    Ok(WorkspaceDiff {
        checkpoint: target,
        from,
        text,
        truncated,
    })
}
