//! The HTTP side of a model call: one POST to `<base>/chat/completions`, the answer read as it
//! streams. Errors before the stream are mapped by status; a call is tried again only when the
//! provider cannot have charged for it (it refused with 429, failed with a 5xx before answering, or
//! was not reached), at most `retries` times. The generation id is handed out as soon as it is
//! known — from OpenRouter's `X-Generation-Id` header, or the first chunk — so a caller can keep it
//! with its reservation before the answer is whole.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::chat::{Assembler, ChatRequest, ChatResponse};
use crate::error::ModelError;
use crate::sse::SseDecoder;

/// Where a model is and how to be let in. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The provider's name, in errors.
    pub provider: String,
    /// The API's base, without the trailing `/chat/completions`.
    pub base_url: String,
    pub key: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("key", &self.key.as_ref().map(|_| "(hidden)"))
            .finish()
    }
}

/// The base URL of a provider the engine knows; others need the agent's `baseUrl`.
pub fn default_base_url(provider: &str) -> Option<&'static str> {
    match provider {
        "openrouter" => Some("https://openrouter.ai/api/v1"),
        "openai" => Some("https://api.openai.com/v1"),
        _ => None,
    }
}

/// Bounds of a call.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// How many times a call that cannot have been charged is tried again.
    pub retries: u32,
    /// The pause before a retry when the provider named none (doubled each time).
    pub backoff: Duration,
    /// The longest pause a provider's `Retry-After` is waited.
    pub max_retry_after: Duration,
    /// How long the answer's head and then each piece of it may take.
    pub idle_timeout: Duration,
}

