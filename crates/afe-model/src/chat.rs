//! OpenAI-compatible chat completions as data: the request as the wire takes it (always streamed,
//! usage asked for in the last chunk), and the answer assembled from its chunks — text deltas
//! appended, tool-call fragments joined by index and parsed once the stream is finished, usage and
//! OpenRouter's `usage.cost` read from the chunk that carries them, an `error` inside the stream
//! an error. Pure: chunks in, an answer out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::ModelError;

/// Who says a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool the model asked to be called: its id (to answer it), name and arguments as the model
/// wrote them (JSON text; parsed by whoever runs the tool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// An assistant's calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A tool's answer: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn tool_result(call: &str, content: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call.to_string()),
        }
    }

    /// As the wire writes it: tool calls as `{id, type: function, function: {name, arguments}}`.
    fn wire(&self) -> Value {
        // Always a string, empty beside tool calls: llama.cpp's chat templates read every
        // message's content (a missing one ends the stream before its first chunk, `null` is
        // refused), and OpenAI takes an empty one.
        let mut message =
            json!({"role": self.role, "content": self.content.as_deref().unwrap_or("")});
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|call| {
                    json!({"id": call.id, "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments}})
                })
                .collect();
        }
        if let Some(id) = &self.tool_call_id {
            message["tool_call_id"] = json!(id);
        }
        message
    }
}

/// A tool offered to the model: a name, what it does, its parameters as a JSON Schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// Which tool the model must call, when it must.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    /// This one.
    Named(String),
}

/// How a structured answer's schema is asked for. OpenAI and OpenRouter take `json_schema`;
/// llama.cpp's server refuses it and takes the schema beside `json_object` instead, which it
/// turns into a grammar the answer cannot leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaFormat {
    JsonSchema,
    JsonObject,
}

/// A request.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: Option<ToolChoice>,
    /// Structured output: the answer's JSON Schema, by name.
    pub response_schema: Option<(String, Value)>,
    /// How the schema is put in `response_format`.
    pub schema_format: SchemaFormat,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
}

impl ChatRequest {
    pub fn new(model: &str, messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: model.to_string(),
            messages,
            tools: Vec::new(),
            tool_choice: None,
            response_schema: None,
            schema_format: SchemaFormat::JsonSchema,
            max_tokens: None,
            temperature: None,
        }
    }

    /// The body sent: streamed, with the usage in the last chunk (`stream_options.include_usage`,
    /// which OpenAI needs and OpenRouter accepts).
    pub fn body(&self) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": self.messages.iter().map(Message::wire).collect::<Vec<_>>(),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !self.tools.is_empty() {
            body["tools"] = self
                .tools
                .iter()
                .map(|tool| {
                    json!({"type": "function", "function": {
                        "name": tool.name, "description": tool.description, "parameters": tool.parameters}})
                })
                .collect();
        }
        match &self.tool_choice {
            Some(ToolChoice::Auto) => body["tool_choice"] = json!("auto"),
            Some(ToolChoice::Required) => body["tool_choice"] = json!("required"),
            Some(ToolChoice::Named(name)) => {
                body["tool_choice"] = json!({"type": "function", "function": {"name": name}})
            }
            None => {}
        }
        if let Some((name, schema)) = &self.response_schema {
            body["response_format"] = match self.schema_format {
                SchemaFormat::JsonSchema => json!({"type": "json_schema",
                    "json_schema": {"name": name, "strict": true, "schema": schema}}),
                SchemaFormat::JsonObject => json!({"type": "json_object", "schema": schema}),
            };
        }
        if let Some(max) = self.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if let Some(temperature) = self.temperature {
            body["temperature"] = json!(temperature);
        }
        body
    }
}

/// What a call used, as the provider reported it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// What it cost in US dollars, when the provider says (OpenRouter's `usage.cost`).
    pub cost_usd: Option<f64>,
}

/// The answer, assembled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The provider's id of this generation (OpenRouter settles a cost by it later).
    pub generation: Option<String>,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
}

/// Builds an answer from its chunks.
#[derive(Debug, Default)]
pub struct Assembler {
    provider: String,
    response: ChatResponse,
    /// Tool-call fragments by their index: id, name, arguments so far.
    calls: BTreeMap<u64, (String, String, String)>,
    done: bool,
}

impl Assembler {
    pub fn new(provider: &str) -> Assembler {
        Assembler {
            provider: provider.to_string(),
            ..Assembler::default()
        }
    }

