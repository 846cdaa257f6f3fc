//! One paid model call as the money rules want it (AFE.md, "Money"): reserved against the
//! ticket's budget before it is sent (a reservation that does not fit stops the ticket, and the
//! call is never sent); the provider's generation id kept with the reservation the moment the call
//! has one; settled after with what the provider reported. An answer that failed after it began is
//! settled with what the provider reports for its generation, looked up at once (or left reserved,
//! counted, when it cannot say yet); a call the provider cannot have charged for is settled at
//! nothing. A node resumed after a crash first settles its earlier attempts' calls the same way.

use std::sync::atomic::{AtomicBool, Ordering};

use afe_config::kinds::{Model as ModelConfig, Price, StructuredOutput};
use afe_model::{
    ChatRequest, ChatResponse, Endpoint, ModelClient, ModelError, SchemaFormat, Usage,
};
use afe_store::{LedgerState, Settlement};
use afe_worker::Wallet;
use tracing::Instrument;

use crate::error::NodeFailure;
use crate::money;

/// Whether model-call spans carry the prompt and the answer's text: off unless the Runtime's
/// tracer asks (`capturePrompts`). Process-wide, as the tracer is.
static CAPTURE_PROMPTS: AtomicBool = AtomicBool::new(false);

/// Puts the prompt and the answer's text into model-call spans from now on.
pub fn capture_prompts(on: bool) {
    CAPTURE_PROMPTS.store(on, Ordering::Relaxed);
}

/// A model as a node calls it.
#[derive(Clone, Debug)]
pub struct Model<'a> {
    pub client: &'a ModelClient,
    pub endpoint: Endpoint,
    pub name: String,
    pub price: Option<Price>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub schema_format: SchemaFormat,
}

