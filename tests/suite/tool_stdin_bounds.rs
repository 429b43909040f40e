//! `run.tool_stdin` is bounded: one request by `[limits] max_input_bytes` (like `run.start` and `run.steer`), and
//! what waits unread for one tool call by `MAX_QUEUED_STDIN_BYTES`, so a tool that never reads its stdin cannot
//! make the daemon hold what clients keep sending it.

use serde_json::{Value, json};
use troupe_protocol::types::events::EventPayload;
use troupe_runtime::tool_stdin::MAX_QUEUED_STDIN_BYTES;

use super::support::*;

const MIB: usize = 1024 * 1024;

fn stdin_request(id: u64, run_id: &str, tool_call_id: &str, data: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "run.tool_stdin",
        "params": {"run_id": run_id, "tool_call_id": tool_call_id, "data": data, "eof": false}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_for_a_tool_is_bounded_per_request_and_in_what_waits_unread() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    // The tool never reads its stdin.
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 60"}}]},
        {"text": "done"}
    ]});
    let (_session_id, run_id) = scripted_run_in_yolo(&daemon, &client, script).await;
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    let Some(EventPayload::ToolCallStarted { tool_call_id, .. }) = events.last().map(|event| &event.payload) else {
        unreachable!("events_until stops at tool_call_started")
    };

    let mut socket = daemon.raw().await;
    socket.handshake().await;
    // One request larger than `[limits] max_input_bytes` (1 MiB by default): refused as `run.steer` refuses it.
    let too_large = socket.call_raw(stdin_request(1, &run_id, tool_call_id, "x".repeat(MIB + 1))).await;
    assert_eq!(too_large["error"]["code"], -32602, "{too_large}");
    let data = &too_large["error"]["data"];
    assert_eq!(
        (data["code"].as_str(), data["size"].as_u64(), data["limit"].as_u64()),
        (Some("input_too_large"), Some(MIB as u64 + 1), Some(MIB as u64))
    );
    assert!(data["detail"].as_str().unwrap_or_default().contains("max_input_bytes"), "{data}");

    // Requests of 1 MiB each are queued until 4 MiB wait unread; the next one is refused, saying how much waits.
    let mut accepted = 0;
    let refused = loop {
        assert!(accepted <= MAX_QUEUED_STDIN_BYTES / MIB, "more than the bound was taken: {accepted} MiB");
        let reply = socket.call_raw(stdin_request(2 + accepted as u64, &run_id, tool_call_id, "y".repeat(MIB))).await;
        if reply["error"].is_object() {
            break reply;
        }
        assert_eq!(reply["result"]["accepted"], true, "{reply}");
        accepted += 1;
    };
    assert_eq!(accepted, MAX_QUEUED_STDIN_BYTES / MIB);
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let data = &refused["error"]["data"];
    assert_eq!(data["code"], "tool_stdin_backlog_full", "{data}");
    assert_eq!(
        (data["queued_bytes"].as_u64(), data["max_bytes"].as_u64()),
        (Some(MAX_QUEUED_STDIN_BYTES as u64), Some(MAX_QUEUED_STDIN_BYTES as u64))
    );
    assert_eq!(
        (data["run_id"].as_str(), data["tool_call_id"].as_str()),
        (Some(run_id.as_str()), Some(tool_call_id.as_str()))
    );
    assert!(data["detail"].as_str().unwrap_or_default().contains("not read yet"), "{data}");
    // Ending the input is never refused for room.
    let end = socket
        .call_raw(json!({"jsonrpc": "2.0", "id": 100, "method": "run.tool_stdin",
            "params": {"run_id": run_id, "tool_call_id": tool_call_id, "eof": true}}))
        .await;
    assert_eq!(end["result"]["accepted"], true, "{end}");

    let cancelled = socket.call(101, "run.cancel", json!({"run_id": run_id})).await;
    assert_eq!(cancelled["result"]["cancelled"], true, "{cancelled}");
    events_until(&mut deliveries, is_terminal).await;
}
