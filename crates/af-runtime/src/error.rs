//! AF-RUN-* errors: what a runtime could not do, which object it concerns, and what to do next.

use std::fmt;

use serde::Serialize;

use crate::capability::Capability;

/// The codes a runtime error can carry. 043, 044, 045 and 047 are fixed by the specification (seed
/// 000) and keep those numbers; the others are assigned as runtimes need them, never reused. Each
/// code is written once, on its variant; the list of them is generated ([`RunCode::all`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::EnumIter, strum::IntoStaticStr)]
pub enum RunCode {
    /// The platform (the Docker daemon, the API server) failed an operation.
    #[strum(serialize = "AF-RUN-001")]
    PlatformFailed,
    /// The engine image (af-proxy FROM scratch) is not available and cannot be built.
    #[strum(serialize = "AF-RUN-002")]
    EngineImage,
    /// The containment probe saw a route out (or could not tell): the environment did not start.
    #[strum(serialize = "AF-RUN-043")]
    ContainmentRefused,
    /// The runtime does not support what was asked.
    #[strum(serialize = "AF-RUN-044")]
    Unsupported,
    /// An object with our name exists but does not carry our label: someone else's.
    #[strum(serialize = "AF-RUN-045")]
    NotOurs,
    /// The environment's sizes do not fit in what the platform has free.
    #[strum(serialize = "AF-RUN-047")]
    DoesNotFit,
    /// The sidecar's configuration cannot be used; the sidecar serves nothing.
    #[strum(serialize = "AF-RUN-050")]
    SidecarConfigInvalid,
    /// netlock could not lock a sandbox's or a pod's network namespace, or could not confirm it
    /// did.
    #[strum(serialize = "AF-RUN-051")]
    NetlockFailed,
    /// A pod of the environment says it will never start (rejected, unpullable, unschedulable,
    /// crash-looping, refused by admission): waiting longer would not help.
    #[strum(serialize = "AF-RUN-058")]
    PodWillNotStart,
    /// The cluster's Kubernetes version is older than af supports.
    #[strum(serialize = "AF-RUN-059")]
    ClusterTooOld,
    /// Values the manifest takes from af's environment (`from_env`) are not set there.
    #[strum(serialize = "AF-RUN-060")]
    EnvValueMissing,
    /// A service's migration (`migrate`) ran and failed.
    #[strum(serialize = "AF-RUN-061")]
    MigrationFailed,
    /// A service's image could not be built from its `build` context.
    #[strum(serialize = "AF-RUN-062")]
    ImageBuildFailed,
    /// A service started but did not become ready in time.
    #[strum(serialize = "AF-RUN-063")]
    NeverReady,
    /// af's own fault (an object it could not write out, a value it should have had): a bug to
    /// report, not something the manifest or the platform did.
    #[strum(serialize = "AF-RUN-064")]
    Internal,
    /// The platform refused af's credentials or permissions for an operation (an API server's 401
    /// or 403).
    #[strum(serialize = "AF-RUN-065")]
    NotAllowed,
    /// The database image the manifest names is not on this machine, and the local runtime pulls
    /// nothing.
    #[strum(serialize = "AF-RUN-066")]
    DatabaseImageMissing,
    /// The database's `seed` SQL failed when it was applied into the template.
    #[strum(serialize = "AF-RUN-067")]
    SeedFailed,
    /// The database container started and its server did not accept connections in time.
    #[strum(serialize = "AF-RUN-068")]
    DatabaseNeverReady,
    /// A database command (`af db ...`) for an environment that has no branch to act on.
    #[strum(serialize = "AF-RUN-069")]
    NoDatabaseBranch,
    /// The external database's URL (read from `url_from_env`) is not one the sidecar can relay.
    #[strum(serialize = "AF-RUN-070")]
    ExternalDatabaseUrl,
    /// The external database's host is neither named by `database.host` nor allowed by the egress
    /// policy, so the sidecar would refuse every connection to it.
    #[strum(serialize = "AF-RUN-071")]
    ExternalDatabaseHostNotAllowed,
}

