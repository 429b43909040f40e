//! MCP servers as tools, through the real daemon: a stdio MCP server written in Python (standard library only,
//! `examples/mcp/probe_server.py`) is started from `[mcp_servers]`, its tools are offered to a scripted model as
//! `mcp__probe__<tool>` with their schemas, and a call is a permission check on `execute` `mcp:probe/<tool>`: it asks
//! in `ask` mode (the arguments shown) and does not under an allow rule. Its text, image and resource link reach
//! the model's next request; a server killed mid-call gives the model a tool error and the run still ends (and the
//! server is started again); a call that outlives `tool_timeout_sec` is an error (and withdrawn with
//! `notifications/cancelled`); a stdio server runs in the tools' sandbox; a server that cannot start shows
//! as failed in `runtime.snapshot.get`, `troupe status` and `troupe mcp list`, and the daemon serves on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientProtocol, Deliveries};
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::mcp::{McpServerState, McpServerStatus};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text, openai_tool_call};

use super::cli_support::troupe;
use super::plugins::python3;
use super::support::*;

const SERVER: &str = include_str!("../../examples/mcp/probe_server.py");

/// The server script, written into a folder of its own (outside the data dir, which the sandbox denies).
pub(super) fn server_script() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe_mcp_server.py");
    std::fs::write(&path, SERVER).unwrap();
    (dir, path)
}

fn toml_string(value: &str) -> String {
    serde_json::to_string(value).unwrap()
}

/// `[mcp_servers.probe]` running the script, with `extra` settings.
pub(super) fn probe_section(script: &Path, extra: &str) -> String {
    format!(
        "[mcp_servers.probe]\ncommand = {}\nargs = [{}]\n{extra}\n",
        toml_string(python3().to_str().unwrap()),
        toml_string(script.to_str().unwrap())
    )
}

async fn servers(client: &Client) -> Vec<McpServerStatus> {
    within("runtime.snapshot.get", client.runtime_snapshot_get(Default::default()))
        .await
        .expect("snapshot")
        .snapshot
        .mcp_servers
}

/// Polls the snapshot until the server `name` is in `state` (and, when `restarts` is given, restarted at least that
/// often), and returns it.
async fn wait_for_server(client: &Client, name: &str, state: McpServerState, restarts: u32) -> McpServerStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found = servers(client).await.into_iter().find(|server| server.name == name);
        if let Some(server) = &found
            && server.state == state
            && server.restarts >= restarts
        {
            return server.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "the server {name} never became {state:?}: {found:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn session(daemon: &TestDaemon, vendor: &FakeServer, mode: PermissionMode) -> (Client, Deliveries, String) {
    let (client, deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let session_id = daemon.create_session(&client).await.session_id;
    set_mode(&client, &session_id, mode).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    (client, deliveries, session_id)
}

fn approvals(events: &[StoredEvent]) -> Vec<troupe_protocol::types::approval::ApprovalRecord> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ApprovalRequested { approval } => Some((**approval).clone()),
            _ => None,
        })
        .collect()
}

