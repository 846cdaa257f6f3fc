//! The scripted MCP server over stdio (`afe_testkit::mcp_server`), as a Plugin's `stdio.command`
//! starts it.

use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let server = afe_testkit::mcp_server::ScriptedMcp::default()
        .serve(rmcp::transport::stdio())
        .await
        .expect("an MCP client on stdio");
    let _ = server.waiting().await;
}
