//! From the located YAML tree to a [`Manifest`]: every section read, every rule checked, every
//! problem recorded with its place.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::cron::parse_cron;
use crate::dependencies::find_cycles;
use crate::diagnostic::{Location, ManifestCode};
use crate::egress_rule::{HostRule, parse_host_rule};
use crate::environment_id::MAX_NAMESPACE_PREFIX_LEN;
use crate::model::{
    CannedResponse, CaptureRule, Database, DatabaseEngine, DatabaseProvider, EgressPolicy,
    EnvValue, ImageSource, MailPolicy, Manifest, Provider, Resources, RuntimeSettings, Service,
};
use crate::names::{dns_name_problem, is_env_name, label_problem, suggest_label};
use crate::quantity::{Quantity, QuantityError, parse_quantity};
use crate::reader::{Entry, Reader};
use crate::secrets::{has_url_password, is_secret_name};
use crate::tree::{Node, SpannedNode, location_of};

/// Longest manifest name: it starts every environment id, which also has to hold the environment.
pub const MAX_MANIFEST_NAME_LEN: usize = 30;

/// Longest service name: a Kubernetes Service name is a 63-character DNS label.
pub const MAX_SERVICE_NAME_LEN: usize = 63;

/// Default image of a container database branch.
pub const DEFAULT_DATABASE_IMAGE: &str = "postgres:16-alpine";

const TOP_KEYS: [&str; 6] = [
    "version", "name", "runtime", "services", "egress", "database",
];
const RUNTIME_KEYS: [&str; 5] = [
    "provider",
    "kubeconfig_context",
    "namespace_prefix",
    "domain",
    "netlock",
];
const SERVICE_KEYS: [&str; 13] = [
    "image",
    "build",
    "command",
    "args",
    "env",
    "port",
    "web",
    "health_path",
    "replicas",
    "resources",
    "migrate",
    "cron",
    "depends_on",
];
const BUILD_KEYS: [&str; 2] = ["context", "dockerfile"];
const RESOURCE_KEYS: [&str; 2] = ["cpu", "memory"];
const EGRESS_KEYS: [&str; 3] = ["allow", "capture", "mail"];
const CAPTURE_KEYS: [&str; 2] = ["host", "response"];
const RESPONSE_KEYS: [&str; 3] = ["status", "content_type", "body"];
const FROM_ENV_KEYS: [&str; 1] = ["from_env"];
const DATABASE_KEYS: [&str; 7] = [
    "provider",
    "engine",
    "image",
    "seed",
    "url_from_env",
    "host",
    "env",
];
/// Keys people write when they put a database secret inline; refused with advice, not as unknown.
const DATABASE_SECRET_KEYS: [&str; 5] = ["url", "connection_string", "dsn", "password", "uri"];

/// Decodes and checks a whole manifest. `None` when any problem was recorded.
pub(crate) fn decode_manifest(reader: &mut Reader<'_>, root: &SpannedNode) -> Option<Manifest> {
    let start = Location {
        line: 1,
        column: 1,
        offset: 0,
        len: 0,
    };
    if root.value == Node::Null {
        reader.report(
            ManifestCode::MissingKey,
            start,
            "the manifest is empty",
            "start with `name:`, `runtime:` and `services:`; see docs/manifest.md",
        );
        return None;
    }
    let top = reader.fields(root, start, "the manifest", &TOP_KEYS);
    if let Some(version) = top.get("version")
        && let Some(v) = reader.integer(version, "version")
        && v != 1
    {
        reader.report(
            ManifestCode::InvalidValue,
            location_of(version),
            format!("manifest version {v} is not supported by this af"),
            "write `version: 1`, or upgrade af",
        );
    }
    let name = reader
        .required(&top, "name", "the manifest", "name: shop")
        .and_then(|node| read_label(reader, node, "name", MAX_MANIFEST_NAME_LEN));
    let runtime = reader
        .required(
            &top,
            "runtime",
            "the manifest",
            "runtime: {provider: local}",
        )
        .and_then(|node| read_runtime(reader, node, top.entry("runtime")?.key_at));
    let services = match top.entry("services") {
        Some(entry) => read_services(reader, entry),
        None => {
            reader.report(
                ManifestCode::MissingKey,
                start,
                "the manifest needs `services`",
                "add `services:` with at least one service under it",
            );
            None
        }
    };
    let egress = match top.entry("egress") {
        Some(entry) => read_egress(reader, entry),
        None => Some(EgressPolicy::default()),
    };
    let database = match top.entry("database") {
        Some(entry) => read_database(reader, entry).map(Some),
        None => Some(None),
    };
    if !reader.problems.is_empty() {
        return None;
    }
    Some(Manifest {
        name: name?,
        runtime: runtime?,
        services: services?,
        egress: egress?,
        database: database?,
    })
}

