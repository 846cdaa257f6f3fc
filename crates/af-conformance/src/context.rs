//! What a behaviour works with: the harness, and environments it brings up by fixture name. A
//! shared fixture is brought up once per run and reused; every environment of the run is taken
//! down by label at the end.

use std::collections::BTreeMap;

use af_manifest::EnvironmentId;
use af_runtime::{
    Environment, ProgressEvent, ProgressSink, RuntimeError, UpReport, WebhookRequest,
};
use serde_json::Value;

use crate::harness::Harness;

/// Progress of the suite's own `up`s is not shown.
struct Quiet;

impl ProgressSink for Quiet {
    fn emit(&self, _: ProgressEvent) {}
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("run", &self.run).finish()
    }
}

pub struct Ctx<'h> {
    pub harness: &'h dyn Harness,
    /// This run's id: in every record, and in every environment id it makes.
    pub run: String,
    /// Environments brought up in this run (or tried), by fixture name: all are taken down.
    brought_up: tokio::sync::Mutex<BTreeMap<String, EnvironmentId>>,
    /// Shared fixtures whose up succeeded; one that failed is tried again by its next user.
    shared_up: tokio::sync::Mutex<BTreeMap<String, EnvironmentId>>,
}

impl<'h> Ctx<'h> {
    pub fn new(harness: &'h dyn Harness, run: String) -> Ctx<'h> {
        Ctx {
            harness,
            run,
            brought_up: tokio::sync::Mutex::new(BTreeMap::new()),
            shared_up: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The environment id of `fixture` in this run.
    pub fn id(&self, fixture: &str) -> EnvironmentId {
        EnvironmentId::derive("afc", &format!("{fixture}-{}", self.run))
    }

    /// `up` of `manifest` as environment `fixture`, then the harness's after-up step.
    pub async fn up(&self, fixture: &str, manifest: &str) -> Result<UpReport, RuntimeError> {
        let id = self.id(fixture);
        self.brought_up
            .lock()
            .await
            .insert(fixture.to_string(), id.clone());
        let mut manifest = af_manifest::parse(manifest, "conformance.yaml").map_err(|invalid| {
            RuntimeError::platform_failed(
                format!("reading the {fixture} fixture"),
                format!("{invalid:?}"),
            )
        })?;
        self.harness.adapt(&mut manifest);
        let environment = Environment {
            id: id.clone(),
            manifest,
            manifest_dir: self.harness.scratch_dir().to_path_buf(),
        };
        let report = self.harness.runtime().up(&environment, &Quiet).await?;
        self.harness.after_up(&id).await.map_err(|detail| {
            RuntimeError::platform_failed("the harness's after-up step", detail)
        })?;
        Ok(report)
    }

    /// `fixture` up (once per run) from `manifest`; its id.
    pub async fn shared(&self, fixture: &str, manifest: &str) -> Result<EnvironmentId, String> {
        let mut shared_up = self.shared_up.lock().await;
        if let Some(id) = shared_up.get(fixture) {
            return Ok(id.clone());
        }
        self.up(fixture, manifest)
            .await
            .map_err(|err| format!("bringing up the {fixture} environment: {err}"))?;
        let id = self.id(fixture);
        shared_up.insert(fixture.to_string(), id.clone());
        Ok(id)
    }

    pub async fn down(&self, id: &EnvironmentId) -> Result<(), RuntimeError> {
        self.harness.runtime().down(id, &Quiet).await
    }

    /// Asks service `service` of `id` (a conformance agent) for `path`, through the runtime's
    /// webhook delivery; the agent's JSON answer and its status.
    pub async fn agent(
        &self,
        id: &EnvironmentId,
        service: &str,
        method: &str,
        path: &str,
        body: Value,
    ) -> Result<(u16, Value), String> {
        let delivery = self
            .harness
            .runtime()
            .trigger_webhook(
                id,
                &WebhookRequest {
                    service: service.to_string(),
                    path: path.to_string(),
                    method: method.to_string(),
                    headers: BTreeMap::from([(
                        "content-type".to_string(),
                        "application/json".to_string(),
                    )]),
                    body: if body.is_null() {
                        String::new()
                    } else {
                        body.to_string()
                    },
                },
            )
            .await
            .map_err(|err| format!("asking {service} for {method} {path}: {err}"))?;
        let answer = serde_json::from_str(&delivery.body).map_err(|err| {
            format!(
                "{service} answered {method} {path} with {}: {err}: {}",
                delivery.status, delivery.body
            )
        })?;
        Ok((delivery.status, answer))
    }

    /// Takes down every environment of the run, by label.
    pub async fn teardown(&self) -> Vec<String> {
        let ids: Vec<EnvironmentId> = self.brought_up.lock().await.values().cloned().collect();
        let mut failures = Vec::new();
        for id in ids {
            if let Err(err) = self.down(&id).await {
                failures.push(format!("{id}: {err}"));
            }
        }
        failures
    }
}
