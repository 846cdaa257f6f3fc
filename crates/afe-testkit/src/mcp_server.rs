//! A scripted MCP server of the project's own, built on the maintained `rmcp` crate: the same
//! tools over stdio (the `afe-mcp-script` binary, which a Plugin's `stdio.command` starts) and over
//! HTTP ([`McpHttpServer`], requiring a header a Plugin's `headersSecretRef` supplies). Its tools:
//!
//! - `echo {text}`: `echo: <text>`;
//! - `env`: the names of the variables it was started with, sorted;
//! - `loud`: 100,000 characters (the client's bound cuts them);
//! - `slow`: never answers (the client's time bound ends it);
//! - `broken`: a result marked as an error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::BodyExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// The scripted server; `calls` counts the tool calls it answered or began.
#[derive(Clone, Debug, Default)]
pub struct ScriptedMcp {
    pub calls: Arc<AtomicUsize>,
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("a schema is an object")
    };
    Tool::new(name, description, Arc::new(schema))
}

impl ServerHandler for ScriptedMcp {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let none = json!({"type": "object", "properties": {}});
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "echo",
                "Says the text back.",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ),
            tool("env", "Names the variables it has.", none.clone()),
            tool("loud", "Says a great deal.", none.clone()),
            tool("slow", "Never answers.", none.clone()),
            tool("broken", "Fails.", none),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let text = |t: String| vec![ContentBlock::text(t)];
        let result = match request.name.as_ref() {
            "echo" => {
                let said = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                CallToolResult::success(text(format!("echo: {said}")))
            }
            "env" => {
                let mut names: Vec<String> = std::env::vars().map(|(name, _)| name).collect();
                names.sort();
                CallToolResult::success(text(names.join(",")))
            }
            "loud" => CallToolResult::success(text("x".repeat(100_000))),
            "slow" => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            "broken" => CallToolResult::error(text("it broke".to_string())),
            other => {
                return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(result.into())
    }
}

/// The scripted server over HTTP (MCP's streamable HTTP) on a port of its own, answering only
/// requests that carry `header: value`; stopped when dropped.
#[derive(Debug)]
pub struct McpHttpServer {
    pub address: std::net::SocketAddr,
    pub server: ScriptedMcp,
    task: tokio::task::JoinHandle<()>,
}

impl McpHttpServer {
    pub async fn start(header: &'static str, value: &'static str) -> McpHttpServer {
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
        };
        let server = ScriptedMcp::default();
        let handler = server.clone();
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = crate::serve_http(
            listener,
            move |request: hyper::Request<hyper::body::Incoming>| {
                let service = service.clone();
                async move {
                    let allowed = request
                        .headers()
                        .get(header)
                        .is_some_and(|v| v.as_bytes() == value.as_bytes());
                    if !allowed {
                        return hyper::Response::builder()
                            .status(401)
                            .body(http_body_util::combinators::BoxBody::new(
                                http_body_util::Full::new(bytes::Bytes::from_static(
                                    b"missing the header",
                                ))
                                .map_err(|never| match never {}),
                            ))
                            .unwrap();
                    }
                    service.handle(request).await
                }
            },
        );
        McpHttpServer {
            address,
            server,
            task,
        }
    }

    /// The URL a Plugin's `http.url` names.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
