//! The `agent` node: one model call of the named Agent, its prompt rendered from the node's
//! context; with an `output` Schema, a structured answer (`response_format: json_schema`) checked
//! against it, asked again at most the Agent's `answerRetries` times ([`ANSWER_RETRIES`] unless it says) — with the checker's words — when it
//! does not match. Every answer is journaled with its settlement the moment it arrives, so an
//! attempt after a crash reuses it instead of paying for it again.

use afe_config::kinds::AgentSpec;
use afe_model::{ChatRequest, ChatResponse, Message, ModelClient, Role};
use afe_store::Settlement;
use afe_worker::{NodeCall, NodeResult};
use serde_json::{Value, json};

use crate::call::{Model, endpoint, schema_format};
use crate::error::NodeFailure;
use crate::{money, prompt};

/// How many times an answer that does not match the Schema is asked for again, unless the Agent
/// says (`answerRetries`).
pub const ANSWER_RETRIES: u32 = 2;

/// The agent `name` of the ticket's revision.
pub fn agent_spec(call: &NodeCall, name: &str) -> Result<AgentSpec, NodeFailure> {
    let found = call
        .revision
        .pointer(&format!("/agents/{name}"))
        .ok_or_else(|| NodeFailure::Revision(format!("the revision has no agent {name:?}")))?;
    serde_json::from_value(found.clone())
        .map_err(|e| NodeFailure::Revision(format!("agent {name:?}: {e}")))
}

/// The JSON Schema named `schema` in the ticket's revision.
pub fn schema(call: &NodeCall, name: &str) -> Result<Value, NodeFailure> {
    call.revision
        .pointer(&format!("/schemas/{name}/schema"))
        .cloned()
        .ok_or_else(|| NodeFailure::Revision(format!("the revision has no Schema {name:?}")))
}

/// The agent's model as a node calls it.
pub fn model_of<'a>(client: &'a ModelClient, spec: &AgentSpec) -> Result<Model<'a>, NodeFailure> {
    Ok(Model {
        client,
        endpoint: endpoint(&spec.model, |name| std::env::var(name).ok())?,
        name: spec.model.name.clone(),
        price: spec.model.price.clone(),
        max_tokens: spec.model.max_tokens,
        temperature: spec.model.temperature,
        schema_format: schema_format(&spec.model),
    })
}

/// The agent's system message: its prompt, rendered from the node's context.
pub fn system_prompt(call: &NodeCall, name: &str, spec: &AgentSpec) -> Result<String, NodeFailure> {
    prompt::render(spec.prompt.as_deref().unwrap_or_default(), &call.context).map_err(|missing| {
        NodeFailure::PromptValues {
            agent: name.to_string(),
            missing,
        }
    })
}

/// The `model.turn` event of an answer: what it cost and asked for, never its text.
fn turn_event(node: &str, turn: i64, answer: &ChatResponse, settlement: &Settlement) -> Value {
    json!({
        "node": node,
        "turn": turn,
        "generation": answer.generation,
        "finish_reason": answer.finish_reason,
        "tool_calls": answer.tool_calls.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        "tokens_in": settlement.tokens_in,
        "tokens_out": settlement.tokens_out,
        "usd_micros": settlement.usd_micros,
    })
}

/// Turn `turn` of a node, paid: the model's settings on `request`, the agent's budget checked,
/// the call made, and its answer journaled with its settlement and its `model.turn` event.
pub async fn paid_turn(
    call: &NodeCall,
    spec: &AgentSpec,
    model: &Model<'_>,
    turn: i64,
    mut request: ChatRequest,
) -> Result<ChatResponse, NodeFailure> {
    request.max_tokens = model.max_tokens;
    request.temperature = model.temperature;
    check_agent_budget(call, spec, model, &request).await?;
    let (answer, settlement) = model.call(&call.wallet, &request).await?;
    call.wallet
        .save_turn(
            turn,
            &json!({"answer": answer}),
            std::slice::from_ref(&settlement),
            (
                "model.turn",
                turn_event(&call.node.id, turn, &answer, &settlement),
            ),
        )
        .await?;
    Ok(answer)
}

