//! `afe serve`'s API: tickets (start, list, get, cancel, pause, resume, rerun, events, ledger,
//! node runs), revisions, live events over WebSocket and SSE, health and Prometheus metrics. It
//! holds no provider or git credential and runs no node: it writes to the store and wakes workers
//! through the queue, so it scales by replicas. Every route but health needs the bearer token.
//! The OpenAPI document is generated from the same router (utoipa), so it cannot drift from the
//! routes; `openapi.json` at the repository's root is that document, diffed in CI.
//! See docs/afe-api.md.

mod auth;
mod error;
mod extract;
mod health;
pub mod live;
mod publish;
mod revisions;
mod streams;
mod tickets;
pub mod views;
mod workspace;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use afe_queue::{Notifier, Queue};
use afe_store::Admin;
use axum::Router;
use serde_json::Value;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{PUBLIC_PATHS, SESSION_COOKIE, Token, same_origin, session_token};
pub use error::{ApiCode, ApiError, Problem};
pub use live::{CLOSE_TOO_SLOW, Hub, LiveSettings};
pub use publish::{Published, publish_folder};

/// What every handler reaches.
#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn Admin>,
    pub queue: Arc<dyn Queue>,
    pub notifier: Arc<dyn Notifier>,
    pub hub: Arc<Hub>,
    /// Revision documents read so far (immutable, so kept).
    documents: Arc<Mutex<HashMap<String, Arc<Value>>>>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("store", &self.store.backend())
            .field("queue", &self.queue.backend())
            .finish()
    }
}

impl ApiState {
    pub fn new(
        store: Arc<dyn Admin>,
        queue: Arc<dyn Queue>,
        notifier: Arc<dyn Notifier>,
        live: LiveSettings,
    ) -> ApiState {
        let hub = Arc::new(Hub::new(store.clone(), notifier.clone(), live));
        ApiState {
            store,
            queue,
            notifier,
            hub,
            documents: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// A revision's normalized document, read once.
    async fn document(&self, hash: &str) -> Result<Arc<Value>, afe_store::StoreError> {
        if let Some(found) = self
            .documents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(hash)
        {
            return Ok(found.clone());
        }
        let document = Arc::new(self.store.revision(hash).await?);
        self.documents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(hash.to_string(), document.clone());
        Ok(document)
    }

    /// Tells the other processes (workers, other API replicas) about events written here.
    async fn announce(&self, events: &[afe_store::Event]) {
        for event in events {
            self.announce_notice(afe_queue::Notice {
                ticket: event.ticket.clone(),
                seq: event.seq,
                kind: event.kind.clone(),
            })
            .await;
        }
    }

    async fn announce_notice(&self, notice: afe_queue::Notice) {
        if let Err(err) = self.notifier.publish(&notice).await {
            // The poll of every live feed and the workers' heartbeats still find it.
            tracing::debug!(error = %err, "cannot publish a notice");
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "afe",
        description = "The agent flow engine's API: tickets, revisions, live events. Every route but /healthz and /readyz needs `Authorization: Bearer <AFE_API_TOKEN>`.",
        license(name = "Apache-2.0")
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "tickets", description = "Runs of flows"),
        (name = "events", description = "Tickets' event logs, live"),
        (name = "revisions", description = "Published configurations"),
        (name = "health", description = "Probes and metrics"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every route, unauthenticated, and the document that describes them.
fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(tickets::start, tickets::list))
        .routes(routes!(tickets::get))
        .routes(routes!(tickets::cancel))
        .routes(routes!(tickets::pause))
        .routes(routes!(tickets::resume))
        .routes(routes!(tickets::rerun))
        .routes(routes!(tickets::nodes))
        .routes(routes!(tickets::ledger))
        .routes(routes!(tickets::events))
        .routes(routes!(tickets::checkpoints))
        .routes(routes!(tickets::checkpoint_diff))
        .routes(routes!(streams::ticket_ws))
        .routes(routes!(streams::ticket_sse))
        .routes(routes!(streams::all_ws))
        .routes(routes!(streams::all_sse))
        .routes(routes!(revisions::list))
        .routes(routes!(revisions::current))
        .routes(routes!(revisions::get))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(health::queue))
        .routes(routes!(health::openapi_json))
}

/// The OpenAPI document of every route (what `/openapi.json` serves, and what is checked in).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, mut document) = routes().split_for_parts();
    // Health is public: say so per operation.
    for path in PUBLIC_PATHS {
        if let Some(item) = document.paths.paths.get_mut(path)
            && let Some(get) = item.get.as_mut()
        {
            get.security = Some(vec![
                utoipa::openapi::security::SecurityRequirement::default(),
            ]);
        }
    }
    document
}

/// The API's router, every route behind `token` but the public ones.
pub fn router(state: ApiState, token: Token) -> Router {
    let (router, _) = routes().split_for_parts();
    router
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            token,
            auth::require_token,
        ))
}

/// The document as checked in: pretty JSON with a final newline.
pub fn openapi_text() -> String {
    let mut text = openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    text.push('\n');
    text
}
