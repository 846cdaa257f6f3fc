//! `af-bench sandbox`: afe's Docker sandbox against what it is made of, each figure a ratio to a
//! baseline measured in the same invocation, rounds alternating between the two:
//!
//! - open (ready to run a command, netlock and proxy included) against `docker run` of the same
//!   image: create and start a container through the Engine API and run its first command;
//! - a command's round trip (`true`) through the port against a plain exec in a plain container;
//! - a checkpoint of a 1 KB change in a repository of about 100 MB of incompressible files,
//!   against a bundle of the whole repository: bytes and time;
//! - a restore of a ticket's bundles into a new sandbox against a fresh `git clone` of the same
//!   repository from a git server on loopback.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;
use std::time::Instant;

use afe_sandbox::{ExecRequest, Opened, Sandbox, SandboxSpec};
use afe_sandbox_docker::exec::{self, Command};
use afe_sandbox_docker::{DockerSandbox, DockerSandboxSettings};
use afe_testkit::GitServer;
use afe_workspace::{Bundle, Checkpointed, Credentials, Workspace};
use anyhow::{Context, Result, bail};
use bollard::Docker;

#[derive(Debug)]
pub struct Options {
    pub rounds: usize,
    /// Megabytes of incompressible files in the checkpoint's repository.
    pub repository_mb: usize,
}

fn spec(ticket: &str, image: &str, egress: bool) -> SandboxSpec {
    SandboxSpec {
        ticket: ticket.to_string(),
        image: image.to_string(),
        cpus: None,
        memory_bytes: None,
        env: BTreeMap::new(),
        egress: if egress {
            vec![af_manifest::parse_host_rule("pypi.org").expect("a host rule")]
        } else {
            Vec::new()
        },
        runtime_class: None,
    }
}