fn read_label(
    reader: &mut Reader<'_>,
    node: &SpannedNode,
    what: &str,
    max: usize,
) -> Option<String> {
    let name = reader.string(node, what)?;
    check_label(reader, &name, location_of(node), what, max).then_some(name)
}

fn check_label(reader: &mut Reader<'_>, name: &str, at: Location, what: &str, max: usize) -> bool {
    match label_problem(name, max) {
        None => true,
        Some(problem) => {
            reader.report(
                ManifestCode::InvalidName,
                at,
                format!("{what} {name:?} is not a DNS-1123 label: {problem}"),
                format!(
                    "use lower-case letters, digits and '-', starting with a letter, at most {max} characters, such as {:?}",
                    suggest_label(name).chars().take(max).collect::<String>().trim_end_matches('-')
                ),
            );
            false
        }
    }
}

/// Names af gives its own objects beside the services' (the sidecar's Deployment and Service,
/// the policies, the probe) start with this, so a service can never take one of them.
pub const RESERVED_PREFIX: &str = "af-";

fn check_not_reserved(reader: &mut Reader<'_>, name: &str, at: Location) -> bool {
    if !name.starts_with(RESERVED_PREFIX) {
        return true;
    }
    reader.report(
        ManifestCode::ReservedName,
        at,
        format!("the service name {name:?} starts with {RESERVED_PREFIX:?}, which af keeps for its own objects (the sidecar, the policies, the probe)"),
        format!("rename the service, for example {:?}", name.trim_start_matches(RESERVED_PREFIX)),
    );
    false
}

fn read_runtime(
    reader: &mut Reader<'_>,
    node: &SpannedNode,
    owner: Location,
) -> Option<RuntimeSettings> {
    let fields = reader.fields(node, owner, "runtime", &RUNTIME_KEYS);
    let provider = reader
        .required(&fields, "provider", "runtime", "provider: local")
        .and_then(|n| reader.one_of(n, "runtime.provider", &["local", "kubernetes"]))
        .map(|p| {
            if p == "local" {
                Provider::Local
            } else {
                Provider::Kubernetes
            }
        });
    let kubeconfig_context = optional(fields.get("kubeconfig_context"), |n| {
        reader.string(n, "runtime.kubeconfig_context")
    });
    let namespace_prefix = optional(fields.get("namespace_prefix"), |n| {
        let prefix = reader.string(n, "runtime.namespace_prefix")?;
        // A prefix is the start of a label: the same rule, except that it may end with '-'.
        let problem = if prefix.len() > MAX_NAMESPACE_PREFIX_LEN {
            Some(format!(
                "it is {} characters long; at most {MAX_NAMESPACE_PREFIX_LEN} fit beside the environment id",
                prefix.len()
            ))
        } else {
            label_problem(&format!("{prefix}x"), usize::MAX)
        };
        match problem {
            None => Some(prefix),
            Some(problem) => {
                reader.report(
                    ManifestCode::InvalidName,
                    location_of(n),
                    format!("runtime.namespace_prefix {prefix:?} cannot start a namespace name: {problem}"),
                    "use lower-case letters, digits and '-', starting with a letter, such as \"af-\"",
                );
                None
            }
        }
    });
    let domain = optional(fields.get("domain"), |n| {
        let domain = reader.string(n, "runtime.domain")?;
        let normalized = domain.trim_end_matches('.').to_ascii_lowercase();
        let single_label = || {
            (!normalized.contains('.')).then(|| {
                "it has a single label; preview hosts need a domain such as preview.example.com"
                    .to_string()
            })
        };
        match dns_name_problem(&normalized).or_else(single_label) {
            None => Some(normalized),
            Some(problem) => {
                reader.report(
                    ManifestCode::InvalidDomain,
                    location_of(n),
                    format!("runtime.domain {domain:?} is not a DNS name: {problem}"),
                    "write a domain whose wildcard records point at the cluster's ingress, such as preview.example.com",
                );
                None
            }
        }
    });
    let netlock = optional(fields.get("netlock"), |n| reader.bool(n, "runtime.netlock"));
    Some(RuntimeSettings {
        provider: provider?,
        kubeconfig_context: kubeconfig_context?,
        namespace_prefix: namespace_prefix?.unwrap_or_else(|| "af-".to_string()),
        domain: domain?,
        netlock: netlock?.unwrap_or(false),
    })
}

