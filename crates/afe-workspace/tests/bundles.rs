//! The workspace through bundles with real git, a real git server on loopback that requires a
//! token, and the real Docker sandbox: clone, checkpoint, restore into a new sandbox, push with a
//! lease — and the token nowhere in the sandbox or a bundle.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use afe_sandbox::{ExecRequest, Opened, Sandbox, SandboxSpec};
use afe_sandbox_docker::{DockerSandbox, DockerSandboxSettings};
use afe_testkit::GitServer;
use afe_workspace::{
    Bundle, Checkpointed, Credentials, Workspace, WorkspaceError, clone_to_bundle, push_bundle,
};

const TOKEN: &str = "tok-3b9f2c81d0e44a7f";

struct Ticket {
    id: String,
    sandbox: DockerSandbox,
}

impl Ticket {
    async fn new() -> Ticket {
        Ticket {
            id: afe_testkit::unique("t").replace('_', "-"),
            sandbox: DockerSandbox::connect(DockerSandboxSettings::default())
                .await
                .expect("the Docker daemon"),
        }
    }

    async fn open(&self) -> Opened {
        let spec = SandboxSpec {
            ticket: self.id.clone(),
            image: afe_testkit::sandbox_image(),
            cpus: None,
            memory_bytes: None,
            env: BTreeMap::new(),
            egress: Vec::new(),
            runtime_class: None,
        };
        let opened = self.sandbox.open(&spec).await.unwrap();
        self.sandbox.wait_ready(&opened).await.unwrap();
        opened
    }

    async fn sh(&self, opened: &Opened, script: &str) -> String {
        let ran = self
            .sandbox
            .exec(opened, &ExecRequest::new(["sh", "-c", script]), &mut |_| {})
            .await
            .unwrap();
        assert!(ran.succeeded(), "{script}: {}", ran.stderr.text());
        ran.stdout.text()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let id = self.id.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                if let Ok(sandbox) = DockerSandbox::connect(DockerSandboxSettings::default()).await
                {
                    let _ = sandbox.remove(&id).await;
                }
            })
        })
        .join();
    }
}

fn first_bundle(cloned: &afe_workspace::Cloned) -> Bundle {
    Bundle {
        git_ref: cloned.git_ref.clone(),
        head: cloned.head.clone(),
        bytes: cloned.bundle.clone(),
    }
}