/// Who can act on an error, the first thing a person (or a controller deciding whether to retry)
/// needs to know of it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, strum::EnumIter, strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Category {
    /// The platform (the Docker daemon, the API server, the cluster's nodes) failed or refused;
    /// fix or free the platform, or retry.
    Platform,
    /// The manifest, or the environment af runs in, asks for something that cannot be done as
    /// written; change it.
    Manifest,
    /// The environment could not be shown contained: nothing of it runs until it is.
    Containment,
    /// An object af would touch belongs to someone else; af never touches it.
    Ownership,
    /// af's own fault; report it.
    Internal,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl RunCode {
    /// Who can act on an error with this code.
    pub fn category(self) -> Category {
        match self {
            RunCode::PlatformFailed
            | RunCode::EngineImage
            | RunCode::DoesNotFit
            | RunCode::PodWillNotStart
            | RunCode::ClusterTooOld => Category::Platform,
            RunCode::Unsupported
            | RunCode::EnvValueMissing
            | RunCode::MigrationFailed
            | RunCode::ImageBuildFailed
            | RunCode::NeverReady
            | RunCode::NotAllowed
            | RunCode::DatabaseImageMissing
            | RunCode::SeedFailed
            | RunCode::DatabaseNeverReady
            | RunCode::NoDatabaseBranch
            | RunCode::ExternalDatabaseUrl
            | RunCode::ExternalDatabaseHostNotAllowed => Category::Manifest,
            RunCode::ContainmentRefused
            | RunCode::SidecarConfigInvalid
            | RunCode::NetlockFailed => Category::Containment,
            RunCode::NotOurs => Category::Ownership,
            RunCode::Internal => Category::Internal,
        }
    }

    /// Every code, in number order.
    pub fn all() -> impl Iterator<Item = RunCode> {
        <RunCode as strum::IntoEnumIterator>::iter()
    }

    /// The process exit status for an error with this code: for the codes the specification fixes
    /// and the containment core's, the code's own number, so that status 43 is AF-RUN-043
    /// wherever it is seen; 4 for the others. Statuses 0-3 belong to the CLI itself.
    pub fn exit_status(self) -> u8 {
        match self {
            RunCode::PlatformFailed
            | RunCode::EngineImage
            | RunCode::EnvValueMissing
            | RunCode::MigrationFailed
            | RunCode::ImageBuildFailed
            | RunCode::NeverReady
            | RunCode::Internal
            | RunCode::NotAllowed
            | RunCode::DatabaseImageMissing
            | RunCode::SeedFailed
            | RunCode::DatabaseNeverReady
            | RunCode::NoDatabaseBranch
            | RunCode::ExternalDatabaseUrl
            | RunCode::ExternalDatabaseHostNotAllowed => 4,
            RunCode::ContainmentRefused => 43,
            RunCode::Unsupported => 44,
            RunCode::NotOurs => 45,
            RunCode::DoesNotFit => 47,
            RunCode::SidecarConfigInvalid => 50,
            RunCode::NetlockFailed => 51,
            RunCode::PodWillNotStart => 58,
            RunCode::ClusterTooOld => 59,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for RunCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RunCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What AF-RUN-051's message says just before its cause: a runtime that reads a netlock step's
/// own message (a pod's log) finds the cause after it.
pub const NETLOCK_CAUSE_FOLLOWS: &str = "so its workload must not start: ";

/// A route the containment probe tried, and what it saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouteFinding {
    /// The route, as the probe names it (e.g. `direct TCP to 192.0.2.10:443`).
    pub route: String,
    /// `escaped` or `unanswered`, or what went wrong; a denied route is not a finding.
    pub outcome: String,
    /// Which cause it is, for what to do about it.
    pub kind: FindingKind,
}

/// The causes a containment refusal can have; each has its own next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Something outside answered: the route is open.
    Escaped,
    /// Nothing came back in time: dropped silently by the platform, or out to a silent target.
    Unanswered,
    /// The positive control failed: the environment's own sidecar did not answer the probe.
    SidecarUnreachable,
    /// The probe or a gate gave no verdict on the routes (it failed, timed out, printed none).
    NoVerdict,
}

impl FindingKind {
    /// What to do about a finding of this kind.
    fn next_step(self) -> &'static str {
        match self {
            FindingKind::Escaped => {
                "a route got out, so the platform's network does not enforce the environment's isolation: on Kubernetes, use a CNI that enforces NetworkPolicy; locally, check that nothing attached the environment's containers to another network"
            }
            FindingKind::Unanswered => {
                "an unanswered route means the platform drops denied packets silently rather than refusing them (or the route got out to a target that stayed silent): the probe cannot tell the two apart, so it refuses; make the platform refuse denied packets visibly (a reset or an ICMP unreachable: on Kubernetes, a CNI or policy engine set to reject rather than drop), and check that each AF_PROBE_* target answers when reached; docs/containment.md, \"A platform that drops\""
            }
            FindingKind::SidecarUnreachable => {
                "the probe could not reach the environment's own sidecar, so the routes it saw denied prove nothing (a namespace with no working network denies every route): check that the sidecar runs and that the environment's network lets a service reach it"
            }
            FindingKind::NoVerdict => {
                "the probe gave no verdict: its message above says why (on Kubernetes, the af-probe pod's log and events)"
            }
        }
    }
}