fn read_services(reader: &mut Reader<'_>, entry: Entry<'_>) -> Option<BTreeMap<String, Service>> {
    let entries = reader.entries(entry.value, "services");
    if entries.is_empty() && matches!(entry.value.value, Node::Map(_) | Node::Null) {
        reader.report(
            ManifestCode::MissingKey,
            entry.key_at,
            "`services` is empty; an environment needs at least one service",
            "add a service, for example `web: {image: shop/web:dev, port: 8080}`",
        );
        return None;
    }
    let mut services = BTreeMap::new();
    // Where each service's dependencies were written, for reporting unknown names and cycles.
    let mut dependency_places: BTreeMap<String, Vec<(String, Location)>> = BTreeMap::new();
    let mut complete = true;
    for service_entry in &entries {
        let name_ok = check_label(
            reader,
            service_entry.key,
            service_entry.key_at,
            "the service name",
            MAX_SERVICE_NAME_LEN,
        );
        let name_ok =
            name_ok && check_not_reserved(reader, service_entry.key, service_entry.key_at);
        let (service, places) = read_service(reader, *service_entry);
        dependency_places.insert(service_entry.key.to_string(), places);
        match service {
            Some(service) if name_ok => {
                services.insert(service.name.clone(), service);
            }
            _ => complete = false,
        }
    }
    check_dependencies(reader, &dependency_places);
    complete.then_some(services)
}

