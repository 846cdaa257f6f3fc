//! The Docker sandbox against the real daemon: what a ticket's sandbox is made of and as whom it
//! runs (read from inside it), reuse and recreation by signature, commands with their streams,
//! files in and out, the lifecycle marker, removal by label, and a sandbox that is gone.

mod support;

use std::collections::BTreeMap;

use afe_sandbox::{ExecRequest, Lifecycle, Marker, OutputChunk, Payload, Sandbox, SandboxError};
use afe_sandbox_docker::DockerSandboxSettings;
use support::*;

/// The sandbox's processes run as uid 1000 with no capability at all, no new privileges, under
/// Docker's default seccomp profile, with nothing of the worker's environment but what the flow
/// names, no Docker socket, and the flow's limits: as seen from inside.
#[tokio::test]
async fn the_sandbox_runs_as_uid_1000_with_nothing_it_was_not_given() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let mut spec = spec(&ticket);
    spec.env = BTreeMap::from([("GIVEN".to_string(), "by the flow".to_string())]);
    let opened = open(&sandbox, &spec).await;
    assert!(opened.fresh);

    let seen = sh(
        &sandbox,
        &opened,
        "id -u; id -g; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; env; ls -la /var/run/docker.sock 2>&1; cd /sys/fs/cgroup; if [ -f memory.max ]; then echo memory=$(cat memory.max) cpu=$(cat cpu.max | tr ' ' /); else echo memory=$(cat memory/memory.limit_in_bytes) cpu=$(cat cpu/cpu.cfs_quota_us)/$(cat cpu/cpu.cfs_period_us); fi",
    )
    .await;
    let text = seen.stdout.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..2], ["1000", "1000"], "{text}");
    for line in [
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        // 2: a seccomp filter is in place (Docker's default profile; unconfined would be 0).
        "Seccomp:\t2",
    ] {
        assert!(lines.contains(&line), "{line:?} missing: {text}");
    }
    assert!(lines.contains(&"GIVEN=by the flow"), "{text}");
    // Exactly the image's variables, Docker's HOSTNAME, the shell's own and the flow's: nothing
    // of the worker's (this test process has dozens, cargo's among them).
    let names: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l.split_once('=').map(|(name, _)| name))
        .filter(|name| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect();
    let expected: std::collections::BTreeSet<&str> = ["GIVEN", "HOME", "HOSTNAME", "PATH", "PWD"]
        .into_iter()
        .collect();
    assert_eq!(names, expected, "{text}");
    assert!(
        text.contains("No such file or directory"),
        "no Docker socket: {text}"
    );
    // The flow's limits, as the kernel enforces them (cgroup v2 or v1).
    assert!(
        lines.contains(&"memory=268435456 cpu=100000/100000"),
        "256 MiB and one CPU: {text}"
    );
}

/// Opening again with the same signature reuses the sandbox and what its workspace holds; a new
/// signature (another egress, another limit) recreates it empty.
#[tokio::test]
async fn open_reuses_while_the_signature_holds_and_recreates_when_it_changes() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let spec = spec(&ticket);
    let first = open(&sandbox, &spec).await;
    sh(&sandbox, &first, "echo kept > /workspace/repo/note").await;

    let again = open(&sandbox, &spec).await;
    assert!(!again.fresh, "same signature: reused");
    let read = sh(&sandbox, &again, "cat /workspace/repo/note").await;
    assert_eq!(read.stdout.text(), "kept\n");

    let mut changed = spec.clone();
    changed.memory_bytes = Some(300 << 20);
    let recreated = open(&sandbox, &changed).await;
    assert!(recreated.fresh, "a new signature: recreated");
    let read = sh(
        &sandbox,
        &recreated,
        "cat /workspace/repo/note 2>&1; echo $?",
    )
    .await;
    assert!(
        read.stdout.text().ends_with("1\n"),
        "the workspace is new: {}",
        read.stdout.text()
    );
}

