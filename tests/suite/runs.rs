//! Runs over the real wire: streaming to several clients, real providers against fake vendor servers that speak
//! their SSE formats, multi-step tool use, retries and fallback, shell output streaming, stdin, idempotency, and
//! interruption by a restart.

use serde_json::{Value, json};
use troupe_protocol::client::ClientError;
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionStatus};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{RunIdParams, RunStartParams, RunToolStdinParams, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;

use super::support::*;
use troupe_test_support::replies::{anthropic_events, anthropic_text, escape_laden_body, models_list};
use troupe_test_support::{FakeResponse, FakeServer};

fn openai_text(pieces: &[&str]) -> FakeResponse {
    let mut frames: Vec<String> = pieces
        .iter()
        .map(|piece| {
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]})
            )
        })
        .collect();
    frames.push(format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})));
    frames.push(format!(
        "data: {}\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}})
    ));
    frames.push("data: [DONE]\n\n".to_owned());
    FakeResponse::Sse { pieces: frames }
}

fn openai_tool_call(id: &str, tool: &str, arguments: Value) -> FakeResponse {
    let arguments = arguments.to_string();
    let (first, rest) = arguments.split_at(arguments.len() / 2);
    let call = |function: Value| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function", "function": function}]}, "finish_reason": null}]})
        )
    };
    FakeResponse::Sse {
        pieces: vec![
            call(json!({"name": tool, "arguments": first})),
            call(json!({"arguments": rest})),
            format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            "data: [DONE]\n\n".to_owned(),
        ],
    }
}

async fn run_to_end(daemon: &TestDaemon, session_id: &str, model: &str, input: &str) -> Vec<StoredEvent> {
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, session_id, selection_of("default", model), input).await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    events.into_iter().filter(|event| event.run_id.as_deref() == Some(&run_id)).collect()
}