/// Clone with the token, change, checkpoint, lose the sandbox, restore into a new one, push with
/// a lease; a push that already happened is reconciled; a branch someone else wrote is refused.
#[tokio::test]
async fn clone_checkpoint_restore_and_push_through_bundles() {
    let server = GitServer::start(TOKEN).await;
    let url = server.create_repo("app", &[("README", b"hello\n"), ("src/lib.txt", b"v1\n")]);
    let cloned = clone_to_bundle(&url, None, &Credentials::token(TOKEN))
        .await
        .unwrap();
    assert_eq!(
        (cloned.branch.as_str(), cloned.git_ref.as_str()),
        ("main", "refs/heads/main")
    );
    assert_eq!(Some(cloned.head.clone()), server.commit("app", "main"));

    let ticket = Ticket::new().await;
    let first = ticket.open().await;
    let workspace = Workspace::new(&ticket.sandbox, &first);
    workspace.restore(&[first_bundle(&cloned)]).await.unwrap();
    assert_eq!(
        ticket
            .sh(&first, "git symbolic-ref --short HEAD && cat src/lib.txt")
            .await,
        format!("afe/{}/work\nv1\n", ticket.id)
    );
    assert_eq!(
        workspace
            .checkpoint(Some(&cloned.head), "noop")
            .await
            .unwrap(),
        Checkpointed::Unchanged,
        "no change is not an error"
    );

    ticket
        .sh(&first, "echo v2 > src/lib.txt && echo new > added.txt")
        .await;
    let Checkpointed::Saved(change) = workspace
        .checkpoint(Some(&cloned.head), "edit")
        .await
        .unwrap()
    else {
        panic!("a change is saved");
    };
    assert_eq!(change.git_ref, format!("refs/heads/afe/{}/work", ticket.id));
    assert!(
        change.bytes.len() < cloned.bundle.len() + 1024,
        "incremental: only what is new"
    );
    assert_eq!(
        workspace
            .checkpoint(Some(&change.head), "again")
            .await
            .unwrap(),
        Checkpointed::Unchanged
    );

    // The sandbox is lost; a new one is restored from the bundles alone.
    ticket.sandbox.remove(&ticket.id).await.unwrap();
    let second = ticket.open().await;
    assert!(second.fresh);
    let restored = Workspace::new(&ticket.sandbox, &second);
    restored
        .restore(&[first_bundle(&cloned), change.clone()])
        .await
        .unwrap();
    assert_eq!(
        ticket.sh(&second, "git rev-parse HEAD && cat src/lib.txt added.txt && git status --porcelain && ls /workspace/.afe 2>&1 | wc -l").await,
        format!("{}\nv2\nnew\n0\n", change.head),
        "the change is there, the tree is clean, the bundles are gone"
    );

    // The push: the ticket's branch reaches the server with the token, with a lease.
    let bundle = restored.branches_bundle().await.unwrap();
    let pushed = push_bundle(&url, &bundle, &Credentials::token(TOKEN))
        .await
        .unwrap();
    let branch = format!("refs/heads/afe/{}/work", ticket.id);
    assert_eq!(pushed.moved.get(&branch), Some(&change.head));
    assert_eq!(server.commit("app", &branch), Some(change.head.clone()));
    assert_eq!(
        server.file("app", &branch, "src/lib.txt").as_deref(),
        Some(&b"v2\n"[..])
    );
    let pushes = server.seen.pushes.load(Ordering::SeqCst);

    // Pushed again (a worker that died after the push reached the server): reconciled.
    let again = push_bundle(&url, &bundle, &Credentials::token(TOKEN))
        .await
        .unwrap();
    assert!(again.moved.is_empty());
    assert_eq!(again.already.get(&branch), Some(&change.head));
    assert_eq!(
        server.seen.pushes.load(Ordering::SeqCst),
        pushes,
        "nothing sent twice"
    );

    // Someone else wrote the branch: refused, and their commit stays.
    let other = server.create_repo("other", &[("x", b"x\n")]);
    let _ = other;
    let foreign = server.commit("other", "main").unwrap();
    std::process::Command::new("git")
        .args(["fetch", "-q"])
        .arg(server.root.join("other.git"))
        .arg(format!("main:{branch}"))
        .arg("--force")
        .current_dir(server.root.join("app.git"))
        .status()
        .unwrap();
    assert_eq!(server.commit("app", &branch), Some(foreign.clone()));
    let refused = push_bundle(&url, &bundle, &Credentials::token(TOKEN)).await;
    assert!(
        matches!(&refused, Err(WorkspaceError::Diverged { found, .. }) if *found == foreign),
        "{refused:?}"
    );
    assert_eq!(server.commit("app", &branch), Some(foreign));
}

/// No token or a wrong one: the forge refuses and the error says which; nothing is cloned.
#[tokio::test]
async fn a_refused_token_is_named_as_such() {
    let server = GitServer::start(TOKEN).await;
    let url = server.create_repo("app", &[("README", b"hello\n")]);
    for credentials in [Credentials::none(), Credentials::token("wrong")] {
        let refused = clone_to_bundle(&url, None, &credentials).await;
        assert!(
            matches!(&refused, Err(WorkspaceError::Refused { .. })),
            "{credentials:?}: {refused:?}"
        );
        assert_eq!(refused.unwrap_err().code(), "AFE-GIT-002");
    }
    assert!(server.seen.refused.load(Ordering::SeqCst) >= 2);
    let missing = clone_to_bundle(&server.url("nope"), None, &Credentials::token(TOKEN)).await;
    assert!(
        matches!(missing, Err(WorkspaceError::Remote { .. })),
        "{missing:?}"
    );
}

