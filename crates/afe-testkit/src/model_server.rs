//! A scripted OpenAI-compatible server the tests start on loopback: each call to
//! `/v1/chat/completions` gets the next reply of its script, exactly as written — a streamed
//! answer cut into pieces of a chosen size, tool calls split into fragments, usage and cost in the
//! last chunk; an error status before the stream; an error inside it; a connection dropped or held
//! mid-answer. It answers `/v1/generation?id=` with what each answer cost, as OpenRouter does, and
//! counts every call it answered, so a test can tell whether anything was paid twice.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// A streamed answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub content: String,
    /// (name, arguments as JSON text): each call's fragments go in chunks of their own.
    pub tool_calls: Vec<(String, String)>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// OpenRouter's `usage.cost` in dollars; none: the usage has no cost.
    pub cost: Option<f64>,
    /// The stream is written in pieces of this many bytes (1: every byte a write of its own).
    pub cut_every: usize,
    /// Send the head and the first chunk, then hold the rest until the connection is dropped.
    pub hold: bool,
}

impl Answer {
    /// Text only, costing `cost`.
    pub fn text(content: &str, cost: f64) -> Answer {
        Answer {
            content: content.to_string(),
            tool_calls: Vec::new(),
            prompt_tokens: 100,
            completion_tokens: 20,
            cost: Some(cost),
            cut_every: 64,
            hold: false,
        }
    }

    /// Calls to `calls` (name, arguments), costing `cost`.
    pub fn tools(calls: &[(&str, Value)], cost: f64) -> Answer {
        Answer {
            content: String::new(),
            tool_calls: calls
                .iter()
                .map(|(name, arguments)| (name.to_string(), arguments.to_string()))
                .collect(),
            ..Answer::text("", cost)
        }
    }
}

/// What the server does with one call.
#[derive(Clone, Debug)]
pub enum Reply {
    Answer(Answer),
    /// An error before any stream: the status, the body, a `Retry-After` in seconds.
    Status {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
    /// 200, some text, then `{"error": {...}}` inside the stream.
    ErrorInStream {
        partial: String,
        message: String,
    },
    /// 200, then the connection closed after this many bytes of the stream.
    Drop {
        after: usize,
    },
}

/// What reached the server.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every body posted to `/chat/completions`, in order.
    pub requests: Vec<Value>,
    /// The `Authorization` header of each.
    pub authorizations: Vec<Option<String>>,
    /// Answers streamed to their end, with their generation ids.
    pub answered: Vec<String>,
    /// Every generation's cost, as `/generation` reports it.
    pub costs: BTreeMap<String, (f64, u64, u64)>,
    /// Calls `/generation` was asked about.
    pub generation_lookups: Vec<String>,
    /// When each call to `/chat/completions` arrived (its whole body read).
    pub arrived: Vec<std::time::Instant>,
    /// When each answer streamed to its end had its last piece taken by the connection.
    pub finished: Vec<std::time::Instant>,
}