fn text_of(events: &[StoredEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_echo_run_streams_the_same_events_to_two_clients_and_completes() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    let mut watchers = Vec::new();
    for _ in 0..2 {
        let (client, deliveries) = daemon.client().await;
        client.subscribe(&session.session_id, None).await.unwrap();
        watchers.push((client, deliveries));
    }
    let run_id = start_run(&writer, &session.session_id, echo_selection(), "hello there, world").await;
    let mut sequences = Vec::new();
    for (_, deliveries) in &mut watchers {
        sequences.push(events_until(deliveries, is_terminal).await);
    }
    assert_eq!(sequences[0], sequences[1], "both clients see the same ordered events");
    let run: Vec<StoredEvent> = sequences[0].iter().filter(|e| e.run_id.as_deref() == Some(&run_id)).cloned().collect();
    assert_eq!(kinds(&run)[..2], ["run_started", "model_attempt_started"]);
    assert!(kinds(&run).iter().filter(|kind| **kind == "text_delta").count() >= 2, "{:?}", kinds(&run));
    assert_eq!(text_of(&run), "hello there, world");
    assert_eq!(kinds(&run)[kinds(&run).len() - 3..], ["model_turn_committed", "model_usage_recorded", "run_completed"]);
    let meta =
        writer.call::<method::SessionGet>(SessionIdParams { session_id: session.session_id.clone() }).await.unwrap();
    assert_eq!(meta.session.status, SessionStatus::Completed);
}

#[tokio::test]
async fn an_openai_compatible_server_streams_a_reply_and_the_key_never_leaks() {
    let vendor = FakeServer::start(vec![models_list(&["gpt-test"]), openai_text(&["Hel", "lo ", "there"])]).await;
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    let connected = connect_provider(
        &client,
        "openai",
        &[("base_url", &format!("{}/v1", vendor.base_url))],
        Some("sk-test-SECRET"),
    )
    .await
    .unwrap();
    assert!(connected.snapshot.models.iter().any(|model| model.model == "openai/gpt-test"));
    let session = daemon.create_session(&client).await;
    let events = run_to_end(&daemon, &session.session_id, "openai/gpt-test", "say hello").await;
    assert_eq!(text_of(&events), "Hello there");
    assert!(
        matches!(&events.last().unwrap().payload, EventPayload::RunCompleted { final_text: Some(t) } if t == "Hello there")
    );
    let usage = events.iter().find_map(|e| match &e.payload {
        EventPayload::ModelUsageRecorded { input_tokens, output_tokens, .. } => Some((*input_tokens, *output_tokens)),
        _ => None,
    });
    assert_eq!(usage, Some((12, 3)));

    let requests = vendor.requests();
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk-test-SECRET"));
    let body = requests[1].json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["messages"].as_array().unwrap().last().unwrap()["content"], "say hello");

    // The key is in providers.json (0600) and nowhere a client can see.
    let everything = serde_json::to_string(&events).unwrap() + &serde_json::to_string(&connected.snapshot).unwrap();
    assert!(!everything.contains("SECRET"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(daemon.data_path().join("providers.json")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn a_multi_step_tool_run_reads_a_file_runs_a_command_and_writes_a_file() {
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("call_read", "read_file", json!({"path": "notes.txt"})),
        openai_tool_call("call_shell", "shell", json!({"command": "wc -c < notes.txt"})),
        openai_tool_call("call_write", "write_file", json!({"path": "out/result.txt", "content": "counted"})),
        openai_text(&["All ", "done."]),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let session = daemon.create_session(&client).await;
    std::fs::write(daemon.project_path().join("notes.txt"), "twelve bytes").unwrap();
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;

    let events = run_to_end(&daemon, &session.session_id, "openai/coder", "count the notes").await;
    let results: Vec<(String, ToolResultStatus, String)> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolCallTerminated { tool_call_id, result } => {
                Some((tool_call_id.clone(), result.status, result.output.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        results.iter().map(|(id, status, _)| (id.as_str(), *status)).collect::<Vec<_>>(),
        [
            ("call_read", ToolResultStatus::Ok),
            ("call_shell", ToolResultStatus::Ok),
            ("call_write", ToolResultStatus::Ok)
        ]
    );
    assert!(results[0].2.contains("twelve bytes"), "{}", results[0].2);
    assert!(results[1].2.contains("12"), "{}", results[1].2);
    assert_eq!(std::fs::read_to_string(daemon.project_path().join("out/result.txt")).unwrap(), "counted");
    assert!(matches!(&events.last().unwrap().payload, EventPayload::RunCompleted { .. }));

    // Each follow-up request carried the previous tool result, in order, after the assistant's call.
    let requests = vendor.requests();
    let second = requests[2].json();
    let messages = second["messages"].as_array().unwrap();
    let tool_message = messages.iter().find(|m| m["role"] == "tool").expect("a tool message");
    assert_eq!(tool_message["tool_call_id"], "call_read");
    assert!(tool_message["content"].as_str().unwrap().contains("twelve bytes"));
    assert_eq!(requests.len(), 5);
}

#[tokio::test]
async fn in_auto_approve_n_writes_are_denied_with_a_clear_tool_result() {
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("call_write", "write_file", json!({"path": "x.txt", "content": "nope"})),
        openai_text(&["ok"]),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::AutoApproveN).await;
    let events = run_to_end(&daemon, &session.session_id, "openai/coder", "write").await;
    let denied = events.iter().find_map(|event| match &event.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.clone()),
        _ => None,
    });
    let denied = denied.expect("a tool result");
    assert_eq!(denied.status, ToolResultStatus::Denied);
    assert!(denied.output.contains("auto_approve_n"), "{}", denied.output);
    assert!(!daemon.project_path().join("x.txt").exists());
    assert!(!kinds(&events).contains(&"tool_call_started"), "a denied call never starts");
}

#[tokio::test]
async fn transient_errors_are_retried_then_the_chain_falls_back_with_error_summaries() {
    let flaky = FakeServer::start(vec![
        models_list(&["flaky"]),
        FakeResponse::status(
            503,
            &[("x-request-id", "req-1")],
            r#"{"error": {"message": "busy", "type": "server_error"}}"#,
        ),
        FakeResponse::status(503, &[], r#"{"error": {"message": "busy", "type": "server_error"}}"#),
        FakeResponse::status(503, &[], r#"{"error": {"message": "still busy", "type": "server_error"}}"#),
    ])
    .await;
    let steady = FakeServer::start(vec![
        FakeResponse::status(200, &[], json!({"data": [{"id": "steady", "type": "model"}]}).to_string()),
        anthropic_text("from the backup"),
    ])
    .await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.chain]\nmodels = [\"openai/flaky\", \"anthropic/steady\"]\n".into()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", flaky.base_url))], Some("k")).await.unwrap();
    connect_provider(&client, "anthropic", &[("base_url", &steady.base_url)], Some("k2")).await.unwrap();
    let session = daemon.create_session(&client).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    start_run(&client, &session.session_id, selection_of("chain", "openai/flaky"), "hi").await;
    let events = events_until(&mut deliveries, is_terminal).await;

    let abandoned: Vec<(bool, Option<u16>)> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::AttemptAbandoned { will_retry, error, .. } => Some((*will_retry, error.http_status)),
            _ => None,
        })
        .collect();
    assert_eq!(abandoned, [(true, Some(503)), (true, Some(503)), (false, Some(503))]);
    let fallback = events.iter().find_map(|event| match &event.payload {
        EventPayload::ModelFallback { from, to, attempts_on_from, error, .. } => {
            Some((from.clone(), to.clone(), *attempts_on_from, error.clone()))
        }
        _ => None,
    });
    let (from, to, attempts, error) = fallback.expect("a fallback");
    assert_eq!((from.as_str(), to.as_str(), attempts), ("openai/flaky", "anthropic/steady", 3));
    assert!(error.retryable && error.message.contains("still busy"), "{error:?}");
    assert_eq!(text_of(&events), "from the backup");
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));
    assert_eq!(steady.requests()[1].header("x-api-key"), Some("k2"));
}

#[tokio::test]
async fn a_failure_with_an_escape_laden_body_fails_the_run_with_a_clean_bounded_summary() {
    let vendor = FakeServer::start(vec![
        models_list(&["broken"]),
        FakeResponse::status(500, &[], escape_laden_body()),
        FakeResponse::status(500, &[], escape_laden_body()),
        FakeResponse::status(500, &[], escape_laden_body()),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let session = daemon.create_session(&client).await;
    let events = run_to_end(&daemon, &session.session_id, "openai/broken", "hi").await;
    let EventPayload::RunFailed { error, model_error, resolved_model } = &events.last().unwrap().payload else {
        panic!("the run should fail: {:?}", kinds(&events))
    };
    assert!(!error.is_empty());
    assert_eq!(resolved_model.as_deref(), Some("openai/broken"));
    let summary = model_error.as_ref().expect("a model error");
    // Retried on the same model (5xx is transient), then the chain is exhausted.
    assert_eq!(kinds(&events).iter().filter(|kind| **kind == "attempt_abandoned").count(), 3);
    assert_eq!(summary.http_status, Some(500));
    assert!(summary.retryable);
    let body = summary.response_body.as_deref().expect("a response body");
    assert!(body.len() <= 4096, "{} bytes", body.len());
    assert!(!body.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "no control characters remain");
    assert!(!body.contains("[31m"), "escape sequences are removed whole");
}

#[tokio::test]
async fn an_anthropic_tool_use_run_completes_with_the_result_sent_back() {
    let vendor = FakeServer::start(vec![
        FakeResponse::status(200, &[], json!({"data": [{"id": "claude-test", "type": "model"}]}).to_string()),
        anthropic_events(&[
            json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 5, "output_tokens": 0}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \".\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}}),
            json!({"type": "message_stop"}),
        ]),
        anthropic_text("listed"),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    connect_provider(&client, "anthropic", &[("base_url", &vendor.base_url)], Some("ak")).await.unwrap();
    let session = daemon.create_session(&client).await;
    std::fs::write(daemon.project_path().join("visible.txt"), "x").unwrap();
    let events = run_to_end(&daemon, &session.session_id, "anthropic/claude-test", "what is here?").await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&events));
    let second = vendor.requests()[2].json();
    let last = second["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "toolu_1");
    assert!(last["content"][0]["content"].as_str().unwrap().contains("visible.txt"));
}

#[tokio::test]
async fn shell_output_streams_with_offsets_takes_stdin_and_late_subscribers_get_a_snapshot() {
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": "printf 'hello '; cat; printf 'bye' >&2"}}]}, {"text": "ok"}]}),
    )
    .await;
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    let mut early = daemon.raw().await;
    early.handshake().await;
    early.call(1, "events.subscribe", json!({"session_id": session.session_id})).await;
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;

    // The early subscriber sees the first chunk live, at offset 0.
    let mut tool_call_id = String::new();
    let first = loop {
        let frame = early.recv().await;
        if frame["params"]["event"]["payload"]["type"] == "tool_call_started" {
            tool_call_id = frame["params"]["event"]["payload"]["tool_call_id"].as_str().unwrap().to_owned();
        }
        if frame["method"] == "events.tool_output_delta" {
            break frame;
        }
    };
    assert_eq!(first["params"]["byte_offset"], 0);
    assert_eq!(first["params"]["stream"], "stdout");
    assert_eq!(decode(&first["params"]["data"]), "hello ");
    assert_eq!(first["params"]["tool_call_id"], json!(tool_call_id));

    // A subscriber arriving now gets the reply, then the retained output as a snapshot.
    let mut late = daemon.raw().await;
    late.handshake().await;
    let reply = late.call(1, "events.subscribe", json!({"session_id": session.session_id})).await;
    assert!(reply["result"]["last_seq"].as_u64().unwrap() > 1);
    let snapshot = loop {
        let frame = late.recv().await;
        if frame["method"] == "events.tool_output_snapshot" {
            break frame;
        }
    };
    assert_eq!(
        (snapshot["params"]["start_offset"].as_u64(), snapshot["params"]["end_offset"].as_u64()),
        (Some(0), Some(6))
    );
    assert_eq!(decode(&snapshot["params"]["data"]), "hello ");

    // Stdin reaches `cat`, whose echo continues the stream at offset 6.
    let accepted = client
        .call::<method::RunToolStdin>(RunToolStdinParams {
            run_id: run_id.clone(),
            tool_call_id: tool_call_id.clone(),
            data: Some("world\n".into()),
            eof: true,
        })
        .await
        .unwrap();
    assert!(accepted.accepted);
    let echoed = loop {
        let frame = early.recv().await;
        if frame["method"] == "events.tool_output_delta" && frame["params"]["stream"] == "stdout" {
            break frame;
        }
    };
    assert_eq!(echoed["params"]["byte_offset"], 6);
    assert_eq!(decode(&echoed["params"]["data"]), "world\n");
    // Subscribing from the start replays everything so far, then follows the run to its end.
    let (_watcher, mut deliveries) = daemon.client().await;
    _watcher.subscribe(&session.session_id, None).await.unwrap();
    let events = events_until(&mut deliveries, is_terminal).await;
    let output = events.iter().find_map(|event| match &event.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.output.clone()),
        _ => None,
    });
    let output = output.unwrap();
    assert!(output.contains("hello world") && output.contains("bye"), "{output}");
    assert!(kinds(&events).contains(&"tool_stdin_submitted"));
    assert!(kinds(&events).contains(&"tool_call_progress"), "output is also recorded durably");
}

