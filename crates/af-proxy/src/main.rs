//! `af-proxy`: the containment core as one binary, shipped as one image built FROM scratch.
//!
//! - `serve --config FILE`: the egress sidecar (or, configured with only the proxy listener, an
//!   afe ticket pod's allowlist proxy).
//! - `netlock`: lock the current network namespace to loopback and the proxy's uid.
//! - `refuse-outside`: make a silently-dropping platform network refuse visibly, in a service's
//!   namespace.
//! - `hold`: keep a pod's network namespace open (with `--lock-for-uid`, locked first).
//! - `connect`: relay standard input and output to a TCP address (the afe worker's way to a ticket
//!   proxy's control API, through an exec).
//! - `relay`: publish a web service's port to the host through an ingress.
//! - `cron`, `install`: run a scheduled service's command on its schedule, from a copy of this
//!   binary.
//! - `gate`: before a workload starts, prove the sidecar answers and every escape route is denied.
//! - `probe`: try every escape route, in rounds until they settle denied; the per-environment
//!   containment check.
//! - `agent`, `call`: the conformance suite's workload and its one-shot caller (test use only).
//!
//! `gate` and `probe` print one JSON verdict line on standard output and exit 0 only when the
//! sidecar answered and every route was seen denied, 43 (AF-RUN-043) otherwise.

