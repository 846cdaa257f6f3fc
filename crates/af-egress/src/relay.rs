//! TCP relays: a workload connects to the sidecar's relay port, and the sidecar relays the
//! connection to the one destination the runtime fixed for that port (an external database). The
//! workload names nothing, so there is nothing of its to check: the decision is the host's
//! ([`decide_relay`]), made for every connection, and every connection is recorded with its bytes
//! each way. The bytes pass as they are — a TLS session inside them is the client's and the
//! server's, never the sidecar's.

use std::net::SocketAddr;
use std::sync::Arc;

use af_runtime::Verdict;
use af_sidecar_api::config::RelayConfig;
use tokio::net::{TcpListener, TcpStream};

use crate::accept::Admitted;
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::dial::{connect as dial, logged_rule};
use crate::policy::{RelayPermit, Target, decide_relay, relay_address};
use crate::splice;

/// The record's protocol and method for a relayed connection.
const PROTOCOL: &str = "relay";
const METHOD: &str = "TCP";

/// Serves `relay`'s listener for ever.
pub async fn serve(listener: TcpListener, relay: RelayConfig, shared: Arc<Shared>) {
    let relay = Arc::new(relay);
    crate::accept::accept_workloads(
        listener,
        "relay",
        shared.clone(),
        |stream, peer, admitted| relay_one(stream, peer, admitted, relay.clone(), shared.clone()),
    )
    .await;
}

/// One connection: decided, dialled at the checked address, relayed until either side closes,
/// recorded. A refused one is closed before a byte is read from it.
async fn relay_one(
    mut client: TcpStream,
    peer: SocketAddr,
    _admitted: Admitted,
    relay: Arc<RelayConfig>,
    shared: Arc<Shared>,
) {
    let _ = client.set_nodelay(true);
    let mut pending = Pending::new(
        &shared.environment,
        peer,
        PROTOCOL,
        METHOD,
        &relay.host,
        relay.port,
    );
    let deny = |pending: Pending, reason: crate::policy::DenyReason| {
        pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0)
    };
    // The configuration was checked when the sidecar started: the host is a name or an address.
    let Some(target) = Target::parse(&relay.host) else {
        return deny(pending, crate::policy::DenyReason::InvalidHost);
    };
    let permit = match decide_relay(&target, relay.named_by.as_deref(), &shared.policy) {
        Ok(permit) => permit,
        Err(reason) => return deny(pending, reason),
    };
    let resolved = match &target {
        Target::Ip(ip) => vec![*ip],
        Target::Name(name) => shared.resolver.resolve(name).await,
    };
    let (ip, via) = match relay_address(&resolved, &permit, &shared.policy) {
        Ok(chosen) => chosen,
        Err(reason) => return deny(pending, reason),
    };
    let rule = match permit {
        RelayPermit::Named(named_by) => named_by,
        RelayPermit::Policy(rule) => logged_rule(rule, via),
    };
    let addr = SocketAddr::new(ip, relay.port);
    pending.set_resolved(addr);
    let mut upstream = match dial(addr, shared.limits.connect_timeout()).await {
        Ok(stream) => stream,
        Err(err) => {
            // The client sees its connection closed, as it would by an unreachable server; the
            // record says it was allowed and moved nothing.
            tracing::debug!(%addr, error = %err, "relay destination unreachable");
            return pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0);
        }
    };
    let (up, down) = splice::relay(&mut client, &mut upstream).await;
    shared.metrics.bytes(up, down);
    pending.finish(&shared.log, Verdict::Allow, &rule, up, down);
}