/// Stops before a call that could take this node past its agent's `budget.usd`: what the node
/// spent or holds so far, plus what the call would reserve.
async fn check_agent_budget(
    call: &NodeCall,
    spec: &AgentSpec,
    model: &Model<'_>,
    request: &ChatRequest,
) -> Result<(), NodeFailure> {
    let Some(usd) = spec.budget.as_ref().and_then(|b| b.usd) else {
        return Ok(());
    };
    let limit = afe_store::usd_to_micros(usd);
    let spent: i64 = call
        .wallet
        .ledger()
        .await?
        .iter()
        .filter(|entry| entry.node == call.node.id)
        .map(|entry| match entry.state {
            afe_store::LedgerState::Settled => entry.settled_micros.unwrap_or(0),
            afe_store::LedgerState::Reserved => entry.reserved_micros,
            afe_store::LedgerState::Released => 0,
        })
        .sum();
    let next = money::estimate(
        model.price.as_ref(),
        request.body().to_string().len(),
        request.max_tokens,
    );
    if spent + next > limit {
        return Err(NodeFailure::AgentBudget(format!(
            "node {} has spent {spent} micro-dollars of its agent's {limit}, and its next call would reserve {next}",
            call.node.id
        )));
    }
    Ok(())
}

/// An answer checked against `schema`: the value, or what the checker says is wrong.
fn checked(content: &str, schema: Option<&Value>) -> Result<Value, String> {
    let Some(schema) = schema else {
        return Ok(json!({"text": content}));
    };
    let value: Value = serde_json::from_str(content.trim())
        .map_err(|e| format!("the answer is not JSON ({e})"))?;
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the Schema does not compile: {e}"))?;
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .map(|error| {
            let at = error.instance_path().to_string();
            format!(
                "{}: {error}",
                if at.is_empty() { "the answer" } else { &at }
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(problems.join("; "))
    }
}

/// Runs the node.
pub async fn run(
    client: &ModelClient,
    call: &NodeCall,
    name: &str,
) -> Result<NodeResult, NodeFailure> {
    let spec = agent_spec(call, name)?;
    let model = model_of(client, &spec)?;
    if call.attempt > 1 {
        model.settle_earlier_attempts(&call.wallet).await?;
    }
    let output_schema = match &call.node.output {
        Some(output) => Some((output.clone(), schema(call, output)?)),
        None => None,
    };
    let mut messages = vec![
        Message::text(Role::System, system_prompt(call, name, &spec)?),
        Message::text(
            Role::User,
            format!(
                "The ticket's input and the outputs of the nodes before this one:\n{}",
                call.context
            ),
        ),
    ];
    let journaled = call.wallet.turns().await?;
    let mut last_problem = String::new();
    let retries = spec.answer_retries.unwrap_or(ANSWER_RETRIES);
    for turn in 0..=i64::from(retries) {
        let earlier = journaled
            .iter()
            .find(|t| t.turn == turn)
            .and_then(|t| serde_json::from_value::<ChatResponse>(t.payload["answer"].clone()).ok());
        let answer = match earlier {
            Some(answer) => answer,
            None => {
                let mut request = ChatRequest::new(&model.name, messages.clone());
                request.response_schema = output_schema.clone();
                request.schema_format = model.schema_format;
                paid_turn(call, &spec, &model, turn, request).await?
            }
        };
        match checked(&answer.content, output_schema.as_ref().map(|(_, s)| s)) {
            Ok(output) => {
                return Ok(NodeResult {
                    output,
                    ..NodeResult::default()
                });
            }
            Err(problem) => {
                messages.push(Message::text(Role::Assistant, answer.content.clone()));
                messages.push(Message::text(
                    Role::User,
                    format!(
                        "That answer does not match the required Schema: {problem}. Answer again with JSON that matches it."
                    ),
                ));
                last_problem = problem;
            }
        }
    }
    Err(NodeFailure::InvalidAnswer(format!(
        "after {} answers the model's answer still does not match Schema {}: {last_problem}",
        retries + 1,
        output_schema.map(|(name, _)| name).unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_against_the_schema_with_places() {
        let schema = json!({"type": "object", "properties": {"risk": {"type": "integer", "maximum": 5}},
            "required": ["risk"], "additionalProperties": false});
        assert_eq!(
            checked(" {\"risk\": 2} ", Some(&schema)),
            Ok(json!({"risk": 2}))
        );
        let wrong = checked("{\"risk\": 9}", Some(&schema)).unwrap_err();
        assert!(wrong.starts_with("/risk: "), "{wrong}");
        assert!(
            checked("no json", Some(&schema))
                .unwrap_err()
                .contains("not JSON")
        );
        assert_eq!(checked("free text", None), Ok(json!({"text": "free text"})));
    }
}