fn read_service(
    reader: &mut Reader<'_>,
    entry: Entry<'_>,
) -> (Option<Service>, Vec<(String, Location)>) {
    let name = entry.key;
    let what = |key: &str| format!("services.{name}.{key}");
    let fields = reader.fields(
        entry.value,
        entry.key_at,
        &format!("service {name:?}"),
        &SERVICE_KEYS,
    );

    let source = match (fields.get("image"), fields.get("build")) {
        (Some(image), None) => reader.string(image, &what("image")).map(ImageSource::Image),
        (None, Some(build)) => read_build(
            reader,
            build,
            fields
                .entry("build")
                .map(|e| e.key_at)
                .unwrap_or(entry.key_at),
            &what("build"),
        ),
        (Some(_), Some(_)) => {
            reader.report(
                ManifestCode::ImageSource,
                fields
                    .entry("build")
                    .map(|e| e.key_at)
                    .unwrap_or(entry.key_at),
                format!("service {name:?} has both `image` and `build`"),
                "keep `image` to run an existing image, or `build` to build one from a folder",
            );
            None
        }
        (None, None) => {
            reader.report(
                ManifestCode::ImageSource,
                entry.key_at,
                format!("service {name:?} has neither `image` nor `build`"),
                "add `image: <reference>` or `build: <folder with a Dockerfile>`",
            );
            None
        }
    };
    let command = optional(fields.get("command"), |n| {
        reader.word_list(n, &what("command"))
    });
    let args = optional(fields.get("args"), |n| reader.word_list(n, &what("args")));
    let migrate = optional(fields.get("migrate"), |n| {
        reader.word_list(n, &what("migrate"))
    });
    let env = match fields.get("env") {
        Some(n) => read_env(reader, n, name),
        None => Some(BTreeMap::new()),
    };
    let port = optional(fields.get("port"), |n| {
        let port = reader.integer(n, &what("port"))?;
        match u16::try_from(port) {
            Ok(p) if p >= 1 => Some(p),
            _ => {
                reader.report(
                    ManifestCode::InvalidPort,
                    location_of(n),
                    format!("{} {port} is not a TCP port", what("port")),
                    "use a port from 1 to 65535, the one the service listens on",
                );
                None
            }
        }
    });
    let web = optional(fields.get("web"), |n| reader.bool(n, &what("web")));
    let health_path = optional(fields.get("health_path"), |n| {
        let path = reader.string(n, &what("health_path"))?;
        if path.starts_with('/') && !path.contains(char::is_whitespace) {
            Some(path)
        } else {
            reader.report(
                ManifestCode::InvalidHealthPath,
                location_of(n),
                format!(
                    "{} {path:?} is not an absolute URL path",
                    what("health_path")
                ),
                format!(
                    "start it with '/', as in \"/{}\"",
                    path.trim_start_matches('/').trim()
                ),
            );
            None
        }
    });
    let replicas = optional(fields.get("replicas"), |n| {
        let replicas = reader.integer(n, &what("replicas"))?;
        match u32::try_from(replicas) {
            Ok(r) if r >= 1 => Some(r),
            _ => {
                reader.report(
                    ManifestCode::InvalidReplicas,
                    location_of(n),
                    format!(
                        "{} is {replicas}; a service runs at least one instance",
                        what("replicas")
                    ),
                    "write replicas: 1 or more; to stop a service, remove it from the manifest",
                );
                None
            }
        }
    });
    let resources = match fields.entry("resources") {
        Some(e) => read_resources(reader, e, name),
        None => Some(Resources::default()),
    };
    let cron = optional(fields.get("cron"), |n| {
        let text = reader.string(n, &what("cron"))?;
        match parse_cron(&text) {
            Ok(schedule) => Some(schedule),
            Err(problem) => {
                reader.report(
                    ManifestCode::InvalidCron,
                    location_of(n),
                    format!("{} {text:?} is not a cron schedule: {problem}", what("cron")),
                    "write five fields, minute hour day-of-month month day-of-week, such as \"*/15 * * * *\"",
                );
                None
            }
        }
    });
    let mut dependency_places = Vec::new();
    let depends_on = match fields.get("depends_on") {
        Some(n) => {
            let mut names = Vec::new();
            for (dependency, node) in reader.string_list(n, &what("depends_on")) {
                if names.contains(&dependency) {
                    reader.report(
                        ManifestCode::Duplicate,
                        location_of(node),
                        format!("{} names {dependency:?} twice", what("depends_on")),
                        "remove the repeated name",
                    );
                    continue;
                }
                dependency_places.push((dependency.clone(), location_of(node)));
                names.push(dependency);
            }
            names.sort();
            Some(names)
        }
        None => Some(Vec::new()),
    };

    // Rules between keys of one service.
    let web_flag = web.flatten().unwrap_or(false);
    if let (true, Some(Some(_))) = (web_flag, &cron) {
        reader.report(
            ManifestCode::CronAndWeb,
            fields.entry("cron").map(|e| e.key_at).unwrap_or(entry.key_at),
            format!("service {name:?} is both `cron` and `web`"),
            "a scheduled job serves no requests between runs: split it into a web service and a cron service",
        );
    }
    if fields.get("port").is_none() {
        let declared = [
            ("web", web_flag),
            ("health_path", fields.get("health_path").is_some()),
        ];
        for (key, _) in declared.into_iter().filter(|(_, declared)| *declared) {
            reader.report(
                ManifestCode::NeedsPort,
                fields.entry(key).map(|e| e.key_at).unwrap_or(entry.key_at),
                format!("service {name:?} has `{key}` but no `port`"),
                "add `port:` with the port the service listens on",
            );
        }
    }

    let service = (|| {
        Some(Service {
            name: name.to_string(),
            source: source?,
            command: command?,
            args: args?,
            env: env?,
            port: port?,
            web: web?.unwrap_or(false),
            health_path: health_path?,
            replicas: replicas?.unwrap_or(1),
            resources: resources?,
            migrate: migrate?,
            cron: cron?,
            depends_on: depends_on?,
        })
    })();
    (service, dependency_places)
}

/// Reads an optional key: `Some(None)` when absent, `Some(Some(v))` when read, `None` when it was
/// present but wrong (already reported).
fn optional<T>(
    node: Option<&SpannedNode>,
    read: impl FnOnce(&SpannedNode) -> Option<T>,
) -> Option<Option<T>> {
    match node {
        None => Some(None),
        Some(n) => read(n).map(Some),
    }
}