/// stdout and stderr arrive as they are written, stdin reaches the command whole, the status and
/// the working directory are the command's, and output past the bound is counted, not kept.
#[tokio::test]
async fn exec_streams_output_feeds_stdin_and_bounds_what_it_keeps() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let opened = open(&sandbox, &spec(&ticket)).await;

    let mut request = ExecRequest::new([
        "sh",
        "-c",
        "pwd; printf 'err\\n' >&2; wc -c; echo \"$EXTRA\"; exit 7",
    ]);
    let stdin: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    request.stdin = Some(stdin);
    request.env = vec![("EXTRA".to_string(), "for this command".to_string())];
    let mut chunks = Vec::new();
    let ran = sandbox
        .exec(&opened, &request, &mut |chunk: &OutputChunk| {
            chunks.push(chunk.clone())
        })
        .await
        .unwrap();
    assert_eq!(ran.status, 7);
    assert_eq!(
        ran.stdout.text(),
        "/workspace/repo\n200000\nfor this command\n"
    );
    assert_eq!(ran.stderr.text(), "err\n");
    assert!(chunks.iter().any(|c| matches!(c, OutputChunk::Stderr(_))));

    let mut loud = ExecRequest::new(["sh", "-c", "head -c 100000 /dev/zero"]);
    loud.output_limit = 1000;
    let mut streamed = 0;
    let ran = sandbox
        .exec(&opened, &loud, &mut |chunk: &OutputChunk| {
            if let OutputChunk::Stdout(bytes) = chunk {
                streamed += bytes.len();
            }
        })
        .await
        .unwrap();
    assert_eq!(streamed, 100_000, "every byte streamed");
    assert_eq!(ran.stdout.bytes.len(), 1000);
    assert_eq!(ran.stdout.dropped, 99_000);

    let escape = ExecRequest {
        workdir: Some("/etc".to_string()),
        ..ExecRequest::new(["true"])
    };
    let refused = sandbox.exec(&opened, &escape, &mut |_| {}).await;
    assert!(
        matches!(refused, Err(SandboxError::PathRefused { .. })),
        "{refused:?}"
    );
}

