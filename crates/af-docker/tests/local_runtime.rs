//! `up`, `status` and `down` of a whole environment against the real Docker daemon: the probe
//! passes under a service's rules, readiness polls the health path (the service answers it with a
//! 400, and locally any HTTP status counts), the sidecar starts, each service instance starts behind its
//! gate and is ready, the applied limits are read back off the containers, and `down` leaves
//! nothing labelled behind.
//!
//! The service is the engine image itself serving on port 8080, so the test needs no registry and
//! no image but the one `up` builds. Every escape route points at test hosts (TEST-NET addresses
//! that nothing on this machine answers, refused inside the service's namespace).

mod support;

use af_docker::{LocalRuntime, names, teardown};
use af_manifest::EnvironmentId;
use af_runtime::{Environment, ProgressEvent, ProgressSink, Runtime, Step};

struct Collect(std::sync::Mutex<Vec<ProgressEvent>>);

impl ProgressSink for Collect {
    fn emit(&self, event: ProgressEvent) {
        self.0.lock().unwrap().push(event);
    }
}

/// Where the first event matching `wanted` is among those collected.
fn position(collected: &Collect, wanted: impl Fn(&ProgressEvent) -> bool) -> Option<usize> {
    collected.0.lock().unwrap().iter().position(wanted)
}