fn read_build(
    reader: &mut Reader<'_>,
    node: &SpannedNode,
    owner: Location,
    what: &str,
) -> Option<ImageSource> {
    let default_dockerfile = || PathBuf::from("Dockerfile");
    if let Node::Str(context) = &node.value {
        return Some(ImageSource::Build {
            context: PathBuf::from(context),
            dockerfile: default_dockerfile(),
        });
    }
    let fields = reader.fields(node, owner, what, &BUILD_KEYS);
    let context = reader
        .required(&fields, "context", what, "context: ./web")
        .and_then(|n| reader.string(n, &format!("{what}.context")));
    let dockerfile = optional(fields.get("dockerfile"), |n| {
        reader.string(n, &format!("{what}.dockerfile"))
    });
    Some(ImageSource::Build {
        context: PathBuf::from(context?),
        dockerfile: dockerfile?.map_or_else(default_dockerfile, PathBuf::from),
    })
}

fn read_env(
    reader: &mut Reader<'_>,
    node: &SpannedNode,
    service: &str,
) -> Option<BTreeMap<String, EnvValue>> {
    let what = format!("services.{service}.env");
    let mut env = BTreeMap::new();
    let mut complete = true;
    for entry in reader.entries(node, &what) {
        let key = entry.key;
        if !is_env_name(key) {
            reader.report(
                ManifestCode::InvalidEnvName,
                entry.key_at,
                format!("{key:?} in {what} is not a variable name a process can receive"),
                "use letters, digits and '_', not starting with a digit, such as LOG_LEVEL",
            );
            complete = false;
            continue;
        }
        let value = if let Node::Map(_) = entry.value.value {
            let fields = reader.fields(
                entry.value,
                entry.key_at,
                &format!("{what}.{key}"),
                &FROM_ENV_KEYS,
            );
            reader
                .required(
                    &fields,
                    "from_env",
                    &format!("{what}.{key}"),
                    "from_env: HOST_VARIABLE",
                )
                .and_then(|n| {
                    let source = reader.string(n, &format!("{what}.{key}.from_env"))?;
                    if is_env_name(&source) {
                        Some(EnvValue::FromEnv(source))
                    } else {
                        reader.report(
                            ManifestCode::InvalidEnvName,
                            location_of(n),
                            format!("{source:?} is not an environment variable name"),
                            "name the variable of af's own environment that holds the value",
                        );
                        None
                    }
                })
        } else {
            reader
                .scalar_as_text(entry.value, &format!("{what}.{key}"))
                .and_then(|literal| {
                    check_inline_secret(reader, key, literal, location_of(entry.value))
                })
        };
        match value {
            Some(value) => {
                env.insert(key.to_string(), value);
            }
            None => complete = false,
        }
    }
    complete.then_some(env)
}

/// A literal value is refused when its variable's name says it is a secret or the value carries a
/// password in a URL: the manifest is committed and copied, and a secret in it has leaked.
fn check_inline_secret(
    reader: &mut Reader<'_>,
    key: &str,
    literal: String,
    at: Location,
) -> Option<EnvValue> {
    let secret_name = is_secret_name(key) && !literal.is_empty();
    if secret_name || has_url_password(&literal) {
        reader.report(
            ManifestCode::InlineSecret,
            at,
            if secret_name {
                format!("{key} holds a secret, and its value is written in the manifest")
            } else {
                format!("the value of {key} contains a password inside a URL")
            },
            format!("reference it instead: `{key}: {{from_env: {key}}}`, and set {key} in the environment af runs in"),
        );
        return None;
    }
    Some(EnvValue::Literal(literal))
}

fn read_resources(reader: &mut Reader<'_>, entry: Entry<'_>, service: &str) -> Option<Resources> {
    let what = format!("services.{service}.resources");
    let fields = reader.fields(entry.value, entry.key_at, &what, &RESOURCE_KEYS);
    let mut read = |key: &str| -> Option<Option<Quantity>> {
        optional(fields.get(key), |n| {
            let text = reader.scalar_as_text(n, &format!("{what}.{key}"))?;
            read_quantity(reader, &text, key, location_of(n), &what)
        })
    };
    let cpu = read("cpu");
    let memory = read("memory");
    Some(Resources {
        cpu: cpu?,
        memory: memory?,
    })
}