/// A damaged bundle is refused before anything is fetched from it.
#[tokio::test]
async fn a_damaged_bundle_does_not_restore() {
    let server = GitServer::start(TOKEN).await;
    let url = server.create_repo("app", &[("README", b"hello\n")]);
    let cloned = clone_to_bundle(&url, None, &Credentials::token(TOKEN))
        .await
        .unwrap();
    let mut damaged = first_bundle(&cloned);
    let at = damaged.bytes.len() - 30;
    damaged.bytes[at] ^= 0xff;
    let ticket = Ticket::new().await;
    let opened = ticket.open().await;
    let refused = Workspace::new(&ticket.sandbox, &opened)
        .restore(&[damaged])
        .await;
    assert!(
        matches!(refused, Err(WorkspaceError::Bundle { .. })),
        "{refused:?}"
    );
}

/// The token is in no bundle and nowhere in the sandbox: not its environment, its files, or its
/// processes' arguments and environments — searched by the sandbox's root with the token read
/// from standard input, so the search itself does not carry it in an argument.
#[tokio::test]
async fn the_token_never_enters_the_sandbox() {
    let server = GitServer::start(TOKEN).await;
    let url = server.create_repo("app", &[("README", b"hello\n")]);
    let cloned = clone_to_bundle(&url, None, &Credentials::token(TOKEN))
        .await
        .unwrap();
    let ticket = Ticket::new().await;
    let opened = ticket.open().await;
    let workspace = Workspace::new(&ticket.sandbox, &opened);
    workspace.restore(&[first_bundle(&cloned)]).await.unwrap();
    ticket.sh(&opened, "echo change > f").await;
    let Checkpointed::Saved(change) = workspace
        .checkpoint(Some(&cloned.head), "edit")
        .await
        .unwrap()
    else {
        panic!("saved");
    };
    let pushed_bundle = workspace.branches_bundle().await.unwrap();
    push_bundle(&url, &pushed_bundle, &Credentials::token(TOKEN))
        .await
        .unwrap();
    let contains = |bytes: &[u8]| bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes());
    for (what, bytes) in [
        ("the clone's bundle", &cloned.bundle),
        ("the checkpoint's bundle", &change.bytes),
        ("the pushed bundle", &pushed_bundle),
    ] {
        assert!(!contains(bytes), "{what} holds the token");
    }
    // The search reads the token from standard input and matches inside the shell and grep's
    // pattern file, so no process it starts carries the token in its arguments. The positive
    // control plants it first (a file, a process's environment): the same search finds both.
    let search = |plant: bool| {
        let script = r#"read -r token
if [ "$1" = plant ]; then
  printf '%s\n' "$token" > /tmp/planted
  AFE_PLANTED="$token" sleep 60 &
fi
files=0; processes=0
printf '%s\n' "$token" | grep -rqsF -f - / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev && files=1
for p in /proc/[0-9]*; do
  [ "$p" = "/proc/$$" ] && continue
  seen=$(tr '\000' '\n' < "$p/cmdline" 2>/dev/null; tr '\000' '\n' < "$p/environ" 2>/dev/null)
  case "$seen" in *"$token"*) processes=1 ;; esac
done
echo "files=$files processes=$processes""#;
        ExecRequest {
            stdin: Some(format!("{TOKEN}\n").into_bytes()),
            ..ExecRequest::new([
                "sh",
                "-c",
                script,
                "sh",
                if plant { "plant" } else { "look" },
            ])
        }
    };
    let docker = ticket.sandbox.docker().clone();
    let as_root = |request: ExecRequest| {
        let docker = docker.clone();
        let id = opened.id.clone();
        async move {
            let ran = afe_sandbox_docker::exec::run(
                &docker,
                &afe_sandbox_docker::exec::Command {
                    container: &id,
                    user: "0",
                    argv: request.argv.clone(),
                    env: Vec::new(),
                    workdir: None,
                    stdin: request.stdin.as_deref(),
                    output_limit: 1 << 20,
                },
                &mut |_| {},
            )
            .await
            .unwrap();
            ran.stdout.text()
        }
    };
    assert_eq!(
        as_root(search(false)).await,
        "files=0 processes=0\n",
        "the token is nowhere in the sandbox"
    );
    assert_eq!(
        as_root(search(true)).await,
        "files=1 processes=1\n",
        "positive control: the search finds a planted token"
    );
    let inspected = docker
        .inspect_container(
            &opened.id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    assert!(
        !format!("{inspected:?}").contains(TOKEN),
        "the container's configuration"
    );
}
