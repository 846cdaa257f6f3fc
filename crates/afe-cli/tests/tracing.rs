//! Traces end to end: `afe run --local` with a Runtime whose tracer is an OTLP receiver the test
//! starts (requiring Basic auth, as Langfuse does). Every ticket, node, model call and tool call
//! arrives as a span, decoded with the protocol's own types, parented as they ran, with token
//! counts and cost; no prompt text and no key unless the Runtime asks for prompts.

mod tickets;

use std::path::Path;

use afe_testkit::{ModelServer, OtlpReceiver};
use tickets::*;

/// "user:pass" in Basic auth; the variable holds it as OTEL_EXPORTER_OTLP_HEADERS writes it.
const AUTH: &str = "Basic dXNlcjpwYXNz";
const HEADERS: &str = "Authorization=Basic%20dXNlcjpwYXNz";

fn runtime(dir: &Path, receiver: &OtlpReceiver, capture: bool) {
    std::fs::write(
        dir.join("runtime.yaml"),
        format!(
            "apiVersion: afe.dev/v1alpha1\nkind: Runtime\nspec:\n  tracer: {{otlp: {{endpoint: \"{}\", headersEnv: OTEL_HEADERS, capturePrompts: {capture}}}}}\n",
            receiver.endpoint()
        ),
    )
    .unwrap();
}

/// Flow `fix` run to done against the scripted model, traced to `receiver`; the model server and
/// the ticket.
async fn traced_run(receiver: &OtlpReceiver, capture: bool) -> (ModelServer, String) {
    let dir = afe_testkit::scratch("afe-tracing");
    let model = ModelServer::start(the_whole_script()).await;
    agents_config(&dir, &model, None);
    runtime(&dir, receiver, capture);
    let (_git, input) = repository(&dir).await;
    let (status, events, log) = run_flow(
        &dir,
        &input,
        "fix",
        &afe_testkit::sqlite_url(&dir),
        &[("SCRIPTED_KEY", KEY), ("OTEL_HEADERS", HEADERS)],
    );
    assert_eq!(status, Some(0), "{events:#?}\n{log}");
    let ticket = events[0]["ticket"].as_str().unwrap().to_string();
    (model, ticket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_its_nodes_model_calls_and_tool_calls_arrive_as_spans_without_prompts() {
    let receiver = OtlpReceiver::start("authorization", AUTH).await;
    let (model, ticket) = traced_run(&receiver, false).await;
    let received = receiver.received.lock().unwrap();
    assert_eq!(received.refused, 0);
    let named = |name: &str| -> Vec<&afe_testkit::otlp_receiver::ReceivedSpan> {
        received.spans.iter().filter(|s| s.name == name).collect()
    };
    let tickets = named("afe.ticket");
    assert_eq!(tickets.len(), 1);
    assert_eq!(tickets[0].attributes["afe.ticket"], ticket);
    assert_eq!(tickets[0].attributes["afe.flow"], "fix");
    let nodes: Vec<&str> = named("afe.node")
        .iter()
        .map(|s| s.attributes["afe.node"].as_str())
        .collect();
    assert_eq!(nodes.len(), 5, "{nodes:?}");
    for node in ["clone", "plan", "fix", "test", "push"] {
        assert!(nodes.contains(&node), "{node} in {nodes:?}");
    }
    // Every node is a child of the ticket, every call and tool call a child of a node, all in one
    // trace.
    let trace = &tickets[0].trace_id;
    assert!(received.spans.iter().all(|s| &s.trace_id == trace));
    assert!(
        named("afe.node")
            .iter()
            .all(|s| s.parent_span_id == tickets[0].span_id)
    );
    let node_ids: Vec<&Vec<u8>> = named("afe.node").iter().map(|s| &s.span_id).collect();
    let calls = named("afe.model_call");
    assert_eq!(calls.len(), model.answered());
    assert!(calls.iter().all(|c| node_ids.contains(&&c.parent_span_id)));
    // Tokens and cost, as the provider reported them: 100 in, 20 out per scripted answer, and
    // the ledger's cost.
    let cost: i64 = calls
        .iter()
        .map(|c| c.attributes["afe.cost_usd_micros"].parse::<i64>().unwrap())
        .sum();
    assert_eq!(cost, 15_000);
    assert!(
        calls
            .iter()
            .all(|c| c.attributes["gen_ai.usage.input_tokens"] == "100")
    );
    assert!(
        calls
            .iter()
            .all(|c| c.attributes["gen_ai.request.model"] == "test/model")
    );
    let tools: Vec<&str> = named("afe.tool_call")
        .iter()
        .map(|s| s.attributes["afe.tool"].as_str())
        .collect();
    assert_eq!(tools, ["ws.read", "ws.write", "ws.exec", "ws.test"]);
    assert!(
        calls
            .iter()
            .all(|c| !c.attributes.contains_key("gen_ai.prompt"))
    );
    // Nothing of the prompts (the planner's words), and not the key, anywhere in what arrived.
    for body in &received.bodies {
        let text = String::from_utf8_lossy(body);
        assert!(!text.contains("Plan how to fix"), "a prompt in the trace");
        assert!(!text.contains(KEY), "the key in the trace");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_asks_for_prompts_gets_them_and_a_wrong_header_gets_nothing_in() {
    let receiver = OtlpReceiver::start("authorization", AUTH).await;
    traced_run(&receiver, true).await;
    {
        let received = receiver.received.lock().unwrap();
        let first = received
            .spans
            .iter()
            .find(|s| s.name == "afe.model_call")
            .unwrap();
        assert!(
            first.attributes["gen_ai.prompt"].contains("Plan how to fix"),
            "{first:?}"
        );
        assert!(first.attributes.contains_key("gen_ai.completion"));
    }

    // The positive control's mirror: the same run with the wrong header exports, and the receiver
    // refuses every export — the run itself is not held up by its tracer.
    let refusing = OtlpReceiver::start("authorization", "Basic other").await;
    traced_run(&refusing, false).await;
    let received = refusing.received.lock().unwrap();
    assert!(received.refused > 0);
    assert!(received.spans.is_empty());
}