mod cron;
mod log_filter;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use af_guard::gate::{GateSettings, run_gate};
use af_guard::route::{Route, parse_route};
use af_guard::sidecar_check::SidecarTarget;
use af_guard::targets::Targets;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "af-proxy", version, about = "Antifailure's containment core")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the egress sidecar: proxy, DNS responder, SMTP sink, decision log, inbox, control API.
    Serve {
        /// The configuration file (on Kubernetes, the mounted Secret).
        #[arg(
            long,
            env = "AF_PROXY_CONFIG",
            value_name = "FILE",
            required_unless_present = "config_text"
        )]
        config: Option<PathBuf>,
        /// The configuration itself, for a container with a read-only root and no file to mount
        /// (the local runtime's sidecar).
        #[arg(
            long,
            env = "AF_PROXY_CONFIG_TEXT",
            hide_env_values = true,
            conflicts_with = "config"
        )]
        config_text: Option<String>,
    },
    /// Drop every outgoing packet of this network namespace except loopback and the proxy's uid,
    /// IPv4 and IPv6, atomically; read the rules back to verify them. Needs NET_ADMIN. With
    /// `--only-to`, an `af` service pod's lock instead: no uid exempt, only packets to these
    /// addresses (the environment's Service addresses) and replies to connections made to it.
    Netlock {
        /// The uid whose sockets may still send (the proxy's).
        #[arg(
            long,
            env = "AF_PROXY_UID",
            default_value_t = 1337,
            conflicts_with = "only_to"
        )]
        proxy_uid: u32,
        /// An address packets may go to (repeat for several).
        #[arg(long = "only-to")]
        only_to: Vec<std::net::IpAddr>,
        /// A loopback address refused to every uid but the proxy's: a platform resolver that
        /// forwards outside (Docker's embedded DNS, 127.0.0.11). Repeat for several.
        #[arg(long = "refuse-local", conflicts_with = "only_to")]
        refuse_local: Vec<std::net::IpAddr>,
    },
    /// Refuse, visibly, every packet leaving through INTERFACE for anywhere outside the
    /// environment's subnets (a reset for TCP, EPERM for the rest), where the platform's network
    /// would drop it silently. Needs NET_ADMIN; run in a service's namespace before the service.
    RefuseOutside {
        #[arg(long, default_value = "eth0")]
        interface: String,
        /// The environment's own networks (repeat for several).
        #[arg(long = "subnet", required = true)]
        subnets: Vec<String>,
        /// Addresses inside those subnets that are the platform's own (the host's side of the
        /// network: its gateway), refused like the outside (repeat for several).
        #[arg(long = "platform-side")]
        platform_side: Vec<String>,
    },
    /// Hold a network namespace open for the containers that join it; exits on SIGTERM. With
    /// `--lock-for-uid`, first lock it as `netlock` does (needs NET_ADMIN) and print the report,
    /// so nothing can join the namespace before it is locked; then give every capability up.
    Hold {
        /// Lock the namespace first, letting out only this uid's sockets (the proxy's).
        #[arg(long)]
        lock_for_uid: Option<u32>,
        /// With the lock: a loopback address refused to every uid but that one (see `netlock`).
        #[arg(long = "refuse-local", requires = "lock_for_uid")]
        refuse_local: Vec<std::net::IpAddr>,
    },
    /// Run COMMAND at every minute SCHEDULE names (five-field cron, UTC), one run at a time.
    Cron {
        #[arg(long)]
        schedule: String,
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Copy this binary to PATH (for a scheduled service, whose image does not carry it).
    Install {
        #[arg(long)]
        to: PathBuf,
    },
    /// Relay TCP connections on LISTEN to the targets in turn: how a service's port reaches the
    /// host without the service getting a route out.
    Relay {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long = "to", required = true)]
        targets: Vec<SocketAddr>,
    },
    /// Connect to ADDRESS and relay standard input and output to it until it closes: how the afe
    /// worker reaches a ticket proxy's control API (on the sandbox's loopback) through an exec,
    /// the one door into a sandbox it has, on Docker as on Kubernetes.
    Connect { address: SocketAddr },
    /// Wait until the sidecar answers and every escape route is denied, several rounds in a row.
    Gate {
        /// The sidecar's proxy address.
        #[arg(long, env = "AF_GATE_SIDECAR_PROXY")]
        sidecar_proxy: SocketAddr,
        /// The sidecar's DNS address.
        #[arg(long, env = "AF_GATE_SIDECAR_DNS")]
        sidecar_dns: Option<SocketAddr>,
        /// Consecutive all-denied rounds required.
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Give up (and fail) after this long.
        #[arg(long, default_value_t = 60)]
        deadline_s: u64,
        #[command(flatten)]
        targets: TargetArgs,
    },
    /// Prove the environment's sidecar answers, then try every escape route in rounds until every
    /// one is denied `--rounds` rounds in a row (or the deadline passes) and report each as
    /// denied, escaped or unanswered, with how long they stayed open (`window_ms`).
    Probe {
        /// The sidecar's proxy address: the positive control, asked first. Without it the probe
        /// is never contained (a namespace with no network denies every route).
        #[arg(long, env = "AF_PROBE_SIDECAR_PROXY")]
        sidecar_proxy: Option<SocketAddr>,
        /// The sidecar's DNS address, asked too when given.
        #[arg(long, env = "AF_PROBE_SIDECAR_DNS")]
        sidecar_dns: Option<SocketAddr>,
        /// How long to keep asking for the sidecar before giving up on it (the runtime may start
        /// it as the probe starts).
        #[arg(long, default_value_t = 60)]
        sidecar_patience_s: u64,
        /// All-denied rounds in a row that settle the verdict (the platform's steady state).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        #[arg(long, default_value_t = 250)]
        interval_ms: u64,
        /// A route still not denied after this long is reported and refuses the environment.
        #[arg(long, default_value_t = 30)]
        deadline_s: u64,
        #[command(flatten)]
        targets: TargetArgs,
    },
    /// The conformance suite's workload: answers HTTP and, from inside its environment, does what
    /// it is asked (try routes, fetch, tunnel, ask DNS, send mail, tamper). For tests only.
    #[command(hide = true)]
    Agent {
        #[arg(long, default_value = "0.0.0.0:8080")]
        listen: SocketAddr,
        /// The status /healthz answers.
        #[arg(long, default_value_t = 200)]
        health_status: u16,
        /// A UDP DNS query to this resolver before anything else (the startup window).
        #[arg(long)]
        first_udp_dns: Option<SocketAddr>,
        /// POST to these URLs once listening (repeat for several).
        #[arg(long)]
        announce: Vec<String>,
        /// Wait this long before listening.
        #[arg(long, default_value_t = 0)]
        listen_after_ms: u64,
    },
    /// POST to URL (directly, retrying for up to 30 s until it answers 2xx), print the answer,
    /// then exit with EXIT_WITH, or 1 if the call never succeeded. For tests only.
    #[command(hide = true)]
    Call {
        url: String,
        #[arg(long, default_value_t = 0)]
        exit_with: u8,
    },
}