/// An attached command is talked with while it runs: each line written to its stdin is answered
/// before the next is sent, stderr comes apart, closing stdin ends it with its own status; a
/// command that would never end is killed from outside.
#[tokio::test]
async fn an_attached_command_is_talked_with_while_it_runs_and_can_be_killed() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let opened = open(&sandbox, &spec(&ticket)).await;

    let mut request = ExecRequest::new([
        "sh",
        "-c",
        "echo ready >&2; while read -r line; do echo \"got $line from $PWD\"; done; exit 3",
    ]);
    request.env = vec![("EXTRA".to_string(), "x".to_string())];
    let mut attached = sandbox.attach(&opened, &request).await.unwrap();
    let mut stdout = String::new();
    let mut stderr = String::new();
    for word in ["one", "two"] {
        attached
            .stdin
            .send(format!("{word}\n").into_bytes())
            .await
            .unwrap();
        // The answer to this line arrives while stdin is still open.
        while !stdout.contains(&format!("got {word}")) {
            match attached.output.recv().await.unwrap() {
                OutputChunk::Stdout(bytes) => stdout.push_str(&String::from_utf8_lossy(&bytes)),
                OutputChunk::Stderr(bytes) => stderr.push_str(&String::from_utf8_lossy(&bytes)),
            }
        }
    }
    assert_eq!(
        stdout,
        "got one from /workspace/repo\ngot two from /workspace/repo\n"
    );
    drop(attached.stdin);
    while let Some(chunk) = attached.output.recv().await {
        if let OutputChunk::Stderr(bytes) = chunk {
            stderr.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    assert_eq!(stderr, "ready\n");
    assert_eq!(attached.status.await.unwrap().unwrap(), 3);

    // Stdin left open, a command that never ends: the kill ends it (SIGKILL: 137).
    let endless = sandbox
        .attach(&opened, &ExecRequest::new(["sleep", "100000"]))
        .await
        .unwrap();
    let _stdin = endless.stdin;
    endless.kill.send(()).unwrap();
    let mut output = endless.output;
    while output.recv().await.is_some() {}
    assert_eq!(endless.status.await.unwrap().unwrap(), 137);
}

/// Files and tar streams go in and come out as the sandbox's user; paths outside the workspace
/// are refused before anything runs.
#[tokio::test]
async fn put_and_get_files_and_tar_streams_as_the_sandboxs_user() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let opened = open(&sandbox, &spec(&ticket)).await;

    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    sandbox
        .put(&opened, "deep/in/a/file.bin", Payload::File(bytes.clone()))
        .await
        .unwrap();
    let back = sandbox
        .get(&opened, "deep/in/a/file.bin", false)
        .await
        .unwrap();
    assert_eq!(back, Payload::File(bytes));
    let owner = sh(
        &sandbox,
        &opened,
        "stat -c %u /workspace/repo/deep/in/a/file.bin",
    )
    .await;
    assert_eq!(owner.stdout.text(), "1000\n");

    let mut archive = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(5);
    header.set_mode(0o644);
    header.set_cksum();
    archive
        .append_data(&mut header, "x/y.txt", &b"hello"[..])
        .unwrap();
    sandbox
        .put(
            &opened,
            "/workspace/unpacked",
            Payload::Tar(archive.into_inner().unwrap()),
        )
        .await
        .unwrap();
    let Payload::Tar(packed) = sandbox
        .get(&opened, "/workspace/unpacked", true)
        .await
        .unwrap()
    else {
        panic!("a tar comes back");
    };
    let mut names = Vec::new();
    for entry in tar::Archive::new(&packed[..]).entries().unwrap() {
        names.push(entry.unwrap().path().unwrap().display().to_string());
    }
    assert!(names.iter().any(|n| n.ends_with("x/y.txt")), "{names:?}");

    for outside in ["/etc/passwd", "../../etc/shadow"] {
        let refused = sandbox
            .put(&opened, outside, Payload::File(b"x".to_vec()))
            .await;
        assert!(
            matches!(refused, Err(SandboxError::PathRefused { .. })),
            "{outside}: {refused:?}"
        );
    }
    // A symlink the ticket made leads nowhere its user could not write anyway.
    sh(&sandbox, &opened, "ln -s /etc /workspace/repo/etc-link").await;
    let through_link = sandbox
        .put(
            &opened,
            "etc-link/passwd",
            Payload::File(b"root::0:0::/:/bin/sh\n".to_vec()),
        )
        .await;
    assert!(
        matches!(through_link, Err(SandboxError::PathRefused { .. })),
        "{through_link:?}"
    );
}

/// The marker is the engine's to write: root's file, which the ticket's user reads but cannot
/// change.
#[tokio::test]
async fn the_lifecycle_marker_is_written_by_the_engine_and_not_by_the_ticket() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let opened = open(&sandbox, &spec(&ticket)).await;
    assert_eq!(sandbox.read_marker(&opened).await.unwrap(), None);
    let marker = Marker::now(Lifecycle::Working, "worker-a");
    sandbox.mark(&opened, &marker).await.unwrap();
    assert_eq!(
        sandbox.read_marker(&opened).await.unwrap(),
        Some(marker.clone())
    );
    let tamper = sh(
        &sandbox,
        &opened,
        "echo '{}' > /run/afe/lifecycle.json; echo $?; rm -f /run/afe/lifecycle.json; echo $?",
    )
    .await;
    let text = tamper.stdout.text();
    let statuses: Vec<&str> = text.lines().collect();
    assert!(
        statuses.len() == 2 && statuses.iter().all(|s| *s != "0"),
        "the ticket's user can neither write nor remove it: {statuses:?}"
    );
    assert_eq!(sandbox.read_marker(&opened).await.unwrap(), Some(marker));
}

/// Removal finds everything of the ticket by its label — containers and volume — and removing
/// again is not an error.
#[tokio::test]
async fn remove_takes_everything_of_the_ticket_by_label_and_is_idempotent() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let opened = open(&sandbox, &spec(&ticket)).await;
    assert_eq!(
        sandbox_objects(&ticket).await,
        (2, 1),
        "holder and sandbox (no proxy without egress), and the volume"
    );
    // Found by its ticket alone, as the worker finds a paused ticket's sandbox to mark it.
    assert_eq!(
        sandbox.opened(&ticket).await.unwrap().map(|o| o.id),
        Some(opened.id)
    );
    sandbox.remove(&ticket).await.unwrap();
    sandbox.remove(&ticket).await.unwrap();
    assert_eq!(sandbox_objects(&ticket).await, (0, 0));
    assert_eq!(sandbox.opened(&ticket).await.unwrap(), None);
}