fn decode(data: &Value) -> String {
    use base64::Engine as _;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap()).unwrap()).unwrap()
}

#[tokio::test]
async fn run_start_is_idempotent_and_a_busy_session_refuses_a_second_run() {
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 30"}}]}]}),
    )
    .await;
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    let start = |client_run_id: &str, input: &str| {
        client.call::<method::RunStart>(RunStartParams {
            session_id: session.session_id.clone(),
            client_run_id: client_run_id.into(),
            selection: selection_of("default", "local/scripted"),
            input: input.into(),
            reset_fallback: false,
            attachments: Vec::new(),
        })
    };
    let first = start("c1", "work").await.unwrap().run_id;
    assert_eq!(start("c1", "work").await.unwrap().run_id, first, "a redelivery returns the same run");
    let conflict = start("c1", "other work").await.unwrap_err();
    assert!(matches!(&conflict, ClientError::Rpc(e) if e.typed_code() == Some("idempotency_conflict")), "{conflict:?}");
    let busy = start("c2", "more").await.unwrap_err();
    let ClientError::Rpc(busy) = busy else { panic!("{busy:?}") };
    assert_eq!((busy.code, busy.typed_code()), (-32000, Some("session_busy")));
    assert_eq!(busy.data.unwrap()["active_run_id"], json!(first));
    assert!(client.call::<method::RunCancel>(RunIdParams { run_id: first.clone() }).await.unwrap().cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_run_interrupts_it_and_the_session_runs_again() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    connect_script(
        &client,
        data_dir.path(),
        json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 60"}}]}]}),
    )
    .await;
    let session = client
        .call::<method::SessionCreate>(troupe_protocol::types::session::SessionCreateParams {
            selection: echo_selection(),
            cwd: Some("/".into()),
        })
        .await
        .unwrap()
        .session;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "wait").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    daemon.kill();

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunInterrupted { .. })).await;
    assert_eq!(events.last().unwrap().run_id.as_deref(), Some(run_id.as_str()));
    let meta =
        client.call::<method::SessionGet>(SessionIdParams { session_id: session.session_id.clone() }).await.unwrap();
    assert_eq!(meta.session.status, SessionStatus::Interrupted);

    let next = start_run(&client, &session.session_id, echo_selection(), "again").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&next) && is_terminal(event)).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));
}