/// Where escape attempts go. The defaults are the real ones; tests pass their own hosts.
#[derive(Debug, Args)]
struct TargetArgs {
    /// E1: TCP to a public address.
    #[arg(long, env = "AF_PROBE_PUBLIC_TCP")]
    public_tcp: Option<SocketAddr>,
    /// E2: a UDP DNS query to a public resolver.
    #[arg(long, env = "AF_PROBE_PUBLIC_DNS")]
    public_dns: Option<SocketAddr>,
    /// E4: the metadata endpoint.
    #[arg(long, env = "AF_PROBE_METADATA")]
    metadata: Option<SocketAddr>,
    /// E4: the IPv6 metadata endpoint.
    #[arg(long, env = "AF_PROBE_METADATA_V6")]
    metadata_v6: Option<SocketAddr>,
    /// E6: the platform's API (default: the Kubernetes API server in a pod; otherwise unset, which
    /// fails the check rather than skipping the route).
    #[arg(long, env = "AF_PROBE_PLATFORM_API")]
    platform_api: Option<SocketAddr>,
    /// More routes, NAME=KIND:ADDRESS with KIND tcp, dns, udp or icmp.
    #[arg(long = "route", value_parser = parse_route)]
    extra: Vec<Route>,
    /// How long each attempt waits for an answer.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

impl TargetArgs {
    fn targets(&self) -> Targets {
        let real = Targets::real();
        Targets {
            public_tcp: self.public_tcp.or(real.public_tcp),
            public_dns: self.public_dns.or(real.public_dns),
            metadata: self.metadata.or(real.metadata),
            metadata_v6: self.metadata_v6.or(real.metadata_v6),
            platform_api: self.platform_api.or(real.platform_api),
            extra: self.extra.clone(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (log_filter, unreadable) =
        log_filter::from_setting(std::env::var("RUST_LOG").ok().as_deref());
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .with(log_filter)
            .init();
    }
    if let Some(warning) = unreadable {
        tracing::warn!("{warning}");
    }
    match cli.command {
        Command::Serve {
            config,
            config_text,
        } => {
            let loaded = match (config, config_text) {
                (Some(path), _) => af_egress::load_config(&path),
                (None, Some(text)) => af_egress::parse_config(&text, std::path::Path::new("/"))
                    .map_err(|problems| {
                        af_runtime::RuntimeError::from(
                            af_runtime::RuntimeErrorKind::SidecarConfigInvalid {
                                file: "AF_PROXY_CONFIG_TEXT".into(),
                                problems,
                            },
                        )
                    }),
                (None, None) => unreachable!("clap requires one of them"),
            };
            serve(loaded)
        }
        Command::Netlock {
            proxy_uid,
            only_to,
            refuse_local,
        } if only_to.is_empty() => netlock(
            af_guard::netlock::apply(proxy_uid, &refuse_local),
            "this sandbox",
        ),
        Command::Netlock { only_to, .. } => {
            netlock(af_guard::netlock::apply_pod(&only_to), "this pod")
        }
        Command::RefuseOutside {
            interface,
            subnets,
            platform_side,
        } => netlock(
            af_guard::netlock::apply_refusal(&interface, &subnets, &platform_side),
            "this service's namespace",
        ),
        Command::Hold {
            lock_for_uid,
            refuse_local,
        } => {
            if let Some(uid) = lock_for_uid {
                // The report goes out before anything can join: the runtime reads it first.
                let locked = netlock(af_guard::netlock::apply(uid, &refuse_local), "this sandbox");
                if locked != ExitCode::SUCCESS {
                    return locked;
                }
            }
            hold()
        }
        Command::Cron { schedule, command } => match af_manifest::parse_cron(&schedule) {
            Ok(schedule) => {
                exit_on_terminate();
                cron::run(&schedule, &command)
            }
            Err(why) => {
                eprintln!("af-proxy cron: {schedule:?} is not a schedule: {why}");
                ExitCode::from(2)
            }
        },
        Command::Install { to } => {
            let copied = std::env::current_exe().and_then(|me| std::fs::copy(me, &to));
            match copied {
                Ok(_) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("af-proxy install: cannot copy to {}: {err}", to.display());
                    ExitCode::FAILURE
                }
            }
        }
        Command::Relay { listen, targets } => relay(listen, targets),
        Command::Connect { address } => connect(address),
        Command::Gate {
            sidecar_proxy,
            sidecar_dns,
            rounds,
            interval_ms,
            deadline_s,
            targets,
        } => {
            let settings = GateSettings {
                sidecar: SidecarTarget {
                    proxy: sidecar_proxy,
                    dns: sidecar_dns,
                },
                rounds: rounds.max(1),
                interval: Duration::from_millis(interval_ms),
                deadline: Duration::from_secs(deadline_s),
                timeout: Duration::from_millis(targets.timeout_ms),
            };
            let verdict = run_gate(&settings, &targets.targets().routes());
            print_verdict(&verdict, verdict.passed)
        }
        Command::Agent {
            listen,
            health_status,
            first_udp_dns,
            announce,
            listen_after_ms,
        } => {
            let settings = af_guard::agent::AgentSettings {
                listen,
                health_status,
                first_udp_dns,
                announce,
                listen_after: Duration::from_millis(listen_after_ms),
            };
            exit_on_terminate();
            match af_guard::agent::serve(&settings) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("af-proxy agent: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Call { url, exit_with } => {
            let answer = af_guard::agent_actions::post_with_retries(&url, Duration::from_secs(30));
            println!("{answer}");
            let succeeded = answer["answer"]["status"]
                .as_u64()
                .is_some_and(|s| (200..300).contains(&s));
            if succeeded {
                ExitCode::from(exit_with)
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Probe {
            sidecar_proxy,
            sidecar_dns,
            sidecar_patience_s,
            rounds,
            interval_ms,
            deadline_s,
            targets,
        } => {
            let control = af_guard::probe::ControlSettings {
                sidecar: sidecar_proxy.map(|proxy| SidecarTarget {
                    proxy,
                    dns: sidecar_dns,
                }),
                patience: Duration::from_secs(sidecar_patience_s),
                interval: Duration::from_millis(200),
            };
            let verdict = af_guard::probe::probe(
                &control,
                &targets.targets().routes(),
                Duration::from_millis(targets.timeout_ms),
                af_guard::probe::Steadiness {
                    rounds,
                    interval: Duration::from_millis(interval_ms),
                    deadline: Duration::from_secs(deadline_s),
                },
            );
            print_verdict(&verdict, verdict.contained)
        }
    }
}

/// One JSON line on standard output; the exit status says whether the check passed: 0, or 43,
/// the status of AF-RUN-043 (containment could not be shown) wherever it is seen.
fn print_verdict(verdict: &impl serde::Serialize, passed: bool) -> ExitCode {
    match serde_json::to_string(verdict) {
        Ok(line) => println!("{line}"),
        Err(err) => eprintln!("af-proxy: cannot write the verdict: {err}"),
    }
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(af_runtime::RunCode::ContainmentRefused.exit_status())
    }
}

/// A runtime on this thread alone, for a subcommand that serves one thing.
fn single_threaded() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
}

/// Relays standard input and output to `address` until the connection ends.
fn connect(address: SocketAddr) -> ExitCode {
    let Some(runtime) = single_threaded() else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async {
        let mut upstream = match tokio::net::TcpStream::connect(address).await {
            Ok(upstream) => upstream,
            Err(err) => {
                eprintln!("af-proxy connect: cannot connect to {address}: {err}");
                return ExitCode::FAILURE;
            }
        };
        let mut stdio = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
        // Standard input's end half-closes the connection; the answer is read to its end.
        match tokio::io::copy_bidirectional(&mut stdio, &mut upstream).await {
            Ok(_) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("af-proxy connect: {address}: {err}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Accepts on `listen` and splices each connection to the next target in turn.
fn relay(listen: SocketAddr, targets: Vec<SocketAddr>) -> ExitCode {
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(listener) => listener,
            Err(err) => {
                eprintln!("af-proxy relay: cannot listen on {listen}: {err}");
                return ExitCode::FAILURE;
            }
        };
        let mut next = 0usize;
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                continue;
            };
            let target = targets[next % targets.len()];
            next = next.wrapping_add(1);
            tokio::spawn(async move {
                if let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    })
}

/// Sleeps until told to stop: the process that keeps a pod's network namespace alive. It first
/// gives up every capability it was started with: the runtime starts the holder as root with
/// NET_ADMIN so that its refusal step can run in it (an `exec` gets its capabilities from the
/// container, not from this process), and the process that lives as long as the pod keeps none.
fn hold() -> ExitCode {
    use caps::CapSet;
    for set in [
        CapSet::Ambient,
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Inheritable,
    ] {
        if let Err(err) = caps::clear(None, set) {
            eprintln!("af-proxy hold: cannot give up its {set:?} capabilities: {err}");
            return ExitCode::FAILURE;
        }
    }
    let Some(runtime) = single_threaded() else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return ExitCode::FAILURE,
            };
        tokio::select! {
            _ = terminate.recv() => ExitCode::SUCCESS,
            _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
        }
    })
}

/// Reports a kernel-filter step: the JSON report on success, AF-RUN-051 otherwise.
/// Exits at SIGTERM. A program that is its container's first process and handles no signal
/// ignores SIGTERM (the kernel gives the first process of a namespace no default action), so its
/// pod would stop only when its grace period ran out and SIGKILL came: the scheduler and the
/// agent stop when asked. The signal is blocked for every thread (they inherit it) and one waits
/// for it.
fn exit_on_terminate() {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    if set.thread_block().is_ok() {
        std::thread::spawn(move || {
            if set.wait().is_ok() {
                std::process::exit(0);
            }
        });
    }
}

fn netlock(
    result: Result<af_guard::netlock::NetlockReport, af_guard::netlock::NetlockError>,
    place: &str,
) -> ExitCode {
    match result {
        Ok(report) => {
            eprintln!("af-proxy netlock: iptables backend {}", report.backend);
            if !report.ipv6_enabled {
                eprintln!("af-proxy netlock: IPv6 is disabled in this namespace; IPv4 is locked");
            }
            print_verdict(&report, true)
        }
        Err(err) => {
            let err = af_runtime::RuntimeError::from(af_runtime::RuntimeErrorKind::NetlockFailed {
                place: place.to_string(),
                detail: err.to_string(),
            });
            eprintln!("af-proxy netlock: {err}\n  help: {}", err.help());
            ExitCode::from(err.code().exit_status())
        }
    }
}

/// Fails closed: a configuration that cannot be loaded, or a listener that cannot be bound, exits
/// non-zero before anything is served.
fn serve(loaded: Result<af_egress::LoadedConfig, af_runtime::RuntimeError>) -> ExitCode {
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("af-proxy: {err}\n  help: {}", err.help());
            return ExitCode::from(err.code().exit_status());
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(loaded.config.limits.workers_for(cores))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("af-proxy: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let mut sidecar = match af_egress::start(loaded).await {
            Ok(sidecar) => sidecar,
            Err(err) => {
                eprintln!("af-proxy: {err}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(addresses = ?sidecar.addresses, "sidecar serving");
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        let stopped = tokio::select! {
            _ = sidecar.wait() => {
                eprintln!("af-proxy: a listener stopped; exiting so the platform restarts the sidecar");
                ExitCode::FAILURE
            }
            _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
            _ = terminate => ExitCode::SUCCESS,
        };
        if let Err(err) = sidecar.flush_log() {
            eprintln!("af-proxy: cannot write the last decisions to the decision log: {err}");
        }
        stopped
    })
}