/// A sandbox whose container was killed is gone: a command in it says so (the engine restores the
/// ticket elsewhere), and opening again makes a new one rather than reusing a dead one.
#[tokio::test]
async fn a_killed_sandbox_is_gone_and_opening_again_makes_a_new_one() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let spec = spec(&ticket);
    let opened = open(&sandbox, &spec).await;
    let docker = sandbox.docker().clone();
    let id = opened.id.clone();
    // Killed while a command runs in it: the command's exec learns it from the daemon.
    let running = tokio::spawn({
        let opened = opened.clone();
        async move {
            let sandbox = adapter(DockerSandboxSettings::default()).await;
            let request = ExecRequest::new(["sh", "-c", "echo started; sleep 600"]);
            sandbox.exec(&opened, &request, &mut |_| {}).await
        }
    });
    // The command has started once the process is in the container's process list.
    loop {
        let top = docker
            .top_processes(&id, None::<bollard::query_parameters::TopOptions>)
            .await
            .unwrap();
        let listed = format!("{:?}", top.processes);
        if listed.contains("sleep 600") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    docker
        .kill_container(&id, None::<bollard::query_parameters::KillContainerOptions>)
        .await
        .unwrap();
    let cut = running.await.unwrap();
    assert!(matches!(&cut, Err(e) if e.is_gone()), "{cut:?}");
    let after = sandbox
        .exec(&opened, &ExecRequest::new(["true"]), &mut |_| {})
        .await;
    assert!(matches!(&after, Err(e) if e.is_gone()), "{after:?}");
    let reopened = open(&sandbox, &spec).await;
    assert!(
        reopened.fresh,
        "a stopped sandbox is recreated, not resumed"
    );
}

/// An image that is not on the daemon is the flow's to fix, and nothing is pulled for it.
#[tokio::test]
async fn a_missing_image_is_named_and_nothing_is_left() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let mut spec = spec(&ticket);
    spec.image = "afe-no-such-image:never".to_string();
    let refused = sandbox.open(&spec).await;
    assert!(
        matches!(&refused, Err(SandboxError::Image { image, .. }) if image == "afe-no-such-image:never"),
        "{refused:?}"
    );
    assert_eq!(sandbox_objects(&ticket).await, (0, 0));
}

/// A create cut short leaves a volume behind with what it held; opening makes the sandbox anew
/// with an empty workspace, not on the leftover.
#[tokio::test]
async fn a_leftover_volume_does_not_become_the_new_workspace() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings::default()).await;
    let spec = spec(&ticket);
    let first = open(&sandbox, &spec).await;
    sh(&sandbox, &first, "echo stale > /workspace/repo/left").await;
    // Only the containers go, as when a worker died removing them.
    for name in [format!("afe-{ticket}"), format!("afe-{ticket}-net")] {
        sandbox
            .docker()
            .remove_container(
                &name,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await
            .unwrap();
    }
    assert_eq!(sandbox_objects(&ticket).await, (0, 1));
    let second = open(&sandbox, &spec).await;
    assert!(second.fresh);
    let seen = sh(&sandbox, &second, "ls -A /workspace/repo | wc -l").await;
    assert_eq!(seen.stdout.text(), "0\n", "the workspace is empty");
}

/// An engine image that is not there is named as the engine's, with what to do about it, and
/// nothing of the ticket is made.
#[tokio::test]
async fn a_missing_engine_image_is_the_engines_error() {
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(DockerSandboxSettings {
        engine_image: Some("afe-no-such-engine:never".to_string()),
        ..DockerSandboxSettings::default()
    })
    .await;
    let refused = sandbox.open(&spec(&ticket)).await.unwrap_err();
    assert_eq!(refused.code(), "AFE-SBX-008", "{refused}");
    assert!(refused.help().contains("scripts/build-engine"));
    assert_eq!(sandbox_objects(&ticket).await, (0, 0));
}