/// Why a pod will never start; each cause has its own next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PodFailureKind {
    /// The kubelet refused to run it (`SysctlForbidden`, `NodeAffinity`, ...): the pod failed
    /// before any container started.
    RejectedByNode,
    /// An image of it cannot be pulled.
    ImageUnavailable,
    /// The scheduler has no node for it.
    Unschedulable,
    /// Its own process keeps exiting.
    CrashLoop,
    /// The API server's admission refused to create it (PodSecurity, a policy webhook, a quota).
    AdmissionRefused,
}

impl PodFailureKind {
    fn next_step(self) -> &'static str {
        match self {
            PodFailureKind::RejectedByNode => {
                "the node's kubelet refused the pod for the reason above; SysctlForbidden means the kubelet does not allow a sysctl af's sidecar sets (net.ipv4.ip_unprivileged_port_start is allowed by default from Kubernetes 1.22; af supports 1.30 and later): upgrade the nodes, or allow that sysctl in the kubelet (--allowed-unsafe-sysctls)"
            }
            PodFailureKind::ImageUnavailable => {
                "make the image pullable by the nodes: on k3d and kind af imports the images it builds and its own; on other clusters push them to a registry the nodes can pull from (AF_PROXY_IMAGE names the engine's)"
            }
            PodFailureKind::Unschedulable => {
                "the scheduler's message above says what no node offers (room, a tolerated taint, a matching selector): free or add capacity, or lower the service's resources or replicas"
            }
            PodFailureKind::CrashLoop => {
                "the service's own process keeps exiting; its last lines are above: fix the service, its command or its environment, and run af up again"
            }
            PodFailureKind::AdmissionRefused => {
                "an admission rule of the cluster refused the pod (a PodSecurity level, a policy webhook, a quota or LimitRange), and its message above names the rule: ask the cluster's administrator to allow it in af's namespaces, or change what the manifest asks (with runtime.netlock each pod's first step runs as root with NET_ADMIN, which af's namespace admits at the PodSecurity level privileged and a policy engine may refuse)"
            }
        }
    }
}

