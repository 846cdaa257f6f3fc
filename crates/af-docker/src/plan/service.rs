//! A service's instances as data: where they are placed, what each is called, the environment its
//! process gets, the digest of its specification, and its migration's one-shot.

use std::net::Ipv4Addr;

use af_manifest::{EnvValue, EnvironmentId, Service};

use crate::error::DockerError;
use crate::names;
use crate::plan::containers::OneShot;
use crate::plan::sidecar::PROXY_PORT;
use crate::plan::trust::CaptureCa;

/// Where everything a service instance needs is.
#[derive(Clone, Copy, Debug)]
pub struct Placement<'a> {
    pub env: &'a EnvironmentId,
    pub engine_image: &'a str,
    pub internal: &'a str,
    /// The services' network: its subnets and the platform's own addresses in them.
    pub layout: &'a crate::plan::networks::Layout,
    /// The sidecar's address on the services' network (fixed before the sidecar exists, so
    /// instances can be prepared while the probe runs).
    pub sidecar_ip: Ipv4Addr,
    pub gate_targets: &'a [String],
    /// The `NO_PROXY` list every service gets: loopback and the environment's service names.
    pub no_proxy: &'a str,
    /// The environment's capture CA, when its egress captures anything: every application and
    /// migration container gets its files and is told to trust it.
    pub capture_ca: Option<&'a CaptureCa>,
    /// The environment's database, when it has a branch: every application and migration
    /// container gets its connection string.
    pub database: Option<&'a crate::plan::database::Variable>,
    /// The sidecar's relay to an external database.
    pub relay: Option<&'a crate::plan::external_database::Relay>,
    /// af's own environment, where the manifest's `from_env` values are read.
    pub variables: Variables<'a>,
}

/// af's own environment as the runtime reads it: the process's, or a stand-in a test or an
/// embedding program gives ([`crate::LocalRuntime::with_variables`]).
#[derive(Clone, Copy)]
pub struct Variables<'a>(pub &'a (dyn Fn(&str) -> Option<String> + Send + Sync));

impl Variables<'_> {
    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }
}

impl std::fmt::Debug for Variables<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values: they are secrets more often than not.
        f.write_str("Variables(..)")
    }
}

/// The role names of instance `index` of `service`.
pub fn roles(service: &str, index: u32) -> (String, String) {
    (
        format!("{service}-{index}-holder"),
        format!("{service}-{index}"),
    )
}

/// The environment a service's process gets: its own variables (references resolved from af's
/// environment), then the proxy settings, which always point at the sidecar.
pub fn environment(
    service: &Service,
    sidecar_ip: &str,
    no_proxy: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>, DockerError> {
    let mut out = Vec::new();
    for (name, value) in service
        .env
        .iter()
        .filter(|(name, _)| !af_runtime::PROXY_VARIABLES.contains(&name.as_str()))
    {
        let value = match value {
            EnvValue::Literal(text) => text.clone(),
            // Checked before anything was created; unset since then.
            EnvValue::FromEnv(source) => lookup(source).ok_or_else(|| {
                DockerError::Runtime(
                    af_runtime::RuntimeErrorKind::EnvValueMissing {
                        missing: vec![format!("{}'s {name} from {source}", service.name)],
                    }
                    .into(),
                )
            })?,
        };
        out.push(format!("{name}={value}"));
    }
    let proxy = format!("http://{sidecar_ip}:{PROXY_PORT}");
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        out.push(format!("{name}={proxy}"));
    }
    out.push(format!("NO_PROXY={no_proxy}"));
    out.push(format!("no_proxy={no_proxy}"));
    Ok(out)
}