fn started(events: &[StoredEvent]) -> Vec<(String, PermissionAction, String)> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolCallStarted { tool, action, resource, .. } => {
                Some((tool.clone(), *action, resource.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The messages of the model's second request (the one that carries the tool's result).
fn second_request_messages(vendor: &FakeServer) -> Vec<Value> {
    let bodies = vendor.bodies_to("/chat/completions");
    assert_eq!(bodies.len(), 2, "one request to call the tool, one with its result");
    bodies[1]["messages"].as_array().expect("messages").clone()
}

/// The last tool message among `messages`.
fn tool_message(messages: &[Value]) -> String {
    let tool = messages.iter().rev().find(|message| message["role"] == "tool").expect("a tool message");
    tool["content"].as_str().expect("text").to_owned()
}

/// Checks the echo call's result as the log and the model's next request carry it: the text, the image (stored
/// as an artifact, sent as an image part) and the resource link.
fn assert_echo_reached_the_model(events: &[StoredEvent], vendor: &FakeServer) {
    let results = tool_results(events);
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0];
    assert_eq!(result.status, ToolResultStatus::Ok, "{}", result.output);
    let lines: Vec<&str> = result.output.lines().collect();
    assert_eq!(lines[0], "echo: hi");
    assert!(lines[1].starts_with("[image 1: image/png, 70 bytes, attached as artifacts/"), "{lines:?}");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[2], "resource link: notes <file:///srv/notes.md> (text/markdown)");
    assert_eq!(result.additional_messages.len(), 1);

    let messages = second_request_messages(vendor);
    assert_eq!(tool_message(&messages), result.output);
    let image = messages
        .iter()
        .filter(|message| message["role"] == "user")
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .find(|part| part["type"] == "image_url")
        .expect("the image reaches the model as an image part");
    assert!(image["image_url"]["url"].as_str().unwrap().starts_with("data:image/png;base64,iVBORw0KGgo"), "{image}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_allow_rule_the_tool_runs_without_asking_and_its_text_image_and_link_reach_the_model() {
    let (_dir, script) = server_script();
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("mcp__probe__echo", json!({"text": "hi"})),
        openai_text("done"),
    ])
    .await;
    let config = format!(
        "{}[permissions]\nrules = [{{ effect = \"allow\", action = \"execute\", resource = \"mcp:probe/*\" }}]\n",
        probe_section(&script, "")
    );
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..DaemonSetup::default() });
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Ask).await;
    let ready = wait_for_server(&client, "probe", McpServerState::Ready, 0).await;
    let offered: Vec<(&str, &str)> =
        ready.tools.iter().map(|tool| (tool.name.as_str(), tool.called_as.as_str())).collect();
    assert_eq!(
        offered,
        [
            ("echo", "mcp__probe__echo"),
            ("hang", "mcp__probe__hang"),
            ("fail", "mcp__probe__fail"),
            ("read", "mcp__probe__read"),
            ("grow", "mcp__probe__grow")
        ]
    );

    start_run(&client, &session_id, selection_of("default", "openai/coder"), "say hi").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:#?}");
    assert!(approvals(&events).is_empty(), "the rule allows the server's tools: {events:#?}");
    assert_eq!(
        started(&events),
        [("mcp__probe__echo".to_owned(), PermissionAction::Execute, "mcp:probe/echo".to_owned())]
    );
    assert_echo_reached_the_model(&events, &vendor);

    // The model was offered the tools with their schemas.
    let first = &vendor.bodies_to("/chat/completions")[0];
    let echo = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["function"]["name"] == "mcp__probe__echo")
        .expect("the echo tool is offered");
    assert_eq!(echo["function"]["description"], "Says the text back. (MCP server probe)");
    assert_eq!(echo["function"]["parameters"]["required"], json!(["text"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ask_mode_a_call_waits_for_an_approval_that_shows_its_arguments_then_runs() {
    let (_dir, script) = server_script();
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("mcp__probe__echo", json!({"text": "hi"})),
        openai_text("done"),
    ])
    .await;
    let config = probe_section(&script, "");
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..DaemonSetup::default() });
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Ask).await;
    wait_for_server(&client, "probe", McpServerState::Ready, 0).await;

    start_run(&client, &session_id, selection_of("default", "openai/coder"), "say hi").await;
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;
    let approval = approvals(&events).pop().expect("an approval");
    let operation = &approval.operation;
    assert_eq!(
        (operation.tool.as_str(), operation.action, operation.resource.as_str()),
        ("mcp__probe__echo", PermissionAction::Execute, "mcp:probe/echo")
    );
    assert_eq!(operation.summary, "call the tool echo of the MCP server probe with {\"text\":\"hi\"}");
    assert!(started(&events).is_empty(), "nothing runs before the answer");

    approve_once(&client, &approval).await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:#?}");
    assert_echo_reached_the_model(&events, &vendor);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_gives_the_model_a_tool_error_the_run_ends_and_the_server_comes_back() {
    let (_dir, script) = server_script();
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("mcp__probe__hang", json!({})),
        openai_text("the server died"),
    ])
    .await;
    let config = probe_section(&script, "");
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..DaemonSetup::default() });
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Yolo).await;
    wait_for_server(&client, "probe", McpServerState::Ready, 0).await;

    start_run(&client, &session_id, selection_of("default", "openai/coder"), "wait forever").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    let pids = super::processes::processes_with(script.to_str().unwrap());
    assert_eq!(pids.len(), 1, "one server process: {pids:?}");
    // SAFETY: kill with a pid and a signal number; the pid is the test's own server process, found above.
    assert_eq!(unsafe { libc::kill(pids[0] as libc::pid_t, libc::SIGKILL) }, 0);

    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:#?}");
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].status, ToolResultStatus::Error);
    assert!(
        results[0].output.contains("the MCP server probe went away during the call of hang"),
        "{}",
        results[0].output
    );
    assert_eq!(tool_message(&second_request_messages(&vendor)), results[0].output);

    // Started again, with a new process.
    let back = wait_for_server(&client, "probe", McpServerState::Ready, 1).await;
    assert_eq!(back.tools.len(), 5);
    let pids_after = super::processes::processes_with(script.to_str().unwrap());
    assert!(pids_after.len() == 1 && pids_after != pids, "{pids:?} then {pids_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_tool_timeout_and_an_is_error_result_are_tool_errors_the_model_reads() {
    let (_dir, script) = server_script();
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("mcp__probe__hang", json!({})),
        openai_tool_call("mcp__probe__fail", json!({})),
        openai_text("both failed"),
    ])
    .await;
    // Its cwd is a folder of the test's, which it may write (workspace-write), to note the notifications it gets.
    let notes_dir = tempfile::tempdir().unwrap();
    let notes = notes_dir.path().join("notes.log");
    let extra = format!(
        "tool_timeout_sec = 0.5\ncwd = {}\nenv = {{ MCP_PROBE_NOTES = {} }}",
        toml_string(notes_dir.path().to_str().unwrap()),
        toml_string(notes.to_str().unwrap())
    );
    let config = probe_section(&script, &extra);
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..DaemonSetup::default() });
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Yolo).await;
    wait_for_server(&client, "probe", McpServerState::Ready, 0).await;

    start_run(&client, &session_id, selection_of("default", "openai/coder"), "try").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:#?}");
    let results: Vec<(ToolResultStatus, String)> =
        tool_results(&events).into_iter().map(|result| (result.status, result.output)).collect();
    assert_eq!(
        results,
        [
            (
                ToolResultStatus::Error,
                "the MCP server probe did not answer the call of hang within 500 ms (its tool_timeout_sec)".to_owned()
            ),
            (ToolResultStatus::Error, "the probe failed on purpose".to_owned()),
        ]
    );
    let bodies = vendor.bodies_to("/chat/completions");
    assert_eq!(bodies.len(), 3);
    assert_eq!(tool_message(bodies[2]["messages"].as_array().unwrap()), "the probe failed on purpose");
    // The call troupe stopped waiting for was withdrawn.
    let noted = std::fs::read_to_string(&notes).unwrap();
    assert!(noted.lines().any(|line| line.starts_with("notifications/cancelled ")), "{noted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_runs_in_the_tool_sandbox_and_cannot_read_the_daemon_s_token() {
    let (_dir, script) = server_script();
    let config = probe_section(&script, "");
    // The project folder exists before the server starts: its rules are fixed then, and the project lies beside
    // the data dir, in a folder whose entries each get a rule of their own (docs/runtime-semantics.md, MCP servers).
    let project = tempfile::tempdir().unwrap();
    let setup = DaemonSetup { config_toml: Some(config), project: Some(project), ..DaemonSetup::default() };
    let daemon = TestDaemon::start_with(setup);
    let token = daemon.data_path().join("daemon/token");
    let project_file = daemon.project_path().join("readme.txt");
    std::fs::write(&project_file, "project text").unwrap();
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("mcp__probe__read", json!({"path": token})),
        openai_tool_call("mcp__probe__read", json!({"path": project_file})),
        openai_text("done"),
    ])
    .await;
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Yolo).await;
    wait_for_server(&client, "probe", McpServerState::Ready, 0).await;

    start_run(&client, &session_id, selection_of("default", "openai/coder"), "read").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    let results: Vec<(ToolResultStatus, String)> =
        tool_results(&events).into_iter().map(|result| (result.status, result.output)).collect();
    assert_eq!(results.len(), 2, "{results:?}");
    let (status, output) = &results[0];
    assert_eq!(*status, ToolResultStatus::Error, "{output}");
    assert!(output.ends_with("\nPermissionError: Permission denied"), "the data dir is denied: {output}");
    // Its TMPDIR is a private folder of its own, in the sandbox's temp root.
    let tmpdir = output.lines().next().unwrap().strip_prefix("TMPDIR=").unwrap();
    assert!(tmpdir.ends_with("/mcp-probe") && tmpdir.contains("/troupe-"), "{tmpdir}");
    assert_eq!(results[1], (ToolResultStatus::Ok, format!("TMPDIR={tmpdir}\nproject text")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_reported_failed_and_the_daemon_serves_on() {
    let (_dir, script) = server_script();
    let config = format!(
        "{}[mcp_servers.broken]\ncommand = \"/nonexistent/troupe-mcp-server\"\n[mcp_servers.off]\ncommand = \"x\"\n\
         enabled = false\n",
        probe_section(&script, "")
    );
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let broken = wait_for_server(&client, "broken", McpServerState::Failed, 0).await;
    let reason = broken.reason.expect("a reason");
    assert!(reason.contains("could not start `/nonexistent/troupe-mcp-server`"), "{reason}");
    assert!(reason.contains("No such file or directory"), "{reason}");
    wait_for_server(&client, "probe", McpServerState::Ready, 0).await;
    let states: Vec<(String, McpServerState)> =
        servers(&client).await.into_iter().map(|server| (server.name, server.state)).collect();
    assert_eq!(
        states,
        [
            ("broken".to_owned(), McpServerState::Failed),
            ("off".to_owned(), McpServerState::Disabled),
            ("probe".to_owned(), McpServerState::Ready)
        ]
    );

    // The daemon serves: a run completes.
    let session_id = daemon.create_session(&client).await.session_id;
    let (_other, mut deliveries) = daemon.client().await;
    within("subscribe", _other.subscribe(&session_id, None)).await.expect("subscribe");
    start_run(&client, &session_id, echo_selection(), "still here").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:#?}");

    // The CLI says so too.
    let status = troupe(&daemon, &["status"]).await.ok();
    assert!(
        status.contains("mcp       broken failed; off disabled; probe ready, 5 tool(s) (`troupe mcp list` for more)"),
        "{status}"
    );
    let listed = troupe(&daemon, &["mcp", "list"]).await.ok();
    assert!(listed.starts_with("broken (stdio): failed"), "{listed}");
    assert!(listed.contains(": could not start `/nonexistent/troupe-mcp-server`"), "{listed}");
    assert!(listed.contains("off (stdio): disabled\n"), "{listed}");
    assert!(
        listed.contains("probe (stdio): ready, 5 tool(s)\n  mcp__probe__echo  echo\n  mcp__probe__hang  hang\n"),
        "{listed}"
    );
    let json: Value = serde_json::from_str(&troupe(&daemon, &["mcp", "list", "--json"]).await.ok()).unwrap();
    assert_eq!(json["mcp_servers"][0]["state"], "failed");
    assert_eq!(json["mcp_servers"][2]["tools"][0], json!({"name": "echo", "called_as": "mcp__probe__echo"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_logs_its_stderr_in_the_daemon_s_log_and_dies_with_a_daemon_killed_by_sigkill() {
    let (_dir, script) = server_script();
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("config.toml"), probe_section(&script, "")).unwrap();
    let mut daemon = troupe_serve(data_dir.path())
        .listen("127.0.0.1:0")
        .rust_log("info")
        .log(troupe_test_support::DaemonLog::Lines)
        .spawn();
    let marker = script.to_str().unwrap().to_owned();
    eventually("the server's stderr in the daemon's log", || {
        daemon.log_lines().iter().any(|line| line.contains("MCP server stderr: probe MCP server started"))
    })
    .await;
    let line = daemon.log_lines().into_iter().find(|line| line.contains("probe MCP server started")).unwrap();
    assert!(line.contains("mcp_server=probe"), "{line}");
    assert_eq!(super::processes::processes_with(&marker).len(), 1);
    daemon.kill();
    troupe_test_support::eventually("the server to die with the killed daemon", Duration::from_secs(10), || {
        super::processes::processes_with(&marker).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_says_its_tools_changed_has_them_listed_again() {
    let (_dir, script) = server_script();
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("mcp__probe__grow", json!({})),
        openai_text("grown"),
    ])
    .await;
    let daemon =
        TestDaemon::start_with(DaemonSetup { config_toml: Some(probe_section(&script, "")), ..DaemonSetup::default() });
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Yolo).await;
    let before = wait_for_server(&client, "probe", McpServerState::Ready, 0).await;
    assert!(!before.tools.iter().any(|tool| tool.name == "extra"));
    start_run(&client, &session_id, selection_of("default", "openai/coder"), "grow").await;
    events_until(&mut deliveries, is_terminal).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let probe = servers(&client).await.into_iter().find(|server| server.name == "probe").unwrap();
        if probe.tools.iter().any(|tool| tool.called_as == "mcp__probe__extra") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the new tool was never listed: {probe:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