/// The ids of the environment's running containers (the probe's come and go, and the record of
/// its verdict is never started).
async fn container_ids(docker: &bollard::Docker, id: &EnvironmentId) -> Vec<String> {
    let options = bollard::query_parameters::ListContainersOptions {
        all: false,
        filters: Some(af_docker::names::environment_filter(id)),
        ..Default::default()
    };
    let mut ids: Vec<String> = docker
        .list_containers(Some(options))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn up_status_and_down_of_a_whole_environment() {
    let (docker, image) = support::daemon_and_engine().await;
    let service_config = "environment: web\npolicy: {}\nlisten: {proxy: 0.0.0.0:8080}\ncontrol: {listen: 127.0.0.1:9901, token: web-token-0123456789}\nlog: {path: /tmp/web/decisions.jsonl}\n";
    let manifest = af_manifest::parse(
        &format!(
            "name: aftest\nruntime: {{provider: local}}\nservices:\n  web:\n    image: {image}\n    args: [serve]\n    port: 8080\n    web: true\n    health_path: /healthz\n    replicas: 2\n    resources: {{cpu: 250m, memory: 64Mi}}\n    env:\n      AF_PROXY_CONFIG_TEXT: \"{}\"\n",
            service_config.replace('\n', "\\n")
        ),
        "af.yaml",
    )
    .unwrap();
    let id = EnvironmentId::derive("aftest", &format!("up-{}", std::process::id()));
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());
    let progress = Collect(Default::default());
    let environment = Environment {
        id: id.clone(),
        manifest,
        manifest_dir: ".".into(),
    };
    let report = runtime.up(&environment, &progress).await;
    let status = runtime.status(&id).await;
    // The web service's URL on 127.0.0.1 reaches it (an HTTP proxy itself, it answers a plain GET
    // with 400 and says so).
    let url_answer = match status
        .as_ref()
        .ok()
        .and_then(|s| s.services.first())
        .and_then(|w| w.urls.first())
    {
        Some(url) => {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
                .await
                .unwrap();
            stream
                .write_all(b"GET / HTTP/1.1\r\nhost: preview\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            answer
        }
        None => String::new(),
    };
    let ids_before = container_ids(&docker, &id).await;
    // A second `up` of the same manifest changes nothing and says so.
    let again = runtime.up(&environment, &progress).await;
    let ids_after = container_ids(&docker, &id).await;
    // Fewer replicas: the extra instance goes, the other stays.
    let mut smaller = environment.clone();
    smaller.manifest.services.get_mut("web").unwrap().replicas = 1;
    let shrunk = runtime.up(&smaller, &progress).await;
    let status_after_shrink = runtime.status(&id).await;
    let down = runtime.down(&id, &progress).await;
    let report = report.unwrap_or_else(|e| panic!("up: {e}"));
    down.unwrap();
    assert!(!report.unchanged, "the first up creates everything");
    assert!(
        again.unwrap_or_else(|e| panic!("second up: {e}")).unchanged,
        "a second up of the same manifest changes nothing"
    );
    assert_eq!(ids_before, ids_after, "the same containers keep running");
    assert!(
        !shrunk
            .unwrap_or_else(|e| panic!("shrunk up: {e}"))
            .unchanged
    );
    let after = status_after_shrink.unwrap();
    assert_eq!((after.services[0].ready, after.services[0].wanted), (1, 1));

    let containment = report.status.containment.expect("the probe's verdict");
    assert!(
        containment.contained && containment.routes.iter().all(|(_, o)| o == "denied"),
        "{:?}",
        containment.routes
    );
    let status = status.unwrap();
    assert_eq!(status.services.len(), 1);
    let web = &status.services[0];
    assert_eq!((web.name.as_str(), web.ready, web.wanted), ("web", 2, 2));
    assert_eq!(
        web.applied_cpu_millis,
        Some(250),
        "read off the running container"
    );
    assert_eq!(web.applied_memory_bytes, Some(64 << 20));
    assert!(
        web.urls.len() == 1 && web.urls[0].starts_with("http://127.0.0.1:"),
        "{:?}",
        web.urls
    );
    assert!(
        url_answer.starts_with("HTTP/1.1 400") && url_answer.contains("this is an HTTP proxy"),
        "{url_answer}"
    );
    let steps: Vec<String> = progress
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ProgressEvent::StepStarted { step, .. } => Some(format!("{step:?}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        &steps[..6],
        [
            "Images",
            "Networks",
            "Probe",
            "Preparation",
            "Sidecar",
            "Services"
        ],
        "the order the guarantee needs"
    );
    // The preparation and the sidecar run beside the probe (its positive control is the sidecar,
    // so the sidecar has started before a contained verdict can come); no service starts before
    // the verdict.
    let event_at = |step: Step, finished: bool| {
        position(&progress, |e| match e {
            ProgressEvent::StepStarted { step: s, .. } => !finished && *s == step,
            ProgressEvent::StepFinished { step: s, .. } => finished && *s == step,
            _ => false,
        })
    };
    let finished_probe = event_at(Step::Probe, true);
    let started_sidecar = event_at(Step::Sidecar, false);
    let started_services = event_at(Step::Services, false);
    assert!(
        matches!((started_sidecar, finished_probe), (Some(s), Some(p)) if s < p),
        "the sidecar must start before the probe's verdict: {started_sidecar:?} {finished_probe:?}"
    );
    assert!(
        matches!((finished_probe, started_services), (Some(p), Some(s)) if p < s),
        "no service may start before the probe's verdict: {finished_probe:?} {started_services:?}"
    );
    assert_eq!(steps.last().map(String::as_str), Some("Teardown"));
    assert!(
        teardown::containers(&docker, &id).await.unwrap().is_empty(),
        "down leaves no container"
    );
}

/// A service built from its `build` context (FROM the engine image, which the daemon has), and a
/// context whose build fails, named in the error.
#[tokio::test]
async fn services_are_built_from_their_context_and_a_failed_build_names_the_service() {
    let (docker, image) = support::daemon_and_engine().await;
    let dir = std::env::temp_dir().join(format!("af-build-ctx-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("good")).unwrap();
    std::fs::create_dir_all(dir.join("bad")).unwrap();
    std::fs::write(
        dir.join("good/Dockerfile"),
        format!("FROM {image}\nLABEL built=by-af\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("bad/Dockerfile"),
        "FROM scratch\nCOPY missing-file /nowhere\n",
    )
    .unwrap();
    let config = "environment: built\npolicy: {}\nlisten: {proxy: 0.0.0.0:8080}\ncontrol: {listen: 127.0.0.1:9901, token: built-token-0123456789}\nlog: {path: /tmp/built/log.jsonl}\n";
    let manifest = |context: &str| {
        af_manifest::parse(
            &format!("name: aftest\nruntime: {{provider: local}}\nservices:\n  built:\n    build: ./{context}\n    args: [serve]\n    port: 8080\n    env:\n      AF_PROXY_CONFIG_TEXT: \"{}\"\n", config.replace('\n', "\\n")),
            "af.yaml",
        )
        .unwrap()
    };
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());
    let progress = Collect(Default::default());

    let good = EnvironmentId::derive("aftest", &format!("build-{}", std::process::id()));
    let up = runtime
        .up(
            &Environment {
                id: good.clone(),
                manifest: manifest("good"),
                manifest_dir: dir.clone(),
            },
            &progress,
        )
        .await;
    let down = runtime.down(&good, &progress).await;
    let report = up.unwrap_or_else(|e| panic!("up: {e}"));
    down.unwrap();
    assert_eq!(report.status.services[0].ready, 1);

    let bad = EnvironmentId::derive("aftest", &format!("badbuild-{}", std::process::id()));
    let failed = runtime
        .up(
            &Environment {
                id: bad.clone(),
                manifest: manifest("bad"),
                manifest_dir: dir.clone(),
            },
            &progress,
        )
        .await;
    runtime.down(&bad, &progress).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let err = failed.expect_err("a failed build stops up");
    assert_eq!(err.code(), af_runtime::RunCode::ImageBuildFailed, "{err}");
    assert!(err.help().contains("docker build"), "{}", err.help());
    assert!(
        err.to_string()
            .contains("building the image of service built from"),
        "{err}"
    );
    assert!(
        err.to_string().contains("missing-file"),
        "the builder's message is passed on: {err}"
    );
}

/// A migration runs once, before the service's instances, under a service's rules; a second `up`
/// of the unchanged environment does not run it again; a failing one stops `up` with its last
/// lines, and the service never starts.
#[tokio::test]
async fn migrations_run_once_first_and_a_failure_stops_up() {
    let (docker, image) = support::daemon_and_engine().await;
    let config = "environment: m\npolicy: {}\nlisten: {proxy: 0.0.0.0:8080}\ncontrol: {listen: 127.0.0.1:9901, token: m-token-0123456789ab}\nlog: {path: /tmp/m/log.jsonl}\n";
    let manifest = |migrate: &str| {
        af_manifest::parse(
            &format!(
                "name: aftest\nruntime: {{provider: local}}\nservices:\n  web:\n    image: {image}\n    args: [serve]\n    port: 8080\n    migrate: {migrate}\n    env:\n      AF_PROXY_CONFIG_TEXT: \"{}\"\n",
                config.replace('\n', "\\n")
            ),
            "af.yaml",
        )
        .unwrap()
    };
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());
    let migrations = |progress: &Collect| {
        progress
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    ProgressEvent::StepStarted {
                        step: af_runtime::Step::Migrations,
                        ..
                    }
                )
            })
            .count()
    };

    let good = EnvironmentId::derive("aftest", &format!("migrate-{}", std::process::id()));
    let environment = Environment {
        id: good.clone(),
        manifest: manifest("[/af-proxy, --version]"),
        manifest_dir: ".".into(),
    };
    let first = Collect(Default::default());
    let up = runtime.up(&environment, &first).await;
    let second = Collect(Default::default());
    let again = runtime.up(&environment, &second).await;
    runtime.down(&good, &first).await.unwrap();
    up.unwrap_or_else(|e| panic!("up: {e}"));
    assert!(again.unwrap_or_else(|e| panic!("second up: {e}")).unchanged);
    assert_eq!(
        (migrations(&first), migrations(&second)),
        (1, 0),
        "once, not again for an unchanged service"
    );

    let bad = EnvironmentId::derive("aftest", &format!("badmigrate-{}", std::process::id()));
    let failing = Environment {
        id: bad.clone(),
        manifest: manifest("[/af-proxy, no-such-migration]"),
        manifest_dir: ".".into(),
    };
    let failed = runtime.up(&failing, &Collect(Default::default())).await;
    let status = runtime.status(&bad).await.unwrap();
    let never_started = docker
        .inspect_container(
            &names::container(&bad, "web-0"),
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
        .and_then(|c| c.state)
        .map(|s| {
            s.started_at
                .is_none_or(|t| t.is_empty() || t.starts_with("0001-01-01"))
        });
    runtime
        .down(&bad, &Collect(Default::default()))
        .await
        .unwrap();
    let err = failed.expect_err("a failing migration stops up");
    assert_eq!(err.code(), af_runtime::RunCode::MigrationFailed, "{err}");
    assert!(
        err.to_string()
            .contains("the migration of service web failed"),
        "{err}"
    );
    assert!(err.to_string().contains("not retried"), "{err}");
    assert!(
        err.to_string().contains("no-such-migration"),
        "its last lines are shown: {err}"
    );
    // Its instance was prepared (created while the probe ran) but never started.
    assert!(
        status.services.iter().all(|s| s.ready == 0),
        "the service never started: {status:?}"
    );
    assert_eq!(
        never_started,
        Some(true),
        "the application container was created and never started"
    );
}

/// A scheduled service runs its command on its schedule, inside its own container (the engine's
/// scheduler from a read-only volume wraps the service's command); `down` removes the volume too.
/// The schedule is every minute, so this waits for the next minute to begin.
#[tokio::test]
async fn a_cron_service_runs_on_its_schedule_and_down_removes_its_volume() {
    let (docker, image) = support::daemon_and_engine().await;
    let manifest = af_manifest::parse(
        &format!("name: aftest\nruntime: {{provider: local}}\nservices:\n  report:\n    image: {image}\n    command: [/af-proxy, --version]\n    cron: \"* * * * *\"\n"),
        "af.yaml",
    )
    .unwrap();
    let id = EnvironmentId::derive("aftest", &format!("cron-{}", std::process::id()));
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());
    let progress = Collect(Default::default());
    let up = runtime
        .up(
            &Environment {
                id: id.clone(),
                manifest,
                manifest_dir: ".".into(),
            },
            &progress,
        )
        .await;
    let mut seen = String::new();
    if up.is_ok() {
        use futures_util::StreamExt;
        let mut logs = runtime.logs(&id, "report", true).await.unwrap();
        let waited = tokio::time::timeout(std::time::Duration::from_secs(75), async {
            while let Some(Ok(line)) = logs.next().await {
                seen.push_str(&line.line);
                seen.push('\n');
                if line.line.contains("the run ended") {
                    break;
                }
            }
        })
        .await;
        assert!(waited.is_ok(), "no scheduled run within 75 s: {seen}");
    }
    runtime.down(&id, &progress).await.unwrap();
    up.unwrap_or_else(|e| panic!("up: {e}"));
    assert!(
        seen.contains("af-proxy cron: running /af-proxy --version"),
        "{seen}"
    );
    assert!(
        seen.contains("af-proxy 0.1.0"),
        "the job's own output: {seen}"
    );
    let volumes = docker
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
            filters: Some(af_docker::names::environment_filter(&id)),
        }))
        .await
        .unwrap()
        .volumes
        .unwrap_or_default();
    assert!(
        volumes.is_empty(),
        "down removes the engine volume: {volumes:?}"
    );
}