/// What went wrong, with the facts each case needs to be acted on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RuntimeErrorKind {
    PlatformFailed {
        /// What af was doing (`creating network af-shop-main-internal`).
        operation: String,
        detail: String,
    },
    EngineImage {
        detail: String,
    },
    ContainmentRefused {
        /// The routes that got out or could not be judged; never empty.
        findings: Vec<RouteFinding>,
    },
    Unsupported {
        runtime: String,
        capability: Capability,
    },
    NotOurs {
        /// `namespace`, `container`, `network`, ...
        object_kind: String,
        name: String,
    },
    DoesNotFit {
        /// Each shortfall, in words (`service web needs 4 CPU per instance; the largest node has 2
        /// free`).
        shortfalls: Vec<String>,
    },
    SidecarConfigInvalid {
        file: String,
        /// Every problem found, in words.
        problems: Vec<String>,
    },
    NetlockFailed {
        /// What was to be locked: `this sandbox`, `this pod`, `service web (pod af-x/web-1)`,
        /// `the holder af-x-web-holder`.
        place: String,
        /// What failed, in words (gVisor, a missing tool, no owner match, a rule set that did not
        /// read back as applied).
        detail: String,
    },
    PodWillNotStart {
        /// What the pod is for: `service web`, `the sidecar`, `migration af-migrate-web`.
        workload: String,
        /// `namespace/name` of the pod, or of the object whose pods were refused.
        pod: String,
        cause: PodFailureKind,
        /// What the cluster said, with the last log lines where there are any.
        detail: String,
    },
    ClusterTooOld {
        /// The API server's version (`v1.20.15`).
        found: String,
        /// The oldest version af supports (`1.30`).
        minimum: String,
    },
    EnvValueMissing {
        /// Each value not set: `web's STRIPE_KEY from STRIPE_SECRET`.
        missing: Vec<String>,
    },
    MigrationFailed {
        service: String,
        /// How it ended, with its last lines.
        detail: String,
    },
    ImageBuildFailed {
        service: String,
        /// The build context.
        context: String,
        /// What the builder said last.
        detail: String,
    },
    NeverReady {
        /// The services (or their instances) not ready.
        waiting: Vec<String>,
        waited_s: u64,
    },
    Internal {
        /// What af was doing.
        operation: String,
        detail: String,
    },
    NotAllowed {
        /// What af was doing (`creating namespace af-shop-main`).
        operation: String,
        /// 401 (credentials refused) or 403 (permission refused).
        status: u16,
        /// What the platform said.
        detail: String,
    },
    DatabaseImageMissing {
        image: String,
    },
    SeedFailed {
        /// The seed file, as the manifest names it.
        file: String,
        /// What psql said.
        detail: String,
    },
    DatabaseNeverReady {
        /// The database's container.
        container: String,
        /// How long af waited.
        waited_s: u64,
        /// Whether the container stopped (else it ran and never answered).
        stopped: bool,
        /// Its last log lines.
        detail: String,
    },
    NoDatabaseBranch {
        /// The environment.
        environment: String,
        /// Why there is none: no container database in the manifest, or none running.
        reason: String,
    },
    ExternalDatabaseUrl {
        /// The variable of af's environment the URL was read from (never the URL: it holds the
        /// password).
        variable: String,
        /// What is wrong with it, in words that quote nothing secret.
        problem: String,
    },
    ExternalDatabaseHostNotAllowed {
        variable: String,
        /// The host in the URL.
        host: String,
        /// `database.host` when the manifest names another host.
        named: Option<String>,
        /// Why the egress policy refuses it (`not-listed`, `captured-host-not-relayed`).
        reason: String,
    },
}

/// An error from a runtime, carrying its code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct RuntimeError {
    #[serde(flatten)]
    pub kind: RuntimeErrorKind,
}

/// `1.20` of `v1.20.2`, as the version override takes it; `MAJOR.MINOR` when it cannot be read.
fn major_minor_of(version: &str) -> String {
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next().unwrap_or_default();
    let minor: String = parts
        .next()
        .unwrap_or_default()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if major.is_empty() || !major.chars().all(|c| c.is_ascii_digit()) || minor.is_empty() {
        "MAJOR.MINOR".to_string()
    } else {
        format!("{major}.{minor}")
    }
}

impl RuntimeError {
    /// AF-RUN-001: the platform failed `operation` (what af was doing), for `detail`.
    pub fn platform_failed(
        operation: impl Into<String>,
        detail: impl fmt::Display,
    ) -> RuntimeError {
        RuntimeErrorKind::PlatformFailed {
            operation: operation.into(),
            detail: detail.to_string(),
        }
        .into()
    }

    /// Who can act on it ([`RunCode::category`]).
    pub fn category(&self) -> Category {
        self.code().category()
    }