/// Where an agent's model is, its key read by name from the worker's environment (`lookup`).
pub fn endpoint(
    model: &ModelConfig,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Endpoint, ModelError> {
    let base_url = match &model.base_url {
        Some(base) => base.clone(),
        None => afe_model::client::default_base_url(&model.provider)
            .ok_or_else(|| ModelError::NoEndpoint {
                provider: model.provider.clone(),
            })?
            .to_string(),
    };
    // On Kubernetes the operator projects the Secret's key as a variable of that name.
    let variable = model.api_key_env.clone().or_else(|| {
        model
            .api_key_ref
            .as_ref()
            .map(|r| r.key.clone().unwrap_or_else(|| r.name.clone()))
    });
    let key = match variable {
        Some(variable) => Some(lookup(&variable).ok_or(ModelError::NoKey { variable })?),
        None => None,
    };
    Ok(Endpoint {
        provider: model.provider.clone(),
        base_url,
        key,
    })
}

/// The request shape the model's `structuredOutput` names.
pub fn schema_format(model: &ModelConfig) -> SchemaFormat {
    match model.structured_output {
        StructuredOutput::JsonSchema => SchemaFormat::JsonSchema,
        StructuredOutput::JsonObject => SchemaFormat::JsonObject,
    }
}

impl Model<'_> {
    fn settle_reported(
        &self,
        reservation: i64,
        reserved: i64,
        usage: Option<&Usage>,
    ) -> Settlement {
        money::settlement(reservation, reserved, self.price.as_ref(), usage)
    }

    /// One call: the answer, and the settlement to commit with the turn that keeps it. The call
    /// is a span (`afe.model_call`, GenAI attributes: the model, tokens, cost, the generation);
    /// the prompt and the answer's text are in it only when [`capture_prompts`] was asked for.
    pub async fn call(
        &self,
        wallet: &Wallet,
        request: &ChatRequest,
    ) -> Result<(ChatResponse, Settlement), NodeFailure> {
        let span = tracing::info_span!(
            target: "afe",
            "afe.model_call",
            gen_ai.system = %self.endpoint.provider,
            gen_ai.request.model = %self.name,
            gen_ai.response.id = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            afe.cost_usd_micros = tracing::field::Empty,
            afe.error = tracing::field::Empty,
            gen_ai.prompt = tracing::field::Empty,
            gen_ai.completion = tracing::field::Empty,
        );
        if CAPTURE_PROMPTS.load(Ordering::Relaxed) {
            span.record("gen_ai.prompt", request.body()["messages"].to_string());
        }
        let result = self
            .paid_call(wallet, request)
            .instrument(span.clone())
            .await;
        match &result {
            Ok((answer, settlement)) => {
                if let Some(generation) = &answer.generation {
                    span.record("gen_ai.response.id", generation.as_str());
                }
                if let Some(reason) = &answer.finish_reason {
                    span.record("gen_ai.response.finish_reasons", reason.as_str());
                }
                span.record("gen_ai.usage.input_tokens", settlement.tokens_in);
                span.record("gen_ai.usage.output_tokens", settlement.tokens_out);
                span.record("afe.cost_usd_micros", settlement.usd_micros);
                if CAPTURE_PROMPTS.load(Ordering::Relaxed) {
                    span.record("gen_ai.completion", answer.content.as_str());
                }
            }
            Err(err) => {
                span.record("afe.error", err.code());
            }
        }
        result
    }

    async fn paid_call(
        &self,
        wallet: &Wallet,
        request: &ChatRequest,
    ) -> Result<(ChatResponse, Settlement), NodeFailure> {
        let size = request.body().to_string().len();
        let reserved = money::estimate(self.price.as_ref(), size, request.max_tokens);
        let reservation = wallet.reserve(&self.endpoint.provider, reserved).await?;
        let (told, heard) = tokio::sync::oneshot::channel::<String>();
        let mut told = Some(told);
        let keep = async {
            match heard.await {
                Ok(generation) => wallet
                    .note_generation(reservation.id, &generation)
                    .await
                    .map(|()| Some(generation)),
                Err(_) => Ok(None),
            }
        };
        let mut tell = move |generation: &str| {
            if let Some(told) = told.take() {
                let _ = told.send(generation.to_string());
            }
        };
        let chatting = async {
            let answer = self.client.chat(&self.endpoint, request, &mut tell).await;
            // A call that never had a generation closes the channel: `keep` ends too.
            drop(tell);
            answer
        };
        let (answer, kept) = tokio::join!(chatting, keep);
        let generation = kept?;
        match answer {
            Ok(answer) => {
                let settlement =
                    self.settle_reported(reservation.id, reserved, answer.usage.as_ref());
                Ok((answer, settlement))
            }
            Err(err) => {
                let settlement = if !err.may_have_charged() {
                    Some(Settlement {
                        reservation: reservation.id,
                        usd_micros: 0,
                        tokens_in: 0,
                        tokens_out: 0,
                    })
                } else {
                    match &generation {
                        Some(generation) => self
                            .client
                            .generation_cost(&self.endpoint, generation)
                            .await
                            .ok()
                            .flatten()
                            .map(|usage| {
                                self.settle_reported(reservation.id, reserved, Some(&usage))
                            }),
                        None => None,
                    }
                };
                if let Some(settlement) = settlement {
                    wallet.settle(std::slice::from_ref(&settlement)).await?;
                }
                Err(err.into())
            }
        }
    }

    /// Settles what earlier attempts of this node reserved for calls that reached the provider
    /// and never settled (their worker died between sending and settling), with what the provider
    /// reports for each generation. One it cannot report yet stays reserved, counted.
    pub async fn settle_earlier_attempts(&self, wallet: &Wallet) -> Result<(), NodeFailure> {
        let open: Vec<_> = wallet
            .ledger()
            .await?
            .into_iter()
            .filter(|entry| entry.node == wallet.node() && entry.state == LedgerState::Reserved)
            .collect();
        for entry in open {
            let Some(generation) = &entry.generation else {
                continue;
            };
            if let Ok(Some(usage)) = self
                .client
                .generation_cost(&self.endpoint, generation)
                .await
            {
                let settlement =
                    self.settle_reported(entry.id, entry.reserved_micros, Some(&usage));
                wallet.settle(&[settlement]).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(json: serde_json::Value) -> ModelConfig {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_endpoint_is_the_providers_or_the_agents_and_its_key_is_read_by_name() {
        let env = |name: &str| (name == "OPENROUTER_API_KEY").then(|| "sk-or-1".to_string());
        let openrouter = endpoint(
            &model(serde_json::json!({"provider": "openrouter", "name": "m", "apiKeyEnv": "OPENROUTER_API_KEY"})),
            env,
        )
        .unwrap();
        assert_eq!(openrouter.base_url, "https://openrouter.ai/api/v1");
        assert_eq!(openrouter.key.as_deref(), Some("sk-or-1"));
        let by_ref = endpoint(
            &model(serde_json::json!({"provider": "openrouter", "name": "m", "apiKeyRef": {"name": "afe-secrets", "key": "OPENROUTER_API_KEY"}})),
            env,
        )
        .unwrap();
        assert_eq!(by_ref.key.as_deref(), Some("sk-or-1"));
        let local = endpoint(
            &model(serde_json::json!({"provider": "local", "name": "m", "baseUrl": "http://127.0.0.1:8080/v1"})),
            env,
        )
        .unwrap();
        assert_eq!(
            (local.base_url.as_str(), local.key),
            ("http://127.0.0.1:8080/v1", None)
        );
        assert_eq!(
            endpoint(
                &model(serde_json::json!({"provider": "local", "name": "m"})),
                env
            )
            .unwrap_err()
            .code(),
            "AFE-MOD-011"
        );
        assert_eq!(
            endpoint(
                &model(
                    serde_json::json!({"provider": "openai", "name": "m", "apiKeyEnv": "MISSING"})
                ),
                env
            )
            .unwrap_err()
            .code(),
            "AFE-MOD-001"
        );
    }
}
