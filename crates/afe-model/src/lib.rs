//! afe's model calls (AFE.md, "Models"): OpenAI-compatible chat completions — OpenRouter, OpenAI,
//! any local server — always streamed.
//!
//! - [`sse`]: server-sent events out of bytes cut anywhere.
//! - [`chat`]: the request as the wire takes it; the answer assembled from its chunks.
//! - [`client`]: the HTTP call, its errors by status, retries only where nothing can have been
//!   charged, the generation id handed out as soon as it is known.
//! - [`error`]: the causes, each with its code and whether the provider can have charged.

pub mod chat;
pub mod client;
pub mod error;
pub mod sse;

pub use chat::{
    ChatRequest, ChatResponse, Message, Role, SchemaFormat, ToolCall, ToolChoice, ToolSpec, Usage,
};
pub use client::{ClientSettings, Endpoint, ModelClient};
pub use error::ModelError;