fn read_quantity(
    reader: &mut Reader<'_>,
    text: &str,
    key: &str,
    at: Location,
    what: &str,
) -> Option<Quantity> {
    let example = if key == "cpu" {
        "cpu: 500m (half a core) or cpu: 2"
    } else {
        "memory: 256Mi or memory: 1Gi"
    };
    match parse_quantity(text) {
        Ok(q) if key == "memory" && q.has_sub_unit_suffix() => {
            reader.report(
                ManifestCode::InvalidQuantity,
                at,
                format!("{what}.memory {text:?} is a fraction of a byte: 'm' means thousandths, not megabytes"),
                format!("write {}Mi for mebibytes or {}M for megabytes", text.trim_end_matches(['m', 'u', 'n']), text.trim_end_matches(['m', 'u', 'n'])),
            );
            None
        }
        Ok(q) => Some(q),
        Err(QuantityError::NotPositive) => {
            reader.report(
                ManifestCode::ZeroQuantity,
                at,
                format!("{what}.{key} is {text}: a zero request is a request for nothing"),
                format!("name the size the service needs, such as {example}, or leave {key} out"),
            );
            None
        }
        Err(QuantityError::TooLarge) => {
            reader.report(
                ManifestCode::InvalidQuantity,
                at,
                format!("{what}.{key} {text:?} is larger than any machine"),
                format!("write the size the service needs, such as {example}"),
            );
            None
        }
        Err(QuantityError::Malformed(why)) => {
            reader.report(
                ManifestCode::InvalidQuantity,
                at,
                format!("{what}.{key} {text:?} is not a Kubernetes quantity: {why}"),
                format!("write a quantity such as {example}"),
            );
            None
        }
    }
}

/// Unknown dependencies, self-dependencies and cycles, each reported where it was written.
fn check_dependencies(reader: &mut Reader<'_>, places: &BTreeMap<String, Vec<(String, Location)>>) {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (service, dependencies) in places {
        for (dependency, at) in dependencies {
            if !places.contains_key(dependency) {
                let known: Vec<&str> = places.keys().map(String::as_str).collect();
                reader.report(
                    ManifestCode::UnknownDependency,
                    *at,
                    format!("service {service:?} depends on {dependency:?}, which is not a service of this manifest"),
                    match crate::reader::closest(dependency, &known) {
                        Some(s) => format!("did you mean {s:?}?"),
                        None => format!("the services are: {}", known.join(", ")),
                    },
                );
            }
        }
        graph.insert(
            service,
            dependencies.iter().map(|(d, _)| d.as_str()).collect(),
        );
    }
    for cycle in find_cycles(&graph) {
        let (from, to) = (cycle[0], cycle[1]);
        let at = places[from]
            .iter()
            .find(|(d, _)| d == to)
            .map(|(_, at)| *at)
            .unwrap_or(Location {
                line: 1,
                column: 1,
                offset: 0,
                len: 0,
            });
        reader.report(
            ManifestCode::DependencyCycle,
            at,
            format!("depends_on goes round in a circle: {}", cycle.join(" → ")),
            "no order can start these services; remove one of the dependencies in the circle",
        );
    }
}

fn read_egress(reader: &mut Reader<'_>, entry: Entry<'_>) -> Option<EgressPolicy> {
    let fields = reader.fields(entry.value, entry.key_at, "egress", &EGRESS_KEYS);
    let mut seen: Vec<(HostRule, &str, Location)> = Vec::new();
    let mut complete = true;

    let mut allow = Vec::new();
    if let Some(node) = fields.get("allow") {
        for (text, item) in reader.string_list(node, "egress.allow") {
            match read_rule(reader, &text, location_of(item), "egress.allow", &mut seen) {
                Some(rule) => allow.push(rule),
                None => complete = false,
            }
        }
    }
    let mut capture = Vec::new();
    if let Some(node) = fields.get("capture") {
        match &node.value {
            Node::Seq(items) => {
                for item in items {
                    match read_capture(reader, item, &mut seen) {
                        Some(rule) => capture.push(rule),
                        None => complete = false,
                    }
                }
            }
            Node::Null => {}
            _ => {
                // Reuse the list reader's message for a non-list.
                reader.string_list(node, "egress.capture");
                complete = false;
            }
        }
    }
    let mail = match fields.get("mail") {
        Some(n) => match reader.one_of(n, "egress.mail", &["deny", "capture"]) {
            Some("capture") => Some(MailPolicy::Capture),
            Some(_) => Some(MailPolicy::Deny),
            None => None,
        },
        None => Some(MailPolicy::Deny),
    };
    if !complete {
        return None;
    }
    Some(EgressPolicy {
        allow,
        capture,
        mail: mail?,
    })
}