impl Default for ClientSettings {
    fn default() -> ClientSettings {
        ClientSettings {
            retries: 3,
            backoff: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// Calls models; one per worker, its connections pooled.
#[derive(Clone, Debug)]
pub struct ModelClient {
    http: Client<Connector, Full<Bytes>>,
    settings: ClientSettings,
}

/// The longest error answer kept.
const ERROR_BODY: usize = 16 << 10;

impl ModelClient {
    /// A client that trusts the machine's certificate authorities.
    pub fn new(settings: ClientSettings) -> std::io::Result<ModelClient> {
        let mut http = HttpConnector::new();
        // A request's head and body go out at once, not 40 ms apart behind the peer's delayed
        // acknowledgement (Nagle's algorithm): every turn of a tool loop pays it otherwise.
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(ModelClient {
            http: Client::builder(TokioExecutor::new()).build(connector),
            settings,
        })
    }

    /// One call, tried again while it cannot have been charged; `on_generation` hears the
    /// generation id once.
    pub async fn chat(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
        on_generation: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatResponse, ModelError> {
        let mut attempt = 0;
        loop {
            match self.once(endpoint, request, on_generation).await {
                Err(err) if err.retryable() && attempt < self.settings.retries => {
                    let pause = match &err {
                        ModelError::RateLimited {
                            retry_after: Some(after),
                            ..
                        } => (*after).min(self.settings.max_retry_after),
                        _ => self.settings.backoff * 2u32.saturating_pow(attempt),
                    };
                    tracing::info!(error = %err, ?pause, "model call not charged; trying again");
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                }
                other => return other,
            }
        }
    }

    async fn once(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
        on_generation: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatResponse, ModelError> {
        let provider = endpoint.provider.clone();
        let url = format!(
            "{}/chat/completions",
            endpoint.base_url.trim_end_matches('/')
        );
        let unreachable = |detail: String| ModelError::Unreachable {
            provider: provider.clone(),
            url: url.clone(),
            detail,
        };
        let body = serde_json::to_vec(&request.body()).map_err(|e| unreachable(e.to_string()))?;
        let mut builder = Request::post(&url)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "text/event-stream")
            .header(hyper::header::USER_AGENT, "afe")
            .header("X-Title", "afe");
        if let Some(key) = &endpoint.key {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let http_request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| unreachable(e.to_string()))?;
        let timeout = self.settings.idle_timeout;
        let timed_out = || ModelError::Timeout {
            provider: provider.clone(),
            waited: timeout,
        };
        let response = match tokio::time::timeout(timeout, self.http.request(http_request)).await {
            Err(_) => return Err(timed_out()),
            // A connection that could not be made sent nothing; one cut after the request
            // went out may have been answered: only the first is retried.
            Ok(Err(err)) if err.is_connect() => return Err(unreachable(err.to_string())),
            Ok(Err(err)) => {
                return Err(ModelError::Malformed {
                    provider: provider.clone(),
                    detail: format!("the connection failed: {err}"),
                });
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after = header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let generation_header = header("x-generation-id");
        let mut body = response.into_body();
        if status != 200 {
            let mut text = Vec::new();
            while let Ok(Some(Ok(frame))) = tokio::time::timeout(timeout, body.frame()).await {
                if let Some(data) = frame.data_ref() {
                    text.extend_from_slice(data);
                }
                if text.len() > ERROR_BODY {
                    break;
                }
            }
            return Err(status_error(&provider, status, retry_after, &text));
        }
        let mut told = false;
        if let Some(id) = &generation_header {
            on_generation(id);
            told = true;
        }
        let mut decoder = SseDecoder::default();
        let mut assembler = Assembler::new(&provider);
        loop {
            let frame = match tokio::time::timeout(timeout, body.frame()).await {
                Err(_) => return Err(timed_out()),
                Ok(None) => break,
                Ok(Some(Err(err))) => {
                    return Err(ModelError::Malformed {
                        provider: provider.clone(),
                        detail: format!("the answer was cut: {err}"),
                    });
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Some(data) = frame.data_ref() else {
                continue;
            };
            for event in decoder.push(data) {
                assembler.event(&event)?;
                if !told && let Some(id) = assembler.generation() {
                    on_generation(id);
                    told = true;
                }
            }
        }
        for event in decoder.finish() {
            assembler.event(&event)?;
        }
        let mut answer = assembler.finish()?;
        if answer.generation.is_none() {
            answer.generation = generation_header;
        }
        Ok(answer)
    }
}

impl ModelClient {
    /// What the provider reports a generation cost (OpenRouter's `GET /generation?id=`): how a
    /// call cut between its sending and its settling is settled later. `None` when the provider
    /// does not know it (yet) or has no such lookup.
    pub async fn generation_cost(
        &self,
        endpoint: &Endpoint,
        generation: &str,
    ) -> Result<Option<crate::Usage>, ModelError> {
        let url = format!(
            "{}/generation?id={}",
            endpoint.base_url.trim_end_matches('/'),
            generation
                .bytes()
                .map(|b| if b.is_ascii_alphanumeric() || b"-_.".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                })
                .collect::<String>()
        );
        let mut builder = Request::get(&url).header(hyper::header::USER_AGENT, "afe");
        if let Some(key) = &endpoint.key {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let unreachable = |detail: String| ModelError::Unreachable {
            provider: endpoint.provider.clone(),
            url: url.clone(),
            detail,
        };
        let request = builder
            .body(Full::new(Bytes::new()))
            .map_err(|e| unreachable(e.to_string()))?;
        let response = tokio::time::timeout(self.settings.idle_timeout, self.http.request(request))
            .await
            .map_err(|_| unreachable("no answer".to_string()))?
            .map_err(|e| unreachable(e.to_string()))?;
        if response.status().as_u16() != 200 {
            return Ok(None);
        }
        let body = tokio::time::timeout(self.settings.idle_timeout, response.into_body().collect())
            .await
            .map_err(|_| unreachable("no answer".to_string()))?
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        let data: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let data = &data["data"];
        let Some(cost) = data.get("total_cost").and_then(Value::as_f64) else {
            return Ok(None);
        };
        let count = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
        Ok(Some(crate::Usage {
            prompt_tokens: count("tokens_prompt"),
            completion_tokens: count("tokens_completion"),
            cost_usd: Some(cost),
        }))
    }
}

/// An answer that is not 200, as the error it is; the provider's own message when its body has
/// one (`{"error": {"message": ...}}`).
pub fn status_error(
    provider: &str,
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
) -> ModelError {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| {
            String::from_utf8_lossy(body)
                .trim()
                .chars()
                .take(500)
                .collect()
        });
    let provider = provider.to_string();
    match status {
        401 | 403 => ModelError::Refused {
            provider,
            status,
            message,
        },
        402 => ModelError::PaymentRequired { provider, message },
        429 => ModelError::RateLimited {
            provider,
            retry_after,
            message,
        },
        500..=599 => ModelError::Unavailable {
            provider,
            status,
            message,
        },
        _ => ModelError::Rejected {
            provider,
            status,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_their_causes_with_the_providers_words() {
        let body = br#"{"error": {"message": "no credits left", "code": 402}}"#;
        assert!(matches!(
            status_error("openrouter", 402, None, body),
            ModelError::PaymentRequired { message, .. } if message == "no credits left"
        ));
        assert!(matches!(
            status_error("p", 429, Some(Duration::from_secs(3)), b""),
            ModelError::RateLimited { retry_after: Some(d), .. } if d.as_secs() == 3
        ));
        assert_eq!(status_error("p", 401, None, b"x").code(), "AFE-MOD-002");
        assert_eq!(status_error("p", 503, None, b"x").code(), "AFE-MOD-006");
        assert_eq!(status_error("p", 400, None, b"x").code(), "AFE-MOD-005");
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let endpoint = Endpoint {
            provider: "openrouter".into(),
            base_url: "https://openrouter.ai/api/v1".into(),
            key: Some("sk-or-secret".into()),
        };
        assert!(!format!("{endpoint:?}").contains("sk-or-secret"));
        assert_eq!(
            default_base_url("openrouter"),
            Some("https://openrouter.ai/api/v1")
        );
        assert_eq!(default_base_url("local"), None);
    }
}