    pub fn code(&self) -> RunCode {
        match self.kind {
            RuntimeErrorKind::PlatformFailed { .. } => RunCode::PlatformFailed,
            RuntimeErrorKind::EngineImage { .. } => RunCode::EngineImage,
            RuntimeErrorKind::ContainmentRefused { .. } => RunCode::ContainmentRefused,
            RuntimeErrorKind::Unsupported { .. } => RunCode::Unsupported,
            RuntimeErrorKind::NotOurs { .. } => RunCode::NotOurs,
            RuntimeErrorKind::DoesNotFit { .. } => RunCode::DoesNotFit,
            RuntimeErrorKind::SidecarConfigInvalid { .. } => RunCode::SidecarConfigInvalid,
            RuntimeErrorKind::NetlockFailed { .. } => RunCode::NetlockFailed,
            RuntimeErrorKind::PodWillNotStart { .. } => RunCode::PodWillNotStart,
            RuntimeErrorKind::ClusterTooOld { .. } => RunCode::ClusterTooOld,
            RuntimeErrorKind::EnvValueMissing { .. } => RunCode::EnvValueMissing,
            RuntimeErrorKind::MigrationFailed { .. } => RunCode::MigrationFailed,
            RuntimeErrorKind::ImageBuildFailed { .. } => RunCode::ImageBuildFailed,
            RuntimeErrorKind::NeverReady { .. } => RunCode::NeverReady,
            RuntimeErrorKind::Internal { .. } => RunCode::Internal,
            RuntimeErrorKind::NotAllowed { .. } => RunCode::NotAllowed,
            RuntimeErrorKind::DatabaseImageMissing { .. } => RunCode::DatabaseImageMissing,
            RuntimeErrorKind::SeedFailed { .. } => RunCode::SeedFailed,
            RuntimeErrorKind::DatabaseNeverReady { .. } => RunCode::DatabaseNeverReady,
            RuntimeErrorKind::NoDatabaseBranch { .. } => RunCode::NoDatabaseBranch,
            RuntimeErrorKind::ExternalDatabaseUrl { .. } => RunCode::ExternalDatabaseUrl,
            RuntimeErrorKind::ExternalDatabaseHostNotAllowed { .. } => {
                RunCode::ExternalDatabaseHostNotAllowed
            }
        }
    }