    fn malformed(&self, detail: String) -> ModelError {
        ModelError::Malformed {
            provider: self.provider.clone(),
            detail,
        }
    }

    /// The generation id, once a chunk said it.
    pub fn generation(&self) -> Option<&str> {
        self.response.generation.as_deref()
    }

    /// Takes one event's data: a chunk, or `[DONE]`.
    pub fn event(&mut self, data: &str) -> Result<(), ModelError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| self.malformed(format!("a chunk is not JSON ({e}): {data:.200}")))?;
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_string);
            return Err(ModelError::InStream {
                provider: self.provider.clone(),
                message,
            });
        }
        if self.response.generation.is_none()
            && let Some(id) = chunk.get("id").and_then(Value::as_str)
        {
            self.response.generation = Some(id.to_string());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.response.usage = Some(Usage {
                prompt_tokens: count("prompt_tokens"),
                completion_tokens: count("completion_tokens"),
                cost_usd: usage.get("cost").and_then(Value::as_f64),
            });
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        for choice in choices {
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                if reason == "error" {
                    return Err(ModelError::InStream {
                        provider: self.provider.clone(),
                        message: "the provider ended the answer with finish_reason error"
                            .to_string(),
                    });
                }
                self.response.finish_reason = Some(reason.to_string());
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                self.response.content.push_str(text);
            }
            for fragment in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = fragment.get("index").and_then(Value::as_u64).unwrap_or(0);
                let call = self.calls.entry(index).or_default();
                if let Some(id) = fragment.get("id").and_then(Value::as_str) {
                    join_whole_value(&mut call.0, id);
                }
                let function = fragment.get("function");
                if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                    join_whole_value(&mut call.1, name);
                }
                if let Some(arguments) = function
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                {
                    call.2.push_str(arguments);
                }
            }
        }
        Ok(())
    }

    /// The stream ended: the answer, if it ended as a stream must (`[DONE]`, or a finish reason);
    /// tool calls whose arguments are not JSON are malformed.
    pub fn finish(mut self) -> Result<ChatResponse, ModelError> {
        if !self.done && self.response.finish_reason.is_none() {
            return Err(self.malformed("the stream ended before the answer did".to_string()));
        }
        for (index, (id, name, arguments)) in std::mem::take(&mut self.calls) {
            let arguments = if arguments.trim().is_empty() {
                "{}".to_string()
            } else {
                arguments
            };
            if serde_json::from_str::<Value>(&arguments).is_err() {
                return Err(self.malformed(format!(
                    "tool call {index} ({name}) has arguments that are not JSON: {arguments:.200}"
                )));
            }
            let id = if id.is_empty() {
                format!("call_{index}")
            } else {
                id
            };
            self.response.tool_calls.push(ToolCall {
                id,
                name,
                arguments,
            });
        }
        Ok(self.response)
    }
}