/// Reads one rule and checks it is not already listed, in this list or the other.
fn read_rule<'l>(
    reader: &mut Reader<'_>,
    text: &str,
    at: Location,
    list: &'l str,
    seen: &mut Vec<(HostRule, &'l str, Location)>,
) -> Option<HostRule> {
    let rule = match parse_host_rule(text) {
        Ok(rule) => rule,
        Err(problem) => {
            reader.report(
                ManifestCode::InvalidEgressRule,
                at,
                format!("{list} entry {text:?} is not a destination: {problem}"),
                "write a host name (api.example.com), a wildcard (*.example.com), an IP address or a CIDR network",
            );
            return None;
        }
    };
    if list == "egress.capture" && matches!(rule, HostRule::Ip(_) | HostRule::Cidr(_)) {
        reader.report(
            ManifestCode::InvalidEgressRule,
            at,
            format!(
                "egress.capture entry {text:?} is an address; captures are decided by host name"
            ),
            "capture the host name the service calls, such as api.stripe.com",
        );
        return None;
    }
    if let Some((_, other_list, first)) = seen.iter().find(|(r, _, _)| *r == rule) {
        let (code, message, help) = if *other_list == list {
            (
                ManifestCode::Duplicate,
                format!(
                    "{rule} is listed twice in {list}; the first is on line {}",
                    first.line
                ),
                "remove the repeated entry".to_string(),
            )
        } else {
            (
                ManifestCode::EgressConflict,
                format!("{rule} is in both egress.allow and egress.capture (line {})", first.line),
                "keep it in `allow` to reach the real host, or in `capture` to have the sidecar answer and record it".to_string(),
            )
        };
        reader.report(code, at, message, help);
        return None;
    }
    seen.push((rule.clone(), list, at));
    Some(rule)
}

fn read_capture(
    reader: &mut Reader<'_>,
    item: &SpannedNode,
    seen: &mut Vec<(HostRule, &str, Location)>,
) -> Option<CaptureRule> {
    const LIST: &str = "egress.capture";
    if let Node::Str(text) = &item.value {
        let host = read_rule(reader, text, location_of(item), LIST, seen)?;
        return Some(CaptureRule {
            host,
            response: CannedResponse::default(),
        });
    }
    let fields = reader.fields(
        item,
        location_of(item),
        "an egress.capture entry",
        &CAPTURE_KEYS,
    );
    let host = reader
        .required(
            &fields,
            "host",
            "an egress.capture entry",
            "host: api.stripe.com",
        )
        .and_then(|n| {
            let text = reader.string(n, "egress.capture[].host")?;
            read_rule(reader, &text, location_of(n), LIST, seen)
        });
    let response = match fields.entry("response") {
        Some(e) => read_response(reader, e),
        None => Some(CannedResponse::default()),
    };
    Some(CaptureRule {
        host: host?,
        response: response?,
    })
}

fn read_response(reader: &mut Reader<'_>, entry: Entry<'_>) -> Option<CannedResponse> {
    const WHAT: &str = "egress.capture[].response";
    let fields = reader.fields(entry.value, entry.key_at, WHAT, &RESPONSE_KEYS);
    let defaults = CannedResponse::default();
    let status = optional(fields.get("status"), |n| {
        let status = reader.integer(n, "response.status")?;
        match u16::try_from(status) {
            Ok(s) if (100..=599).contains(&s) => Some(s),
            _ => {
                reader.report(
                    ManifestCode::InvalidValue,
                    location_of(n),
                    format!("response.status {status} is not an HTTP status"),
                    "use a status from 100 to 599, such as 200 or 202",
                );
                None
            }
        }
    });
    let content_type = optional(fields.get("content_type"), |n| {
        reader.string(n, "response.content_type")
    });
    let body = optional(fields.get("body"), |n| reader.string(n, "response.body"));
    Some(CannedResponse {
        status: status?.unwrap_or(defaults.status),
        content_type: content_type?.unwrap_or(defaults.content_type),
        body: body?.unwrap_or(defaults.body),
    })
}