    /// What happened, naming the object.
    pub fn message(&self) -> String {
        match &self.kind {
            RuntimeErrorKind::PlatformFailed { operation, detail } => {
                format!("{operation} failed: {detail}")
            }
            RuntimeErrorKind::EngineImage { detail } => {
                format!("the engine image is not available: {detail}")
            }
            RuntimeErrorKind::ContainmentRefused { findings } => {
                let routes: Vec<String> = findings
                    .iter()
                    .map(|f| format!("{} ({})", f.route, f.outcome))
                    .collect();
                format!(
                    "the containment probe got out, or could not tell, by: {}; no service image ran",
                    routes.join(", ")
                )
            }
            RuntimeErrorKind::Unsupported {
                runtime,
                capability,
            } => format!(
                "the {runtime} runtime does not support {}",
                capability.describe()
            ),
            RuntimeErrorKind::NotOurs { object_kind, name } => {
                let mut message = format!(
                    "{object_kind} {name:?} exists but does not carry the label dev.antifailure.managed=true, so it is not af's"
                );
                // What using it would do: the reason af leaves it alone.
                if object_kind == "namespace" {
                    message.push_str(
                        "; placing an environment in it would cut off whatever runs there (the first policy denies all traffic), and removing it would remove everything in it",
                    );
                }
                message
            }
            RuntimeErrorKind::DoesNotFit { shortfalls } => format!(
                "the environment does not fit in what is free: {}",
                shortfalls.join("; ")
            ),
            RuntimeErrorKind::SidecarConfigInvalid { file, problems } => format!(
                "the sidecar configuration {file} cannot be used, so the sidecar serves nothing: {}",
                problems.join("; ")
            ),
            RuntimeErrorKind::NetlockFailed { place, detail } => {
                format!("netlock did not lock {place}, {NETLOCK_CAUSE_FOLLOWS}{detail}")
            }
            RuntimeErrorKind::PodWillNotStart {
                workload,
                pod,
                detail,
                ..
            } => format!("{workload} will not start (pod {pod}): {detail}"),
            RuntimeErrorKind::ClusterTooOld { found, minimum } => format!(
                "the cluster's API server is Kubernetes {found}; af supports Kubernetes {minimum} and later"
            ),
            RuntimeErrorKind::EnvValueMissing { missing } => format!(
                "the manifest takes values from the environment af runs in that are not set there: {}; nothing was created",
                missing.join(", ")
            ),
            RuntimeErrorKind::MigrationFailed { service, detail } => {
                format!("the migration of service {service} failed: {detail}")
            }
            RuntimeErrorKind::ImageBuildFailed {
                service,
                context,
                detail,
            } => format!("building the image of service {service} from {context} failed: {detail}"),
            RuntimeErrorKind::NeverReady { waiting, waited_s } => format!(
                "{} did not become ready within {waited_s} s",
                waiting.join(", ")
            ),
            RuntimeErrorKind::Internal { operation, detail } => {
                format!("{operation} failed inside af: {detail}")
            }
            RuntimeErrorKind::NotAllowed {
                operation,
                status: 401,
                detail,
            } => format!(
                "{operation} was refused: the platform did not accept af's credentials: {detail}"
            ),
            RuntimeErrorKind::NotAllowed {
                operation, detail, ..
            } => format!("{operation} was refused: af's user is not allowed to do it: {detail}"),
            RuntimeErrorKind::DatabaseImageMissing { image } => format!(
                "the database image {image} is not on this machine, and the local runtime pulls no image"
            ),
            RuntimeErrorKind::SeedFailed { file, detail } => {
                format!("the database seed {file} failed: {detail}")
            }
            RuntimeErrorKind::DatabaseNeverReady {
                container,
                waited_s,
                stopped,
                detail,
            } => format!(
                "the database server in {container} {} within {waited_s} s; its last lines: {detail}",
                if *stopped {
                    "stopped before it accepted connections"
                } else {
                    "did not accept connections"
                }
            ),
            RuntimeErrorKind::NoDatabaseBranch {
                environment,
                reason,
            } => format!("environment {environment} has no database branch: {reason}"),
            RuntimeErrorKind::ExternalDatabaseUrl { variable, problem } => format!(
                "the external database's URL in {variable} cannot be relayed by the sidecar: {problem}"
            ),
            RuntimeErrorKind::ExternalDatabaseHostNotAllowed {
                variable,
                host,
                named: Some(named),
                ..
            } => format!(
                "the external database's URL in {variable} names host {host}, and database.host names {named}: the sidecar relays only to the host the manifest names"
            ),
            RuntimeErrorKind::ExternalDatabaseHostNotAllowed {
                variable,
                host,
                named: None,
                reason,
            } => format!(
                "the external database's host {host} (from {variable}) is not named by database.host and the egress policy does not allow it ({reason}): the sidecar would refuse every connection to it"
            ),
        }
    }