/// A tool call's id or name from one more fragment. OpenAI sends each once, in the call's first
/// fragment; llama.cpp's server repeats the whole value in every fragment. A fragment equal to what
/// is already there is that repetition, not more of the value; anything else is joined on, as
/// deltas are.
fn join_whole_value(value: &mut String, fragment: &str) {
    if value != fragment {
        value.push_str(fragment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseDecoder;

    /// A stream of an answer that writes some text and calls two tools, each fragment of the
    /// calls in a chunk of its own, then the usage with OpenRouter's cost.
    fn stream() -> String {
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": "gen-42", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        let mut text = String::from(": OPENROUTER PROCESSING\n\n");
        text += &chunk(
            json!({"role": "assistant", "content": "Let me "}),
            Value::Null,
        );
        text += &chunk(json!({"content": "look."}), Value::Null);
        text += &chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "ws.read", "arguments": ""}}]}),
            Value::Null,
        );
        text += &chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": \"RE"}}]}),
            Value::Null,
        );
        text += &chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "ws.exec", "arguments": "{\"argv\": [\"ls\"]}"}}]}),
            Value::Null,
        );
        text += &chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "ADME\"}"}}]}),
            Value::Null,
        );
        text += &chunk(json!({}), json!("tool_calls"));
        text += &format!(
            "data: {}\n\n",
            json!({"id": "gen-42", "choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 30, "cost": 0.00042}})
        );
        text += "data: [DONE]\n\n";
        text
    }

    fn assemble(bytes: &[u8], cut: usize) -> Result<ChatResponse, ModelError> {
        let mut decoder = SseDecoder::default();
        let mut assembler = Assembler::new("test");
        for piece in bytes.chunks(cut) {
            for event in decoder.push(piece) {
                assembler.event(&event)?;
            }
        }
        for event in decoder.finish() {
            assembler.event(&event)?;
        }
        assembler.finish()
    }

    #[test]
    fn an_answer_is_the_same_however_its_bytes_were_cut() {
        let bytes = stream().into_bytes();
        let whole = assemble(&bytes, bytes.len()).unwrap();
        assert_eq!(whole.generation.as_deref(), Some("gen-42"));
        assert_eq!(whole.content, "Let me look.");
        assert_eq!(whole.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            whole.tool_calls,
            [
                ToolCall {
                    id: "call_a".into(),
                    name: "ws.read".into(),
                    arguments: "{\"path\": \"README\"}".into()
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "ws.exec".into(),
                    arguments: "{\"argv\": [\"ls\"]}".into()
                },
            ]
        );
        assert_eq!(
            whole.usage,
            Some(Usage {
                prompt_tokens: 120,
                completion_tokens: 30,
                cost_usd: Some(0.00042)
            })
        );
        for cut in 1..64 {
            assert_eq!(assemble(&bytes, cut).unwrap(), whole, "cut every {cut}");
        }
    }

    #[test]
    fn an_error_inside_the_stream_and_a_stream_cut_short_are_errors() {
        let failing = "data: {\"id\":\"g\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"code\":502,\"message\":\"upstream died\"}}\n\n";
        assert!(matches!(
            assemble(failing.as_bytes(), 7),
            Err(ModelError::InStream { message, .. }) if message == "upstream died"
        ));
        let cut = "data: {\"id\":\"g\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
        assert!(matches!(
            assemble(cut.as_bytes(), 5),
            Err(ModelError::Malformed { .. })
        ));
        let broken_call = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"x\",\"arguments\":\"{\\\"a\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n";
        assert!(matches!(
            assemble(broken_call.as_bytes(), 100),
            Err(ModelError::Malformed { .. })
        ));
    }

    #[test]
    fn the_body_asks_for_a_stream_with_usage_and_says_the_tools_and_schema() {
        let mut request = ChatRequest::new(
            "anthropic/claude-sonnet-4",
            vec![
                Message::text(Role::System, "be brief"),
                Message {
                    role: Role::Assistant,
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "ws.read".into(),
                        arguments: "{}".into(),
                    }],
                    tool_call_id: None,
                },
                Message::tool_result("c1", "the file"),
            ],
        );
        request.tools = vec![ToolSpec {
            name: "ws.read".into(),
            description: "read a file".into(),
            parameters: json!({"type": "object"}),
        }];
        request.tool_choice = Some(ToolChoice::Named("ws.read".into()));
        request.response_schema = Some(("plan".into(), json!({"type": "object"})));
        request.max_tokens = Some(100);
        let body = request.body();
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["tools"][0]["function"]["name"], "ws.read");
        assert_eq!(body["tool_choice"]["function"]["name"], "ws.read");
        assert_eq!(body["response_format"]["json_schema"]["name"], "plan");
        assert_eq!(body["messages"][1]["tool_calls"][0]["type"], "function");
        assert_eq!(body["messages"][1]["content"], "");
        assert_eq!(body["messages"][2]["tool_call_id"], "c1");
        assert_eq!(body["max_tokens"], 100);
        request.schema_format = SchemaFormat::JsonObject;
        let body = request.body();
        assert_eq!(body["response_format"]["type"], "json_object");
        assert_eq!(body["response_format"]["schema"]["type"], "object");
    }

    #[test]
    fn a_call_whose_id_and_name_are_repeated_in_every_fragment_is_one_call() {
        // llama.cpp's server: the whole id, type and name again in each fragment, beside the
        // legacy function_call field, and no usage at the end.
        let chunk = |arguments: &str, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": "chatcmpl-7", "choices": [{"index": 0, "delta": {"role": null, "content": null,
                    "function_call": null, "tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                    "function": {"name": "ws_read", "arguments": arguments}}]}, "finish_reason": finish}]})
            )
        };
        let text = chunk("{\"path\": ", Value::Null)
            + &chunk("\"README\"}", Value::Null)
            + &chunk("", json!("tool_calls"))
            + "data: [DONE]\n\n";
        let answer = assemble(text.as_bytes(), 9).unwrap();
        assert_eq!(
            answer.tool_calls,
            [ToolCall {
                id: "call_x".into(),
                name: "ws_read".into(),
                arguments: "{\"path\": \"README\"}".into()
            }]
        );
        assert_eq!(answer.usage, None);
    }
}
