//! The model client against the scripted OpenAI-compatible server: answers cut at every byte,
//! tool-call fragments, usage and cost, every error before and inside the stream, and retries only
//! of calls that cannot have been charged — counted at the server.

use std::time::Duration;

use afe_model::{
    ChatRequest, ClientSettings, Endpoint, Message, ModelClient, ModelError, Role, ToolCall,
};
use afe_testkit::{Answer, ModelServer, Reply};
use serde_json::json;

fn client(idle: Duration) -> ModelClient {
    ModelClient::new(ClientSettings {
        retries: 2,
        backoff: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(1),
        idle_timeout: idle,
    })
    .unwrap()
}

fn endpoint(server: &ModelServer) -> Endpoint {
    Endpoint {
        provider: "scripted".into(),
        base_url: server.base_url(),
        key: Some("sk-test-4f1a".into()),
    }
}

fn request() -> ChatRequest {
    ChatRequest::new("test/model", vec![Message::text(Role::User, "fix the bug")])
}

async fn call(server: &ModelServer) -> (Result<afe_model::ChatResponse, ModelError>, Vec<String>) {
    let mut generations = Vec::new();
    let result = client(Duration::from_secs(30))
        .chat(&endpoint(server), &request(), &mut |id| {
            generations.push(id.to_string())
        })
        .await;
    (result, generations)
}

#[tokio::test]
async fn a_streamed_answer_with_tool_calls_is_assembled_at_any_cut() {
    for cut in [1, 7, 4096] {
        let mut answer = Answer::tools(
            &[
                ("ws.read", json!({"path": "src/lib.rs"})),
                ("ws.exec", json!({"argv": ["cargo", "test"]})),
            ],
            0.0123,
        );
        answer.content = "Reading first.".into();
        answer.cut_every = cut;
        let server = ModelServer::start(vec![Reply::Answer(answer)]).await;
        let (result, generations) = call(&server).await;
        let answer = result.unwrap();
        assert_eq!(answer.content, "Reading first.");
        assert_eq!(
            answer.tool_calls,
            [
                ToolCall {
                    id: "call_gen-1_0".into(),
                    name: "ws.read".into(),
                    arguments: json!({"path": "src/lib.rs"}).to_string()
                },
                ToolCall {
                    id: "call_gen-1_1".into(),
                    name: "ws.exec".into(),
                    arguments: json!({"argv": ["cargo", "test"]}).to_string()
                },
            ]
        );
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        let usage = answer.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (100, 20));
        assert_eq!(usage.cost_usd, Some(0.0123));
        assert_eq!(generations, ["gen-1"], "the generation is told once, first");
        let seen = server.seen.lock().unwrap();
        assert_eq!(seen.requests[0]["stream"], true);
        assert_eq!(seen.requests[0]["stream_options"]["include_usage"], true);
        assert_eq!(
            seen.authorizations[0].as_deref(),
            Some("Bearer sk-test-4f1a")
        );
    }
}

#[tokio::test]
async fn errors_before_the_stream_are_named_and_only_uncharged_ones_retried() {
    let status = |status: u16, message: &str| Reply::Status {
        status,
        body: json!({"error": {"message": message}}).to_string(),
        retry_after: None,
    };
    // Refused, payment, a bad request: never retried.
    for (reply, code) in [
        (status(401, "bad key"), "AFE-MOD-002"),
        (status(402, "no credits"), "AFE-MOD-003"),
        (status(400, "no such model"), "AFE-MOD-005"),
    ] {
        let server = ModelServer::start(vec![reply, Reply::Answer(Answer::text("x", 0.1))]).await;
        let (result, _) = call(&server).await;
        assert_eq!(result.unwrap_err().code(), code);
        assert_eq!(server.calls(), 1, "{code} is not retried");
    }
    // Rate limited with Retry-After, then answered: one retry, one answer.
    let server = ModelServer::start(vec![
        Reply::Status {
            status: 429,
            body: "{}".into(),
            retry_after: Some(0),
        },
        Reply::Answer(Answer::text("fine", 0.1)),
    ])
    .await;
    let (result, _) = call(&server).await;
    assert_eq!(result.unwrap().content, "fine");
    assert_eq!((server.calls(), server.answered()), (2, 1));
    // A provider that keeps failing before it answers: retried a bounded number of times.
    let server = ModelServer::start(vec![
        status(503, "down"),
        status(502, "down"),
        status(503, "down"),
        Reply::Answer(Answer::text("never reached", 0.1)),
    ])
    .await;
    let (result, _) = call(&server).await;
    assert_eq!(result.unwrap_err().code(), "AFE-MOD-006");
    assert_eq!(server.calls(), 3, "the first try and two retries");
}

#[tokio::test]
async fn what_fails_inside_a_begun_answer_is_not_retried() {
    let server = ModelServer::start(vec![
        Reply::ErrorInStream {
            partial: "half".into(),
            message: "upstream died".into(),
        },
        Reply::Answer(Answer::text("x", 0.1)),
    ])
    .await;
    let (result, generations) = call(&server).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, ModelError::InStream { message, .. } if message == "upstream died"),
        "{err}"
    );
    assert!(err.may_have_charged());
    assert_eq!(server.calls(), 1);
    assert_eq!(
        generations,
        ["gen-1"],
        "its generation was known: it can be settled"
    );

    let server = ModelServer::start(vec![Reply::Drop { after: 150 }]).await;
    let (result, _) = call(&server).await;
    assert_eq!(result.unwrap_err().code(), "AFE-MOD-008");
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn an_answer_that_stops_coming_times_out_and_a_closed_port_is_unreachable() {
    let mut held = Answer::text("slow", 0.1);
    held.hold = true;
    let server = ModelServer::start(vec![Reply::Answer(held)]).await;
    let err = client(Duration::from_millis(300))
        .chat(&endpoint(&server), &request(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), "AFE-MOD-010", "{err}");
    assert!(!err.retryable());
    assert_eq!(server.calls(), 1);

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = client(Duration::from_secs(5))
        .chat(
            &Endpoint {
                provider: "nowhere".into(),
                base_url: format!("http://{closed}/v1"),
                key: None,
            },
            &request(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "AFE-MOD-009", "{err}");
    assert!(!format!("{err}").contains("sk-"), "no key in any error");
}

#[tokio::test]
async fn a_generations_cost_is_looked_up_by_its_id() {
    let mut held = Answer::text("slow", 0.0375);
    held.hold = true;
    let server = ModelServer::start(vec![Reply::Answer(held)]).await;
    let mut generation = None;
    let err = client(Duration::from_millis(300))
        .chat(&endpoint(&server), &request(), &mut |id| {
            generation = Some(id.to_string())
        })
        .await
        .unwrap_err();
    assert!(err.may_have_charged());
    let generation = generation.expect("the generation was told before the answer stopped");
    let usage = client(Duration::from_secs(5))
        .generation_cost(&endpoint(&server), &generation)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(usage.cost_usd, Some(0.0375));
    assert_eq!(
        client(Duration::from_secs(5))
            .generation_cost(&endpoint(&server), "gen-unknown")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        server.seen.lock().unwrap().generation_lookups,
        [generation, "gen-unknown".to_string()]
    );
}