    /// What to do next.
    pub fn help(&self) -> String {
        match &self.kind {
            RuntimeErrorKind::PlatformFailed { .. } => "check that the platform is reachable and healthy (docker info; kubectl get --raw /readyz), then run the command again; af down removes whatever was created".to_string(),
            RuntimeErrorKind::EngineImage { .. } => "build the static af-proxy (scripts/build-engine) or set AF_PROXY_IMAGE to an image this platform can run".to_string(),
            RuntimeErrorKind::ContainmentRefused { findings } => {
                let mut kinds: Vec<FindingKind> = findings.iter().map(|f| f.kind).collect();
                kinds.dedup();
                let mut steps: Vec<&str> = Vec::new();
                for kind in kinds {
                    if !steps.contains(&kind.next_step()) {
                        steps.push(kind.next_step());
                    }
                }
                format!("{}; `af down` removes what was created", steps.join("; "))
            }
            RuntimeErrorKind::Unsupported { .. } => "use a runtime that supports it (runtime.provider in the manifest), or leave the feature out".to_string(),
            RuntimeErrorKind::NotOurs { .. } => "af never removes or reuses what it did not create: rename or remove that object yourself, or use another --env".to_string(),
            RuntimeErrorKind::DoesNotFit { .. } => "lower services.<name>.resources or replicas, or free capacity on the platform".to_string(),
            RuntimeErrorKind::SidecarConfigInvalid { .. } => "fix each problem named; the configuration format is in docs/sidecar.md".to_string(),
            RuntimeErrorKind::NetlockFailed { .. } => "run it under runc or Kata (gVisor has no netfilter owner match), give its netlock step NET_ADMIN as root, and ship the iptables tools in that step's image (af's engine image carries them); see docs/containment.md".to_string(),
            RuntimeErrorKind::PodWillNotStart { cause, .. } => format!("{}; `af down` removes what was created", cause.next_step()),
            RuntimeErrorKind::ClusterTooOld { minimum, found } => format!("use a cluster of Kubernetes {minimum} or later (docs/runtimes.md says why that version); nothing was created. For a test cluster whose limits you accept, AF_KUBERNETES_ALLOW_VERSION={} lets af go on with that version and warns at every up", major_minor_of(found)),
            RuntimeErrorKind::EnvValueMissing { .. } => "export each one in the shell that runs af (or change the manifest's `from_env`), then run af up again".to_string(),
            RuntimeErrorKind::MigrationFailed { service, .. } => format!("its own output above says why: fix the migration or its command (services.{service}.migrate) and run af up again, which runs it again; the services it depends on are up (af logs SERVICE), and af down removes everything"),
            RuntimeErrorKind::ImageBuildFailed { context, .. } => format!("fix the build (the builder's last lines are above; `docker build {context}` shows all of it) and run af up again"),
            RuntimeErrorKind::NeverReady { .. } => "the service started and did not answer: read its output (af logs SERVICE), check that it listens on its port on every interface (0.0.0.0, not 127.0.0.1) and that its health_path answers 2xx; af down removes what was created".to_string(),
            RuntimeErrorKind::Internal { .. } => "this is af's fault, not the manifest's or the platform's: please report it with this message; af down removes what was created".to_string(),
            RuntimeErrorKind::NotAllowed { status: 401, .. } => "the credentials of the kubeconfig context af uses were refused (expired, revoked or for another cluster): renew them (`kubectl get --raw /version` shows whether they work), then run the command again".to_string(),
            RuntimeErrorKind::NotAllowed { .. } => "grant the kubeconfig context's user the permission the message names (`kubectl auth can-i VERB RESOURCE -n NAMESPACE` checks it; docs/runtimes.md lists what af needs), or use a context that has it, then run the command again".to_string(),
            RuntimeErrorKind::DatabaseImageMissing { image } => format!("put {image} on this machine (`docker pull {image}` where a registry is reachable, `docker load`, or scripts/build-db-image for af's own), or name one that is with database.image; nothing was started"),
            RuntimeErrorKind::SeedFailed { file, .. } => format!("fix the SQL in {file} (psql's message above names the line); it runs as the branch's owner, not a superuser, in one transaction with ON_ERROR_STOP; run af up again, which builds the template again"),
            RuntimeErrorKind::DatabaseNeverReady { .. } => "its last lines above say why; database.image must follow the official postgres image's contract (PGDATA, a postgres user, `postgres -c ...` as its command); af down removes what was created".to_string(),
            RuntimeErrorKind::NoDatabaseBranch { .. } => "a branch exists for a manifest with `database: {provider: container}` after af up; run af up first (af status shows the branch), or, for an external database, use its own tools".to_string(),
            RuntimeErrorKind::ExternalDatabaseUrl { variable, .. } => format!("set {variable} to a postgres:// (or postgresql://) URL with exactly one host in its authority, not in its query (postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=...), then run af up again; nothing was created"),
            RuntimeErrorKind::ExternalDatabaseHostNotAllowed { host, named: Some(_), .. } => format!("make database.host the URL's host ({host}), or point the variable at the database the manifest names, then run af up again; nothing was created"),
            RuntimeErrorKind::ExternalDatabaseHostNotAllowed { host, .. } => format!("name it with `database.host: {host}` (the sidecar then relays to it at a private address too), or allow it in egress.allow, then run af up again; nothing was created"),
        }
    }
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code(), self.message())
    }
}

