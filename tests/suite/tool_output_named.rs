//! Named raw-output subscriptions over the wire (`tool_output.subscribe`): a connection that never called
//! `events.subscribe` follows one tool call's output, from a byte offset, on the streams it chose, and is told when
//! the call ended; another call's output never reaches it. Subscriptions are bounded per connection, end on
//! `tool_output.unsubscribe`, and bad requests are typed errors.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::support::*;

/// The first call: 40 numbered lines on stdout and one on stderr, then it waits for `go` and prints one more line.
const FIRST: &str = "for i in $(seq 1 40); do echo line-$i; done; echo err >&2; touch waiting; \
                     while [ ! -e go ]; do sleep 0.01; done; echo after";
/// The second call, which the subscriber does not follow.
const SECOND: &str = "echo second-call-output";
/// The subscriber asks for stdout from this offset.
const FROM: u64 = 5;

fn first_stdout() -> Vec<u8> {
    let mut lines: String = (1..=40).map(|index| format!("line-{index}\n")).collect();
    lines.push_str("after\n");
    lines.into_bytes()
}

fn error_code(reply: &Value) -> (i64, &str) {
    (reply["error"]["code"].as_i64().unwrap_or_default(), reply["error"]["data"]["code"].as_str().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_subscription_gets_only_its_calls_stream_from_its_offset_then_the_end() {
    let daemon = TestDaemon::start();
    let project = daemon.project_path().to_path_buf();
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": FIRST}}]},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": SECOND}}]},
        {"text": "done"}
    ]});
    let (session_id, _run_id) = scripted_run_in_yolo(&daemon, &client, script).await;
    eventually("the first call printed and waits", || project.join("waiting").exists()).await;
    let started =
        events_until(&mut deliveries, |event| kinds(std::slice::from_ref(event)) == ["tool_call_started"]).await;
    let tool_call_id = match &started.last().expect("started").payload {
        troupe_protocol::types::events::EventPayload::ToolCallStarted { tool_call_id, .. } => tool_call_id.clone(),
        other => panic!("{other:?}"),
    };

    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let subscribe = |id: u64, name: &str, tool_call_id: &str, extra: Value| {
        let mut params = json!({"session_id": session_id, "tool_call_id": tool_call_id, "subscription_id": name});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"jsonrpc": "2.0", "id": id, "method": "tool_output.subscribe", "params": params})
    };

    // Bad requests are typed, and refused subscriptions take no slot.
    let unknown = raw.call_raw(subscribe(1, "nope", "call-9-9", json!({}))).await;
    assert_eq!(error_code(&unknown), (-32000, "tool_call_not_found"), "{unknown}");
    assert!(unknown["error"]["data"]["detail"].as_str().unwrap().contains("output_ref"), "{unknown}");
    let bad_name = raw.call_raw(subscribe(2, "no spaces", &tool_call_id, json!({}))).await;
    assert_eq!(error_code(&bad_name), (-32602, "invalid_subscription_id"), "{bad_name}");
    let bad_stream = raw.call_raw(subscribe(3, "s", &tool_call_id, json!({"stream": "stdin"}))).await;
    assert_eq!(bad_stream["error"]["code"], -32602, "{bad_stream}");
    let no_session = raw
        .call(
            4,
            "tool_output.subscribe",
            json!({"session_id": "00000000-0000-7000-8000-000000000000",
            "tool_call_id": tool_call_id, "subscription_id": "x"}),
        )
        .await;
    assert_eq!(error_code(&no_session), (-32000, "session_not_found"), "{no_session}");

    // The bound: 64 live subscriptions per connection.
    for index in 0..64 {
        let reply = raw
            .call_raw(subscribe(
                100 + index,
                &format!("extra-{index}"),
                &tool_call_id,
                json!({"stream": "stderr", "from_offset": 1_000_000}),
            ))
            .await;
        assert_eq!(reply["result"], json!({"subscription_id": format!("extra-{index}"), "running": true}), "{reply}");
    }
    let refused = raw.call_raw(subscribe(200, "one-too-many", &tool_call_id, json!({}))).await;
    assert_eq!(error_code(&refused), (-32000, "too_many_subscriptions"), "{refused}");
    assert_eq!(refused["error"]["data"]["limit"], 64);
    for index in 0..64 {
        let reply = raw
            .call(300 + index, "tool_output.unsubscribe", json!({"subscription_id": format!("extra-{index}")}))
            .await;
        assert_eq!(reply["result"], json!({"unsubscribed": true}), "{reply}");
    }
    let again = raw.call(400, "tool_output.unsubscribe", json!({"subscription_id": "extra-0"})).await;
    assert_eq!(again["result"], json!({"unsubscribed": false}), "{again}");

    // The subscription: stdout from FROM. The snapshot comes after the reply.
    let reply =
        raw.call_raw(subscribe(500, "mine", &tool_call_id, json!({"stream": "stdout", "from_offset": FROM}))).await;
    assert_eq!(reply["result"], json!({"subscription_id": "mine", "running": true}), "{reply}");
    std::fs::write(project.join("go"), "").unwrap();

    let expected = first_stdout();
    let mut received = Vec::new();
    let end = loop {
        let frame = raw.recv().await;
        let params = &frame["params"];
        assert_eq!(params["subscription_id"], "mine", "only the named subscription's notices: {frame}");
        assert_eq!((&params["session_id"], &params["tool_call_id"]), (&json!(session_id), &json!(tool_call_id)));
        match frame["method"].as_str().unwrap() {
            "events.tool_output_snapshot" => {
                assert!(received.is_empty(), "the snapshot comes first: {frame}");
                assert_eq!(params["start_offset"], FROM, "{frame}");
                assert_eq!(params["stream"], "stdout");
                received.extend(BASE64.decode(params["data"].as_str().unwrap()).unwrap());
            }
            "events.tool_output_delta" => {
                assert_eq!(params["stream"], "stdout", "stderr is not followed: {frame}");
                assert_eq!(params["byte_offset"].as_u64(), Some(FROM + received.len() as u64), "{frame}");
                received.extend(BASE64.decode(params["data"].as_str().unwrap()).unwrap());
            }
            "events.tool_output_end" => break params.clone(),
            other => panic!("unexpected {other}: {frame}"),
        }
    };
    assert_eq!(received, &expected[FROM as usize..]);
    assert_eq!(end["end_offsets"], json!({"stdout": expected.len()}), "{end}");

    // The run goes on to the second call and ends; none of it reaches this connection.
    events_until(&mut deliveries, is_terminal).await;
    // The next frame on the connection must be the reply itself: `call` would skip a stray notification.
    raw.send(&json!({"jsonrpc": "2.0", "id": 600, "method": "daemon.status", "params": {}})).await;
    let status = raw.recv().await;
    assert_eq!(status["id"], 600, "a notification came before the reply: {status}");
    assert!(status.get("result").is_some(), "the reply came with nothing before it: {status}");

    // A subscription after the call ended gets what was retained, then the end, at once.
    let late = raw.call_raw(subscribe(700, "late", &tool_call_id, json!({"from_offset": expected.len() - 6}))).await;
    assert_eq!(late["result"], json!({"subscription_id": "late", "running": false}), "{late}");
    let snapshot = raw.recv().await;
    assert_eq!(snapshot["method"], "events.tool_output_snapshot", "{snapshot}");
    assert_eq!(BASE64.decode(snapshot["params"]["data"].as_str().unwrap()).unwrap(), b"after\n");
    let late_end = raw.recv().await;
    assert_eq!(late_end["method"], "events.tool_output_end", "{late_end}");
    assert_eq!(late_end["params"]["end_offsets"], json!({"stdout": expected.len(), "stderr": 4}), "{late_end}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_declares_the_channels_each_tool_streams() {
    let daemon = TestDaemon::start();
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let reply = raw.call(1, "tools.list", json!({})).await;
    let tools = reply["result"]["tools"].as_array().unwrap_or_else(|| panic!("{reply}"));
    let channels: Vec<(&str, &Value)> =
        tools.iter().map(|tool| (tool["name"].as_str().unwrap(), &tool["output_channels"])).collect();
    let names: Vec<&str> = channels.iter().map(|(name, _)| *name).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "in name order");
    for (name, declared) in channels {
        let expected = if name == "shell" { json!(["stdout", "stderr"]) } else { json!([]) };
        assert_eq!(declared, &expected, "{name}");
    }
    assert!(names.contains(&"shell") && names.contains(&"read_file") && names.contains(&"web_fetch"), "{names:?}");
    assert!(tools.iter().all(|tool| tool["description"].as_str().is_some_and(|text| !text.is_empty())));
    let refused = raw.call(2, "tools.list", json!({"session_id": "x"})).await;
    assert_eq!(refused["error"]["code"], -32602, "params are checked: {refused}");
}