/// The server.
#[derive(Debug)]
pub struct ModelServer {
    pub address: SocketAddr,
    pub seen: Arc<Mutex<Seen>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ModelServer {
    /// Starts on 127.0.0.1 with `script`; a call past its end is answered 500.
    pub async fn start(script: Vec<Reply>) -> ModelServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let (serving_seen, serving_script) = (seen.clone(), script.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                // Each piece of an answer leaves when it is written, as a provider's stream does.
                let _ = stream.set_nodelay(true);
                let (seen, script) = (serving_seen.clone(), serving_script.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (seen, script) = (seen.clone(), script.clone());
                        async move { Ok::<_, Infallible>(answer(request, seen, &script).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ModelServer {
            address,
            seen,
            script,
            task,
        }
    }

    /// The base URL an agent's `baseUrl` names.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Adds replies to the end of the script.
    pub fn then(&self, replies: Vec<Reply>) {
        self.script.lock().unwrap().extend(replies);
    }

    /// How many answers were streamed to their end.
    pub fn answered(&self) -> usize {
        self.seen.lock().unwrap().answered.len()
    }

    /// How many calls arrived.
    pub fn calls(&self) -> usize {
        self.seen.lock().unwrap().requests.len()
    }

    /// The sum of the costs of the generations it began, in dollars.
    pub fn cost_of_everything(&self) -> f64 {
        self.seen.lock().unwrap().costs.values().map(|c| c.0).sum()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn whole(status: u16, body: String, headers: &[(&str, String)]) -> Response<Body> {
    let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap());
    for (name, value) in headers {
        response = response.header(*name, value);
    }
    response.body(Full::new(Bytes::from(body)).boxed()).unwrap()
}

/// The SSE text of an answer, and its generation id.
fn stream_text(answer: &Answer, generation: &str) -> (String, String) {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": generation, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut first = String::from(": OPENROUTER PROCESSING\n\n");
    first += &chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    let mut rest = String::new();
    for word in answer.content.split_inclusive(' ') {
        rest += &chunk(json!({"content": word}), Value::Null);
    }
    for (index, (name, arguments)) in answer.tool_calls.iter().enumerate() {
        rest += &chunk(
            json!({"tool_calls": [{"index": index, "id": format!("call_{generation}_{index}"), "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        );
        // The arguments in fragments of three characters, as providers split them.
        let characters: Vec<char> = arguments.chars().collect();
        for piece in characters.chunks(3) {
            let piece: String = piece.iter().collect();
            rest += &chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            );
        }
    }
    let finish = if answer.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    rest += &chunk(json!({}), json!(finish));
    let mut usage = json!({"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens});
    if let Some(cost) = answer.cost {
        usage["cost"] = json!(cost);
    }
    rest += &format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"id": generation, "choices": [], "usage": usage})
    );
    (first, rest)
}

/// A body written in pieces: `pieces` one at a time (each taken by the connection before the next
/// is offered), then `done` once the last was taken; unless `end`, held open until the client
/// leaves.
fn pieces_body(pieces: Vec<Bytes>, end: bool, done: Option<Box<dyn FnOnce() + Send>>) -> Body {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
    tokio::spawn(async move {
        for piece in pieces {
            if sender.send(Ok(Frame::data(piece))).await.is_err() {
                return;
            }
        }
        // The last piece is taken once the channel has room again.
        if sender.reserve().await.is_err() {
            return;
        }
        if let Some(done) = done {
            done();
        }
        if !end {
            sender.closed().await;
        }
    });
    StreamBody::new(tokio_stream_of(receiver)).boxed()
}

fn tokio_stream_of(
    mut receiver: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

fn split(text: &str, every: usize) -> Vec<Bytes> {
    text.as_bytes()
        .chunks(every.max(1))
        .map(Bytes::copy_from_slice)
        .collect()
}

async fn answer(
    request: Request<Incoming>,
    seen: Arc<Mutex<Seen>>,
    script: &Mutex<VecDeque<Reply>>,
) -> Response<Body> {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    if path.ends_with("/generation") {
        let id = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("id="))
            .unwrap_or_default()
            .to_string();
        let mut seen = seen.lock().unwrap();
        seen.generation_lookups.push(id.clone());
        return match seen.costs.get(&id) {
            Some((cost, prompt, completion)) => whole(
                200,
                json!({"data": {"id": id, "total_cost": cost, "tokens_prompt": prompt, "tokens_completion": completion}})
                    .to_string(),
                &[],
            ),
            None => whole(404, json!({"error": {"message": "no such generation"}}).to_string(), &[]),
        };
    }
    if !path.ends_with("/chat/completions") {
        return whole(404, "not here".to_string(), &[]);
    }
    let authorization = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (reply, generation) = {
        let mut seen = seen.lock().unwrap();
        seen.arrived.push(std::time::Instant::now());
        seen.requests.push(body);
        seen.authorizations.push(authorization);
        let generation = format!("gen-{}", seen.requests.len());
        let reply = script.lock().unwrap().pop_front();
        (reply, generation)
    };
    match reply {
        None => whole(
            500,
            json!({"error": {"message": "the scripted server's script is exhausted"}}).to_string(),
            &[],
        ),
        Some(Reply::Status {
            status,
            body,
            retry_after,
        }) => {
            let headers: Vec<(&str, String)> = retry_after
                .map(|s| vec![("retry-after", s.to_string())])
                .unwrap_or_default();
            whole(status, body, &headers)
        }
        Some(Reply::ErrorInStream { partial, message }) => {
            let text = format!(
                "data: {}\n\ndata: {}\n\n",
                json!({"id": generation, "choices": [{"index": 0, "delta": {"content": partial}}]}),
                json!({"error": {"code": 502, "message": message}})
            );
            sse(pieces_body(split(&text, 64), true, None), &generation)
        }
        Some(Reply::Drop { after }) => {
            let (first, rest) = stream_text(&Answer::text("a dropped answer", 0.0), &generation);
            let text = format!("{first}{rest}");
            let cut = &text.as_bytes()[..after.min(text.len())];
            sse(
                pieces_body(vec![Bytes::copy_from_slice(cut)], true, None),
                &generation,
            )
        }
        Some(Reply::Answer(answer)) => {
            seen.lock().unwrap().costs.insert(
                generation.clone(),
                (
                    answer.cost.unwrap_or(0.0),
                    answer.prompt_tokens,
                    answer.completion_tokens,
                ),
            );
            let (first, rest) = stream_text(&answer, &generation);
            if answer.hold {
                return sse(
                    pieces_body(vec![Bytes::from(first)], false, None),
                    &generation,
                );
            }
            let mut pieces = split(&first, answer.cut_every);
            pieces.extend(split(&rest, answer.cut_every));
            let (seen, id) = (seen.clone(), generation.clone());
            let done: Box<dyn FnOnce() + Send> = Box::new(move || {
                let mut seen = seen.lock().unwrap();
                seen.finished.push(std::time::Instant::now());
                seen.answered.push(id);
            });
            sse(pieces_body(pieces, true, Some(done)), &generation)
        }
    }
}

fn sse(body: Body, generation: &str) -> Response<Body> {
    Response::builder()
        .status(200)
        .header(hyper::header::CONTENT_TYPE, "text/event-stream")
        .header("x-generation-id", generation)
        .body(body)
        .unwrap()
}