fn ticket(tag: &str, round: usize) -> String {
    format!("bench-{tag}-{}-{round}", std::process::id())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn seconds(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

/// `docker run -d IMAGE` and its first command, through the Engine API: the baseline of open.
async fn docker_run(docker: &Docker, image: &str, name: &str) -> Result<f64> {
    let started = Instant::now();
    docker
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(name.to_string()),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(image.to_string()),
                entrypoint: Some(vec!["sh".into(), "-c".into()]),
                cmd: Some(vec!["while :; do sleep 3600; done".into()]),
                ..Default::default()
            },
        )
        .await?;
    docker
        .start_container(
            name,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await?;
    plain_exec(docker, name).await?;
    Ok(seconds(started))
}

/// The least a sandbox shaped as a pod can cost: a plain holder started, then a container of
/// `image` in its namespace started, then its first command — no lock, no proxy, no volume.
async fn pod_floor(docker: &Docker, engine: &str, image: &str, name: &str) -> Result<f64> {
    let started = Instant::now();
    let holder = format!("{name}-net");
    for (container, body) in [
        (
            holder.clone(),
            bollard::models::ContainerCreateBody {
                image: Some(engine.to_string()),
                cmd: Some(vec!["hold".into()]),
                host_config: Some(bollard::models::HostConfig {
                    network_mode: Some("none".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
        (
            name.to_string(),
            bollard::models::ContainerCreateBody {
                image: Some(image.to_string()),
                entrypoint: Some(vec!["sh".into(), "-c".into()]),
                cmd: Some(vec!["while :; do sleep 3600; done".into()]),
                host_config: Some(bollard::models::HostConfig {
                    network_mode: Some(format!("container:{holder}")),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
    ] {
        docker
            .create_container(
                Some(bollard::query_parameters::CreateContainerOptions {
                    name: Some(container.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await?;
        docker
            .start_container(
                &container,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await?;
    }
    plain_exec(docker, name).await?;
    let took = seconds(started);
    remove_container(docker, name).await;
    remove_container(docker, &holder).await;
    Ok(took)
}

/// One `true` through the Engine API's exec, as `docker exec` runs it.
async fn plain_exec(docker: &Docker, container: &str) -> Result<f64> {
    let started = Instant::now();
    let ran = exec::run(
        docker,
        &Command {
            container,
            user: "1000:1000",
            argv: vec!["true".to_string()],
            env: Vec::new(),
            workdir: None,
            stdin: None,
            output_limit: 1024,
        },
        &mut |_| {},
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    if ran.status != 0 {
        bail!("true exited {}", ran.status);
    }
    Ok(seconds(started))
}

async fn remove_container(docker: &Docker, name: &str) {
    let _ = docker
        .remove_container(
            name,
            Some(bollard::query_parameters::RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
}

async fn open_ready(sandbox: &DockerSandbox, spec: &SandboxSpec) -> Result<(Opened, f64)> {
    let started = Instant::now();
    let opened = sandbox.open(spec).await?;
    sandbox.wait_ready(&opened).await?;
    Ok((opened, seconds(started)))
}

/// A repository of `mb` files of 1 MiB from /dev/urandom (git cannot compress them), one commit on
/// `main`, at `dir`.
fn make_repository(dir: &Path, mb: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let git = |args: &[&str]| -> Result<()> {
        let status = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=bench",
                "-c",
                "user.email=bench@example.invalid",
            ])
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            bail!("git {args:?} failed");
        }
        Ok(())
    };
    git(&["init", "-q", "-b", "main"])?;
    let mut random = std::fs::File::open("/dev/urandom")?;
    for n in 0..mb {
        let mut file = std::fs::File::create(dir.join(format!("data-{n:03}.bin")))?;
        std::io::copy(
            &mut std::io::Read::by_ref(&mut random).take(1 << 20),
            &mut file,
        )?;
    }
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "a large repository"])?;
    Ok(())
}

pub async fn run(options: Options) -> Result<()> {
    let sandbox = DockerSandbox::connect(DockerSandboxSettings::default())
        .await
        .context("the Docker daemon")?;
    let measured = measure(&sandbox, &options).await;
    // Whatever the benchmark made, it removes, failed or not: its tickets are found by label.
    let docker = sandbox.docker();
    let leftovers = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_string(),
                vec!["app.kubernetes.io/managed-by=afe".to_string()],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap_or_default();
    let mine = format!("-{}-", std::process::id());
    for container in leftovers {
        let ticket = container
            .labels
            .as_ref()
            .and_then(|l| l.get("afe.ticket"))
            .cloned()
            .unwrap_or_default();
        if ticket.starts_with("bench-") && ticket.contains(&mine) {
            let _ = sandbox.remove(&ticket).await;
        }
    }
    for tag in ["run", "floor", "plain"] {
        for round in 0..=options.rounds {
            remove_container(docker, &ticket(tag, round)).await;
            remove_container(docker, &format!("{}-net", ticket(tag, round))).await;
        }
    }
    measured
}

async fn measure(sandbox: &DockerSandbox, options: &Options) -> Result<()> {
    let image = afe_testkit::sandbox_image();
    let docker = sandbox.docker().clone();
    println!(
        "afe sandbox on Docker, image {image}, {} rounds each, baselines alternating",
        options.rounds
    );

    // Open: a warm-up of each first (the engine image is built, the image's layers are cached).
    let engine = af_docker::engine_image::ensure(&docker).await?;
    let (mut baseline, mut floors, mut bare, mut proxied) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=options.rounds {
        let name = ticket("run", round);
        let base = docker_run(&docker, &image, &name).await?;
        remove_container(&docker, &name).await;
        let floor = pod_floor(&docker, &engine, &image, &ticket("floor", round)).await?;
        let (_, without) =
            open_ready(sandbox, &spec(&ticket("open", round), &image, false)).await?;
        sandbox.remove(&ticket("open", round)).await?;
        let (_, with) = open_ready(sandbox, &spec(&ticket("proxy", round), &image, true)).await?;
        sandbox.remove(&ticket("proxy", round)).await?;
        if round > 0 {
            baseline.push(base);
            floors.push(floor);
            bare.push(without);
            proxied.push(with);
        }
    }
    let base = median(&mut baseline);
    println!(
        "\nopen, ready to run a command (median of {})",
        options.rounds
    );
    println!("  docker run (create, start, first exec)   {:>7.3} s", base);
    let floor = median(&mut floors);
    println!(
        "  a holder and a container in its namespace {:>6.3} s  {:.2}x  (the pod's shape, nothing else: the floor)",
        floor,
        floor / base
    );
    let bare = median(&mut bare);
    let proxied = median(&mut proxied);
    println!(
        "  sandbox, no egress (holder, netlock)     {:>7.3} s  {:.2}x  target <= 1.5x",
        bare,
        bare / base
    );
    println!(
        "  sandbox with egress (and its proxy)      {:>7.3} s  {:.2}x  target <= 1.5x",
        proxied,
        proxied / base
    );

    // A command's round trip.
    let plain = ticket("plain", 0);
    docker_run(&docker, &image, &plain).await?;
    let (opened, _) = open_ready(sandbox, &spec(&ticket("exec", 0), &image, false)).await?;
    let (mut direct, mut ported) = (Vec::new(), Vec::new());
    for _ in 0..(options.rounds * 10).max(20) {
        direct.push(plain_exec(&docker, &plain).await?);
        let started = Instant::now();
        let ran = sandbox
            .exec(&opened, &ExecRequest::new(["true"]), &mut |_| {})
            .await?;
        if !ran.succeeded() {
            bail!("true exited {}", ran.status);
        }
        ported.push(seconds(started));
    }
    remove_container(&docker, &plain).await;
    let (direct, ported) = (median(&mut direct), median(&mut ported));
    println!(
        "\nexec round trip of `true` (median of {})",
        options.rounds * 10
    );
    println!(
        "  docker exec (Engine API)                 {:>7.4} s",
        direct
    );
    println!(
        "  sandbox exec                             {:>7.4} s  {:.2}x  target <= 1.2x",
        ported,
        ported / direct
    );

    // Checkpoint and restore, on a repository served by a git server on loopback.
    let server = GitServer::start("bench-token").await;
    let work = server.root.join("source");
    make_repository(&work, options.repository_mb)?;
    let bare_repo = server.root.join("big.git");
    let status = std::process::Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&work)
        .arg(&bare_repo)
        .status()?;
    if !status.success() {
        bail!("making the bare repository");
    }
    let url = server.url("big");
    let credentials = Credentials::token("bench-token");
    let cloned = afe_workspace::clone_to_bundle(&url, None, &credentials).await?;
    let base_bundle = Bundle {
        git_ref: cloned.git_ref.clone(),
        head: cloned.head.clone(),
        bytes: cloned.bundle.clone(),
    };
    let workspace = Workspace::new(sandbox, &opened);
    workspace
        .restore(std::slice::from_ref(&base_bundle))
        .await?;
    let (mut full_times, mut checkpoint_times, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    let mut previous = cloned.head.clone();
    // Every checkpoint in order: each bundle needs the ones before it.
    let mut chain = vec![base_bundle.clone()];
    for round in 0..options.rounds {
        let started = Instant::now();
        let full = sandbox
            .exec(
                &opened,
                &ExecRequest {
                    output_limit: usize::MAX,
                    ..ExecRequest::new(["git", "bundle", "create", "-q", "-", "--all"])
                },
                &mut |_| {},
            )
            .await?;
        full_times.push(seconds(started));
        let kilobyte = format!("head -c 1024 /dev/urandom > change-{round}.bin");
        sandbox
            .exec(
                &opened,
                &ExecRequest::new(["sh", "-c", &kilobyte]),
                &mut |_| {},
            )
            .await?;
        let started = Instant::now();
        let Checkpointed::Saved(saved) = workspace.checkpoint(Some(&previous), "bench").await?
        else {
            bail!("the change was not saved");
        };
        checkpoint_times.push(seconds(started));
        sizes.push((saved.bytes.len() as f64, full.stdout.bytes.len() as f64));
        previous = saved.head.clone();
        chain.push(saved);
    }
    let (full_time, checkpoint_time) = (median(&mut full_times), median(&mut checkpoint_times));
    let (delta, whole) = sizes[sizes.len() / 2];
    println!(
        "\ncheckpoint of a 1 KB change in a {} MB repository (median of {})",
        options.repository_mb, options.rounds
    );
    println!(
        "  full bundle                              {:>7.3} s  {:>12.0} bytes",
        full_time, whole
    );
    println!(
        "  checkpoint (commit + incremental bundle) {:>7.3} s  {:>12.0} bytes  {:.4} % of the bytes  target <= 1 % and <= 0.3 s",
        checkpoint_time,
        delta,
        delta / whole * 100.0
    );

    // Restore against a fresh clone.
    let (mut clones, mut restores) = (Vec::new(), Vec::new());
    for round in 0..options.rounds {
        let target = server.root.join(format!("clone-{round}"));
        let started = Instant::now();
        let status = std::process::Command::new("git")
            .args(["-c", "credential.helper=", "clone", "-q"])
            .arg(format!("http://x:bench-token@{}/big.git", server.address))
            .arg(&target)
            .status()?;
        if !status.success() {
            bail!("git clone failed");
        }
        clones.push(seconds(started));
        let _ = std::fs::remove_dir_all(&target);
        let (fresh, _) =
            open_ready(sandbox, &spec(&ticket("restore", round), &image, false)).await?;
        let started = Instant::now();
        Workspace::new(sandbox, &fresh).restore(&chain).await?;
        restores.push(seconds(started));
        sandbox.remove(&ticket("restore", round)).await?;
    }
    let (clone, restore) = (median(&mut clones), median(&mut restores));
    println!(
        "\nrestore into a new sandbox (median of {})",
        options.rounds
    );
    println!(
        "  git clone over HTTP on loopback          {:>7.3} s",
        clone
    );
    println!(
        "  restore (bundles in, verified, fetched)  {:>7.3} s  {:.2}x",
        restore,
        restore / clone
    );
    sandbox.remove(&ticket("exec", 0)).await?;
    Ok(())
}