impl From<RuntimeErrorKind> for RuntimeError {
    fn from(kind: RuntimeErrorKind) -> Self {
        RuntimeError { kind }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_numbers_stay_fixed() {
        let codes: Vec<&str> = RunCode::all().map(|c| c.as_str()).collect();
        assert_eq!(
            codes,
            [
                "AF-RUN-001",
                "AF-RUN-002",
                "AF-RUN-043",
                "AF-RUN-044",
                "AF-RUN-045",
                "AF-RUN-047",
                "AF-RUN-050",
                "AF-RUN-051",
                "AF-RUN-058",
                "AF-RUN-059",
                "AF-RUN-060",
                "AF-RUN-061",
                "AF-RUN-062",
                "AF-RUN-063",
                "AF-RUN-064",
                "AF-RUN-065",
                "AF-RUN-066",
                "AF-RUN-067",
                "AF-RUN-068",
                "AF-RUN-069",
                "AF-RUN-070",
                "AF-RUN-071",
            ]
        );
    }

    #[test]
    fn exit_statuses_are_the_code_numbers() {
        for code in RunCode::all().filter(|c| c.exit_status() != 4) {
            let number: u8 = code.as_str().trim_start_matches("AF-RUN-").parse().unwrap();
            assert_eq!(code.exit_status(), number);
        }
    }

    #[test]
    fn a_foreign_namespace_says_what_using_it_would_do() {
        let namespace = RuntimeError::from(RuntimeErrorKind::NotOurs {
            object_kind: "namespace".into(),
            name: "af-shop-main".into(),
        });
        assert!(
            namespace
                .to_string()
                .contains("would cut off whatever runs there")
        );
        let network = RuntimeError::from(RuntimeErrorKind::NotOurs {
            object_kind: "network".into(),
            name: "af-shop-main-internal".into(),
        });
        assert!(!network.to_string().contains("cut off"));
    }

    #[test]
    fn containment_refusal_names_each_route() {
        let err = RuntimeError::from(RuntimeErrorKind::ContainmentRefused {
            findings: vec![
                RouteFinding {
                    route: "direct TCP to 192.0.2.10:443".into(),
                    outcome: "escaped".into(),
                    kind: FindingKind::Escaped,
                },
                RouteFinding {
                    route: "metadata 169.254.169.254:80".into(),
                    outcome: "unanswered".into(),
                    kind: FindingKind::Unanswered,
                },
            ],
        });
        assert_eq!(err.code(), RunCode::ContainmentRefused);
        let text = err.to_string();
        assert!(text.starts_with("AF-RUN-043 "), "{text}");
        assert!(text.contains("192.0.2.10:443 (escaped)"), "{text}");
        assert!(text.contains("169.254.169.254:80 (unanswered)"), "{text}");
        let help = err.help();
        assert!(
            help.contains("enforces NetworkPolicy")
                && help.contains("drops denied packets silently"),
            "{help}"
        );
    }

    /// The advice fits the cause: a route that got out is not told to look at a dropping
    /// platform, and an unreachable sidecar is told neither.
    #[test]
    fn containment_advice_fits_each_cause() {
        let help = |kind| {
            RuntimeError::from(RuntimeErrorKind::ContainmentRefused {
                findings: vec![RouteFinding {
                    route: "r".into(),
                    outcome: "o".into(),
                    kind,
                }],
            })
            .help()
        };
        let escaped = help(FindingKind::Escaped);
        assert!(
            escaped.contains("NetworkPolicy") && !escaped.contains("drops"),
            "{escaped}"
        );
        let dropped = help(FindingKind::Unanswered);
        assert!(
            dropped.contains("drops denied packets silently")
                && dropped.contains("reject rather than drop"),
            "{dropped}"
        );
        let unreachable = help(FindingKind::SidecarUnreachable);
        assert!(
            unreachable.contains("own sidecar") && !unreachable.contains("drops"),
            "{unreachable}"
        );
    }

    #[test]
    fn serializes_with_code_kind_and_facts() {
        let err = RuntimeError::from(RuntimeErrorKind::NotOurs {
            object_kind: "namespace".into(),
            name: "af-shop-main".into(),
        });
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(json["kind"], "not_ours");
        assert_eq!(json["name"], "af-shop-main");
    }
}