/// A service whose own process exits before its port opens stops `up` at once with AF-RUN-058 and
/// the crash-loop cause: the service's to fix, with its status and last lines, never a platform
/// failure whose advice is to check the daemon.
#[tokio::test]
async fn a_service_that_exits_before_its_port_opens_is_its_own_failure() {
    let (docker, image) = support::daemon_and_engine().await;
    let manifest = af_manifest::parse(
        &format!(
            "name: aftest\nruntime: {{provider: local}}\nservices:\n  web:\n    image: {image}\n    args: [no-such-subcommand]\n    port: 8080\n"
        ),
        "af.yaml",
    )
    .unwrap();
    let id = EnvironmentId::derive("aftest", &format!("exits-{}", std::process::id()));
    let environment = Environment {
        id: id.clone(),
        manifest,
        manifest_dir: ".".into(),
    };
    let runtime = LocalRuntime::new(docker.clone(), support::unanswered_targets());
    let up = runtime.up(&environment, &Collect(Default::default())).await;
    runtime
        .down(&id, &Collect(Default::default()))
        .await
        .unwrap();
    let err = up.expect_err("a service that exits stops up");
    assert_eq!(err.code(), af_runtime::RunCode::PodWillNotStart, "{err}");
    let message = err.to_string();
    assert!(message.contains("service web will not start"), "{message}");
    assert!(
        message.contains("exited with status 2 before its port 8080 opened"),
        "{message}"
    );
    assert!(
        message.contains("no-such-subcommand"),
        "its last lines: {message}"
    );
    assert!(
        err.help()
            .contains("the service's own process keeps exiting"),
        "{}",
        err.help()
    );
}