/// [`environment`] for `service` placed at `at`, references read with `lookup`, and the variables
/// that make it trust the capture CA (but those it sets itself).
pub fn environment_with(
    at: Placement<'_>,
    service: &Service,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, DockerError> {
    let mut out = environment(service, &at.sidecar_ip.to_string(), at.no_proxy, lookup)?;
    // A service that sets the variable itself keeps its own value.
    if let Some(database) = at.database
        && !service.env.contains_key(&database.name)
    {
        out.push(database.assignment());
    }
    if let Some(ca) = at.capture_ca {
        out.extend(ca.variables(|name| service.env.contains_key(name)));
    }
    Ok(out)
}

/// Everything an instance is made from, as a digest; unchanged, a second `up` keeps the instance as
/// it runs.
pub fn instance_spec(
    at: Placement<'_>,
    service: &Service,
    image: &str,
    environment: &[String],
) -> String {
    names::spec_digest(&[
        image,
        at.engine_image,
        at.internal,
        &at.sidecar_ip.to_string(),
        &format!(
            "{:?} {:?} {:?} {:?} {:?}",
            service.command,
            service.args,
            service.migrate,
            service.cron.as_ref().map(|c| c.as_str()),
            environment
        ),
        &format!("{:?} {:?}", service.resources.cpu, service.resources.memory),
        &format!("{:?}", at.layout),
        at.capture_ca.map_or("", |ca| ca.pem.cert.as_str()),
        // The instance carries its service's replica count (status reads it back), so a new
        // count is a new specification.
        &service.replicas.to_string(),
    ])
}

/// The application container's entrypoint and command: the manifest's `command` and `args`, or,
/// for a scheduled service, the engine's scheduler around `cron_command` (the command it runs: its
/// own, or its image's).
pub fn entry(
    service: &Service,
    cron_command: Option<Vec<String>>,
) -> (Option<Vec<String>>, Option<Vec<String>>) {
    match &service.cron {
        Some(schedule) => (
            Some(crate::plan::schedule::entrypoint(
                schedule,
                cron_command.unwrap_or_default(),
            )),
            Some(Vec::new()),
        ),
        None => (service.command.clone(), service.args.clone()),
    }
}

/// The role of the holder a service's migration runs in.
pub fn migration_holder_role(service: &str) -> String {
    format!("{service}-migrate-holder")
}

/// The specification label of a migration's holder: it is never kept, so it needs no digest.
pub const MIGRATION_SPEC: &str = "migration";

/// The one-shot that runs `service`'s migration `command` from `image`, in its holder's namespace,
/// with the service's environment and the capture CA's files.
pub fn migration(
    at: Placement<'_>,
    service: &Service,
    image: &str,
    command: &[String],
    env: Vec<String>,
) -> OneShot {
    let holder = names::container(at.env, &migration_holder_role(&service.name));
    OneShot {
        role: format!("{}-migrate", service.name),
        image: image.to_string(),
        network_mode: format!("container:{holder}"),
        entrypoint: Some(command.to_vec()),
        env,
        binds: at.capture_ca.map(CaptureCa::bind).into_iter().collect(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_resolved_and_the_proxy_always_points_at_the_sidecar() {
        let manifest = af_manifest::parse(
            "name: app\nruntime: {provider: local}\nservices:\n  web:\n    image: x\n    env:\n      LOG: info\n      API_TOKEN: {from_env: HOST_TOKEN}\n      HTTP_PROXY: http://elsewhere:1\n",
            "af.yaml",
        )
        .unwrap();
        let web = &manifest.services["web"];
        let env = environment(web, "172.20.0.2", &af_runtime::no_proxy(["web"]), |name| {
            (name == "HOST_TOKEN").then(|| "t0k3n".to_string())
        })
        .unwrap();
        assert!(env.contains(&"LOG=info".to_string()));
        assert!(env.contains(&"API_TOKEN=t0k3n".to_string()));
        let proxy: Vec<&String> = env
            .iter()
            .filter(|v| v.starts_with("HTTP_PROXY="))
            .collect();
        assert_eq!(
            proxy,
            vec!["HTTP_PROXY=http://172.20.0.2:3128"],
            "only the sidecar's setting"
        );
        assert!(
            env.contains(&"NO_PROXY=localhost,127.0.0.1,web".to_string()),
            "services reach each other directly: {env:?}"
        );
        let missing = environment(web, "172.20.0.2", "", |_| None).unwrap_err();
        assert!(missing.to_string().contains("HOST_TOKEN"), "{missing}");
    }
}
