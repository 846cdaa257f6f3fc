//! The client against a server nobody here wrote: llama.cpp's OpenAI-compatible server serving
//! SmolLM2-135M-Instruct on the CPU (`afe_testkit::RealModelServer`). A few calls only — each takes
//! a second or so on two cores: a streamed text answer, a structured answer held to its schema, a
//! forced tool call assembled from the server's own fragments, and a wrong key refused.

use std::time::Duration;

use afe_model::{
    ChatRequest, ClientSettings, Endpoint, Message, ModelClient, ModelError, Role, SchemaFormat,
    ToolChoice, ToolSpec,
};
use afe_testkit::RealModelServer;
use serde_json::{Value, json};

const KEY: &str = "sk-llama-3b81f0";

fn endpoint(server: &RealModelServer, key: &str) -> Endpoint {
    Endpoint {
        provider: "llama".into(),
        base_url: server.base_url(),
        key: Some(key.into()),
    }
}

fn client() -> ModelClient {
    ModelClient::new(ClientSettings {
        retries: 0,
        // The CPU may be busy with a build: the first token can be slow to come.
        idle_timeout: Duration::from_secs(300),
        ..ClientSettings::default()
    })
    .unwrap()
}

fn request(text: &str) -> ChatRequest {
    let mut request = ChatRequest::new(
        "smollm2",
        vec![
            Message::text(Role::System, "You are a helpful assistant. Answer briefly."),
            Message::text(Role::User, text),
        ],
    );
    request.max_tokens = Some(48);
    request.temperature = Some(0.0);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_speaks_to_a_real_openai_compatible_server() {
    let server = RealModelServer::start(KEY);
    let client = client();

    // A streamed answer: text, a finish reason, the server's completion id as the generation.
    let mut generations = Vec::new();
    let answer = client
        .chat(
            &endpoint(&server, KEY),
            &request("What is the capital of France?"),
            &mut |id| generations.push(id.to_string()),
        )
        .await
        .unwrap();
    assert!(!answer.content.trim().is_empty(), "{answer:?}");
    assert!(answer.finish_reason.is_some(), "{answer:?}");
    assert_eq!(generations.len(), 1, "{generations:?}");
    assert_eq!(answer.generation.as_deref(), Some(generations[0].as_str()));

    // Structured output as this server takes it: the answer is JSON that has the schema's fields.
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"], "additionalProperties": false});
    let mut structured = request("Name the capital of France as JSON.");
    structured.response_schema = Some(("capital".into(), schema));
    structured.schema_format = SchemaFormat::JsonObject;
    let answer = client
        .chat(&endpoint(&server, KEY), &structured, &mut |_| {})
        .await
        .unwrap();
    let value: Value = serde_json::from_str(&answer.content)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", answer.content));
    assert!(value["city"].is_string(), "{value}");

    // A forced tool call: this server repeats the call's id and name in every fragment; the
    // answer holds one call, named as asked, with arguments that are JSON.
    let mut forced = request("Read the README file.");
    forced.tools = vec![ToolSpec {
        name: "ws_read".into(),
        description: "Read a file of the repository.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}},
            "required": ["path"]}),
    }];
    forced.tool_choice = Some(ToolChoice::Named("ws_read".into()));
    let answer = client
        .chat(&endpoint(&server, KEY), &forced, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        answer.finish_reason.as_deref(),
        Some("tool_calls"),
        "{answer:?}"
    );
    assert_eq!(answer.tool_calls.len(), 1, "{answer:?}");
    assert_eq!(answer.tool_calls[0].name, "ws_read");
    let arguments: Value = serde_json::from_str(&answer.tool_calls[0].arguments).unwrap();
    assert!(arguments["path"].is_string(), "{arguments}");

    // A wrong key is refused before anything streams: AFE-MOD-002, and the key is not in it.
    let refused = client
        .chat(
            &endpoint(&server, "sk-wrong-77"),
            &request("hi"),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ModelError::Refused { status: 401, .. }),
        "{refused:?}"
    );
    assert!(!refused.to_string().contains("sk-wrong-77"), "{refused}");
}
