//! A ticket's workspace in its sandbox, through the Sandbox port: bundles written into it and
//! fetched (a clone, a restore), checkpoints read out of it, the ticket's branches bundled for a
//! push. Everything runs as the sandbox's user; nothing here holds a credential.

use afe_sandbox::{ExecOutput, ExecRequest, Opened, Payload, Sandbox, workspace};

use crate::error::WorkspaceError;
use crate::scripts::{self, BUNDLE_REFUSED, CheckpointOutput};

/// A bundle to put into a workspace: the ref it carries and the commit that ref has.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub git_ref: String,
    pub head: String,
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle")
            .field("git_ref", &self.git_ref)
            .field("head", &self.head)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// What a checkpoint found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checkpointed {
    /// Nothing changed since the last checkpoint ("no change", not an error).
    Unchanged,
    /// The work branch moved: its new head, and the bundle of what is new.
    Saved(Bundle),
}

/// The workspace of an open sandbox.
pub struct Workspace<'a> {
    sandbox: &'a dyn Sandbox,
    opened: &'a Opened,
}

impl std::fmt::Debug for Workspace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("sandbox", &self.opened.id)
            .finish()
    }
}

impl<'a> Workspace<'a> {
    pub fn new(sandbox: &'a dyn Sandbox, opened: &'a Opened) -> Workspace<'a> {
        Workspace { sandbox, opened }
    }

    pub fn work_branch(&self) -> String {
        scripts::work_branch(&self.opened.ticket)
    }

    async fn run(&self, argv: Vec<String>, limit: usize) -> Result<ExecOutput, WorkspaceError> {
        let mut request = ExecRequest::new(argv);
        request.workdir = Some(workspace::ROOT.to_string());
        request.output_limit = limit;
        Ok(self
            .sandbox
            .exec(self.opened, &request, &mut |_| {})
            .await?)
    }

    /// A new repository at `/workspace/repo` from `bundles` in order (a clone's one bundle, or a
    /// ticket's checkpoints), each verified before it is fetched, the work branch checked out at
    /// the last one's head.
    pub async fn restore(&self, bundles: &[Bundle]) -> Result<(), WorkspaceError> {
        let mut files = Vec::with_capacity(bundles.len());
        for (index, bundle) in bundles.iter().enumerate() {
            let file = format!("{}/{index}.bundle", scripts::BUNDLES);
            self.sandbox
                .put(self.opened, &file, Payload::File(bundle.bytes.clone()))
                .await?;
            files.push((file, bundle.git_ref.clone()));
        }
        let head = bundles.last().map(|b| b.head.as_str()).unwrap_or_default();
        let ran = self
            .run(scripts::restore(&self.work_branch(), head, &files), 1 << 20)
            .await?;
        match ran.status {
            0 => Ok(()),
            BUNDLE_REFUSED => Err(WorkspaceError::Bundle {
                what: format!("a bundle of ticket {}", self.opened.ticket),
                detail: ran.stderr.text().trim().to_string(),
            }),
            _ => Err(WorkspaceError::InSandbox {
                operation: "restore the workspace",
                detail: ran.stderr.text().trim().to_string(),
            }),
        }
    }

    /// Commits what the node left on the work branch and, when it moved since `previous` (the
    /// last checkpoint's head), returns the bundle of what is new.
    pub async fn checkpoint(
        &self,
        previous: Option<&str>,
        node: &str,
    ) -> Result<Checkpointed, WorkspaceError> {
        let branch = self.work_branch();
        let ran = self
            .run(scripts::checkpoint(&branch, previous, node), usize::MAX)
            .await?;
        let failed = |detail: String| WorkspaceError::InSandbox {
            operation: "checkpoint the workspace",
            detail,
        };
        if !ran.succeeded() {
            return Err(failed(ran.stderr.text().trim().to_string()));
        }
        match scripts::read_checkpoint(&ran.stdout.bytes) {
            Some(CheckpointOutput::Unchanged { .. }) => Ok(Checkpointed::Unchanged),
            Some(CheckpointOutput::Changed { head, bundle }) => Ok(Checkpointed::Saved(Bundle {
                git_ref: format!("refs/heads/{branch}"),
                head,
                bytes: bundle,
            })),
            None => Err(failed(format!(
                "unexpected output: {}",
                String::from_utf8_lossy(&ran.stdout.bytes[..ran.stdout.bytes.len().min(200)])
            ))),
        }
    }

    /// Every branch of the ticket as one bundle, for the worker to push.
    pub async fn branches_bundle(&self) -> Result<Vec<u8>, WorkspaceError> {
        let ran = self
            .run(scripts::branches_bundle(&self.opened.ticket), usize::MAX)
            .await?;
        if !ran.succeeded() {
            return Err(WorkspaceError::InSandbox {
                operation: "bundle the ticket's branches",
                detail: ran.stderr.text().trim().to_string(),
            });
        }
        Ok(ran.stdout.bytes)
    }
}