fn read_database(reader: &mut Reader<'_>, entry: Entry<'_>) -> Option<Database> {
    let mut known: Vec<&str> = DATABASE_KEYS.to_vec();
    known.extend(DATABASE_SECRET_KEYS);
    let fields = reader.fields(entry.value, entry.key_at, "database", &known);
    let mut wrote_secret_inline = false;
    for key in DATABASE_SECRET_KEYS {
        if let Some(e) = fields.entry(key) {
            wrote_secret_inline = true;
            reader.report(
                ManifestCode::InlineSecret,
                e.key_at,
                format!("database.{key} writes the connection secret into the manifest"),
                "use `provider: external` with `url_from_env: VARIABLE`, naming the variable of af's environment that holds the URL",
            );
        }
    }
    let provider_name = reader
        .required(&fields, "provider", "database", "provider: container")
        .and_then(|n| reader.one_of(n, "database.provider", &["container", "external"]));
    let engine = match fields.get("engine") {
        Some(n) => reader
            .one_of(n, "database.engine", &["postgres"])
            .map(|_| DatabaseEngine::Postgres),
        None => Some(DatabaseEngine::Postgres),
    };
    let env = optional(fields.get("env"), |n| {
        let name = reader.string(n, "database.env")?;
        if is_env_name(&name) {
            return Some(name);
        }
        reader.report(
            ManifestCode::InvalidEnvName,
            location_of(n),
            format!("database.env {name:?} is not an environment variable name"),
            "name the variable services read the connection string from, such as DATABASE_URL",
        );
        None
    });
    let only_for = |reader: &mut Reader<'_>, key: &str, provider: &str| {
        if let Some(e) = fields.entry(key) {
            reader.report(
                ManifestCode::InvalidValue,
                e.key_at,
                format!("database.{key} only applies to `provider: {provider}`"),
                format!("remove `{key}`, or set `provider: {provider}`"),
            );
        }
    };
    let provider = match provider_name? {
        "container" => {
            only_for(reader, "url_from_env", "external");
            only_for(reader, "host", "external");
            let image = optional(fields.get("image"), |n| reader.string(n, "database.image"));
            let seed = optional(fields.get("seed"), |n| reader.string(n, "database.seed"));
            Some(DatabaseProvider::Container {
                image: image?.unwrap_or_else(|| DEFAULT_DATABASE_IMAGE.to_string()),
                seed: seed?.map(PathBuf::from),
            })
        }
        _ => {
            only_for(reader, "image", "container");
            only_for(reader, "seed", "container");
            let host = optional(fields.get("host"), |n| {
                let text = reader.string(n, "database.host")?;
                match parse_host_rule(&text) {
                    Ok(rule @ (HostRule::Exact(_) | HostRule::Ip(_))) => Some(rule.to_string()),
                    _ => {
                        reader.report(
                            ManifestCode::InvalidValue,
                            location_of(n),
                            format!("database.host {text:?} is not one host name or IP address"),
                            "name the database's host exactly as its URL does (db.staging.example.com, 10.0.4.12): no wildcard, no network",
                        );
                        None
                    }
                }
            });
            if wrote_secret_inline && fields.get("url_from_env").is_none() {
                // Already reported with the advice to use url_from_env; saying it is missing too
                // would be the same mistake twice.
                return None;
            }
            reader
                .required(&fields, "url_from_env", "database with `provider: external`", "url_from_env: STAGING_DATABASE_URL")
                .and_then(|n| {
                    let name = reader.string(n, "database.url_from_env")?;
                    if is_env_name(&name) {
                        Some(DatabaseProvider::External {
                            url_from_env: name,
                            host: host.clone()?,
                        })
                    } else {
                        let help = if name.contains("://") {
                            "this looks like the URL itself; put it in an environment variable and name the variable here"
                        } else {
                            "name the variable of af's environment that holds the connection string"
                        };
                        reader.report(
                            if name.contains("://") { ManifestCode::InlineSecret } else { ManifestCode::InvalidEnvName },
                            location_of(n),
                            format!("database.url_from_env {name:?} is not an environment variable name"),
                            help,
                        );
                        None
                    }
                })
        }
    };
    Some(Database {
        engine: engine?,
        provider: provider?,
        env: env?.unwrap_or_else(|| "DATABASE_URL".to_string()),
    })
}
