//! What a runtime's conformance run needs besides the runtime itself: the "outside" (hosts the
//! suite creates on networks it owns), a client the platform lets reach them (the positive
//! control), and the few platform-side actions a behaviour cannot take through the `Runtime`
//! trait (planting a foreign object, stopping the sidecar, listing what is left).

use std::path::Path;

use af_manifest::EnvironmentId;
use af_runtime::Runtime;
use async_trait::async_trait;
use serde::Deserialize;

/// An allowed HTTP origin outside the environment (the agent program, port 8080), reachable only
/// through the sidecar.
pub const ORIGIN_NAME: &str = "origin.conformance.test";
/// The origin's network: documentation addresses are never dialled without a rule naming them.
pub const ORIGIN_CIDR: &str = "198.51.100.0/24";
/// Allowed by name, and resolving to a private address (the operator host's): DNS rebinding.
pub const REBIND_NAME: &str = "rebind.conformance.test";

/// The external database of `database: {provider: external}`: a name of the operator host (a
/// private address), whose TCP listener on 3128 counts every connection that reaches it.
pub const EXTERNAL_DATABASE_NAME: &str = "database.conformance.test";
/// The variable the external database's fixture reads its URL from; the harness's runtime has it
/// ([`EXTERNAL_DATABASE_URL`]), the process need not.
pub const EXTERNAL_DATABASE_VARIABLE: &str = "AF_CONFORMANCE_DATABASE_URL";
/// Its URL: on 3128, a port the sidecar serves itself, so the relay listens on 5432 and the
/// services' connection string says so.
pub const EXTERNAL_DATABASE_URL: &str =
    "postgres://conformance:not-a-secret@database.conformance.test:3128/conformance";

/// The outside hosts, as routes address them (`ip`, without a port).
#[derive(Clone, Debug)]
pub struct OutsideAddresses {
    /// A "public" host: TCP on 3128 (and 853, as a DNS-over-TLS resolver would), DNS on 53.
    pub public: String,
    /// The metadata endpoint, 169.254.169.254 (TCP on 3128).
    pub metadata: String,
    /// A host in a private range on the operator's network (TCP on 3128).
    pub operator: String,
    /// A global IPv6 host (TCP on 3128).
    pub global_v6: String,
    /// The IPv6 metadata address, fd00:ec2::254 (TCP on 3128).
    pub metadata_v6: String,
}

/// One route's outcome as `af-proxy probe` and the agent report it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct RouteOutcome {
    pub route: String,
    pub outcome: String,
    #[serde(default)]
    pub detail: String,
}

#[async_trait]
pub trait Harness: Send + Sync {
    fn runtime(&self) -> &dyn Runtime;
    /// The engine image: the agent the fixtures' services run.
    fn engine_image(&self) -> &str;
    /// The hosts the harness made for the outside.
    fn outside_hosts(&self) -> &crate::outside::Outside;
    fn outside(&self) -> &OutsideAddresses {
        &self.outside_hosts().addresses
    }
    /// A directory of the harness's own for build contexts.
    fn scratch_dir(&self) -> &Path;

    /// The positive control: `routes` (`NAME=KIND:ADDRESS`) tried by a client the platform lets
    /// reach every outside host.
    async fn try_from_outside(&self, routes: &[String]) -> Result<Vec<RouteOutcome>, String> {
        self.outside_hosts().try_from_control(routes).await
    }
    /// `routes` tried from inside a service's instance by the platform itself (exactly the
    /// service's rules), for when the service cannot be asked: its sidecar, which delivers
    /// requests to it, is stopped.
    async fn try_in_service(
        &self,
        id: &EnvironmentId,
        service: &str,
        routes: &[String],
    ) -> Result<Vec<RouteOutcome>, String>;
    /// The address of the allowed origin (`ip:port`), for a route that tries it directly.
    fn origin_address(&self) -> String {
        format!("{}:8080", self.outside_hosts().origin.ip)
    }
    /// What this platform needs every fixture's manifest to say besides what it says: on a
    /// cluster whose CNI enforces no NetworkPolicy, `runtime.netlock` (without it the probe
    /// refuses the cluster, rightly, and no behaviour runs). The run's records say it.
    fn adapt(&self, _manifest: &mut af_manifest::Manifest) {}
    /// Called after every `up` of the suite: gives the environment's way out (its sidecar) the
    /// outside hosts as its "internet".
    async fn after_up(&self, id: &EnvironmentId) -> Result<(), String>;
    /// Creates an object with the environment's name and without our label.
    async fn plant_foreign(&self, id: &EnvironmentId) -> Result<(), String>;
    /// Whether that foreign object is still there, untouched.
    async fn foreign_present(&self, id: &EnvironmentId) -> Result<bool, String>;
    async fn remove_foreign(&self, id: &EnvironmentId) -> Result<(), String>;
    /// Every object of the platform that carries the environment's label.
    async fn leftovers(&self, id: &EnvironmentId) -> Result<Vec<String>, String>;
    /// Stops the environment's sidecar, as a crash would.
    async fn stop_sidecar(&self, id: &EnvironmentId) -> Result<(), String>;
    /// The address of a service's first instance, as it sits on the platform's network.
    async fn service_address(&self, id: &EnvironmentId, service: &str) -> Result<String, String>;
    /// The sidecar's control API as a workload would aim at it (`ip:port`), and whether it
    /// answers the operator's side (the positive control).
    async fn control_api(&self, id: &EnvironmentId) -> Result<(String, bool), String>;
    /// The platform's API as a workload would aim at it (`ip:port`), and whether something there
    /// answers the platform's own side (the positive control).
    async fn platform_api(&self, id: &EnvironmentId) -> Result<(String, bool), String>;
    /// The database image a fixture with `database: {provider: container}` names: one on the
    /// platform (nothing is pulled); `None` when the harness has none, which fails the behaviours
    /// that need one (a runtime without the capability skips them first).
    fn database_image(&self) -> Option<String> {
        None
    }
    /// The address of the environment's database server as it sits on the platform's network.
    async fn database_address(&self, _id: &EnvironmentId) -> Result<String, String> {
        Err("this harness cannot find a database server".to_string())
    }
    /// The addresses the environment's database server logged a connection from, in order: where
    /// a route to it is judged.
    async fn database_arrivals(&self, _id: &EnvironmentId) -> Result<Vec<String>, String> {
        Err("this harness cannot read a database server's connections".to_string())
    }
    /// Removes what the harness made (outside hosts, controls); called once at the end of a run.
    async fn close(&self);
}
