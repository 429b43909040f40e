//! A streamable-HTTP MCP server, through the real `troupe serve`: a server written in Python (standard library only,
//! `mcp/http_server.py`) that answers only requests with the bearer token and the header the config names by the
//! daemon's environment variables; its tool is called by a scripted model under an allow rule and its result
//! reaches the model's next request. A server whose token variable is not set is failed, naming the variable.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use serde_json::json;
use troupe_protocol::client::ClientProtocol;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::mcp::{McpServerState, McpTransport};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text, openai_tool_call};

use super::plugins::python3;
use super::support::*;

const SERVER: &str = include_str!("mcp/http_server.py");

/// The HTTP server, killed on drop.
struct HttpServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl HttpServer {
    fn start(token: &str, org: &str) -> HttpServer {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("http_mcp_server.py");
        std::fs::write(&script, SERVER).unwrap();
        let mut child = Command::new(python3())
            .arg(&script)
            .args([token, org])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        HttpServer { child, port: line.trim().parse().expect("the port"), _dir: dir }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_gets_its_headers_from_the_daemon_s_environment_and_its_tool_reaches_the_model() {
    let server = HttpServer::start("token-4711", "acme");
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("mcp__web__lookup", json!({"word": "troupe"})),
        openai_text("done"),
    ])
    .await;
    let data_dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nbearer_token_env_var = \"MCP_TEST_TOKEN\"\n\
         env_http_headers = {{ \"X-Org\" = \"MCP_TEST_ORG\" }}\n\
         [mcp_servers.nokey]\nurl = \"http://127.0.0.1:{port}/mcp\"\nbearer_token_env_var = \"MCP_TEST_MISSING\"\n\
         [mcp_servers.stranger]\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
         [permissions]\nrules = [{{ effect = \"allow\", action = \"execute\", resource = \"mcp:web/lookup\" }}]\n\
         [titles]\nauto = false\n",
        port = server.port
    );
    std::fs::write(data_dir.path().join("config.toml"), config).unwrap();
    let daemon = troupe_serve(data_dir.path())
        .listen("127.0.0.1:0")
        .env("MCP_TEST_TOKEN", "token-4711")
        .env("MCP_TEST_ORG", "acme")
        .env_remove("MCP_TEST_MISSING")
        .spawn();
    let (client, mut deliveries) = daemon.client().await;

    let deadline = tokio::time::Instant::now() + WAIT;
    let servers = loop {
        let servers =
            within("snapshot", client.runtime_snapshot_get(Default::default())).await.unwrap().snapshot.mcp_servers;
        let settled =
            servers.iter().all(|server| matches!(server.state, McpServerState::Ready | McpServerState::Failed));
        if settled && servers.len() == 3 {
            break servers;
        }
        assert!(tokio::time::Instant::now() < deadline, "{servers:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let [nokey, stranger, web] = servers.as_slice() else { panic!("{servers:?}") };
    assert_eq!((web.transport, web.state), (McpTransport::Http, McpServerState::Ready), "{web:?}");
    assert_eq!(web.tools.iter().map(|tool| tool.called_as.as_str()).collect::<Vec<_>>(), ["mcp__web__lookup"]);
    assert_eq!(nokey.state, McpServerState::Failed);
    assert_eq!(
        nokey.reason.as_deref(),
        Some("the environment variable MCP_TEST_MISSING (bearer_token_env_var) is not set in the daemon's environment")
    );
    assert_eq!(stranger.state, McpServerState::Failed, "the server refuses a request without the token");
    let reason = stranger.reason.as_deref().unwrap();
    assert!(reason.contains("failed: unexpected server response: HTTP 401 Unauthorized"), "{reason}");
    assert!(!format!("{servers:?}").contains("token-4711"), "no status shows the token: {servers:?}");

    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let project = tempfile::tempdir().unwrap();
    let session_id = create_session_in(&client, project.path()).await.session_id;
    set_mode(&client, &session_id, PermissionMode::Ask).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    start_run(&client, &session_id, selection_of("default", "openai/coder"), "look it up").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:#?}");
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        (results[0].status, results[0].output.as_str()),
        (ToolResultStatus::Ok, "troupe: a word the HTTP server knows")
    );
    let bodies = vendor.bodies_to("/chat/completions");
    let messages = bodies[1]["messages"].as_array().unwrap();
    let tool = messages.iter().find(|message| message["role"] == "tool").unwrap();
    assert_eq!(tool["content"], "troupe: a word the HTTP server knows");
}
