//! A named subscription to one call's output (`tool_output.subscribe`) on a node that does not host the call's
//! session, through real `troupe serve --cluster` processes on a real nats-server: node b serves it itself, from
//! the log in JetStream and node a's live output, with the hosting node's promises (the snapshot, contiguous
//! deltas, one end; an ended call served whole; the connection's bound; unsubscribe), and lets go of its NATS
//! subscriptions when a subscription is over.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use troupe_protocol::types::events::EventPayload;

use super::cluster::Loopback;
use super::cluster_follow::listed_on;
use super::cluster_output::shell_session;
use super::support::*;

/// A 64-byte line: 256 of them are 16 KiB, which the hosting node records as one durable `tool_call_progress`
/// chunk, so the output printed before b's subscription is all in the log.
const LINE: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-\n";
const EARLY_BYTES: usize = 16 * 1024;
/// Prints 16 KiB, waits for the file `go`, then prints three lines a moment apart.
const COMMAND: &str = "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ- | head -n 256; \
                       touch waiting; while [ ! -e go ]; do sleep 0.02; done; \
                       for n in 1 2 3; do echo late$n; sleep 0.2; done";
const LATE: &str = "late1\nlate2\nlate3\n";

fn expected_stdout() -> Vec<u8> {
    let mut stdout = LINE.repeat(EARLY_BYTES / LINE.len()).into_bytes();
    stdout.extend_from_slice(LATE.as_bytes());
    stdout
}

fn error_code(reply: &Value) -> (i64, &str) {
    (reply["error"]["code"].as_i64().unwrap_or_default(), reply["error"]["data"]["code"].as_str().unwrap_or_default())
}

fn subscribe(id: u64, session_id: &str, tool_call_id: &str, name: &str, extra: Value) -> Value {
    let mut params = json!({"session_id": session_id, "tool_call_id": tool_call_id, "subscription_id": name});
    params.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
    json!({"jsonrpc": "2.0", "id": id, "method": "tool_output.subscribe", "params": params})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_subscription_on_another_node_gets_the_snapshot_deltas_and_end_and_lets_go_of_its_follows() {
    let cluster = Loopback::start();
    let project = cluster.project.clone();
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, mut deliveries_a) = a.client().await;
    let session_id = shell_session(&cluster, &client_a, COMMAND).await;
    within("subscribe on a", client_a.subscribe(&session_id, None)).await.expect("subscribe");
    let (client_b, _) = b.client().await;
    listed_on(&client_b, &session_id, "a").await;
    start_run(&client_a, &session_id, selection_of("default", "local/scripted"), "go").await;
    // The early output is durable (in JetStream) once its progress event reached a's subscriber.
    let mut tool_call_id = None;
    events_until(&mut deliveries_a, |event| match &event.payload {
        EventPayload::ToolCallStarted { tool_call_id: id, .. } => {
            tool_call_id = Some(id.clone());
            false
        }
        EventPayload::ToolCallProgress { .. } => true,
        _ => false,
    })
    .await;
    let tool_call_id = tool_call_id.expect("the call started");
    eventually("the command waits", || project.join("waiting").exists()).await;

    let subject = format!("troupe.output.{session_id}");
    let followers = || cluster.nats.subscriptions_to(&subject).unwrap_or(usize::MAX);
    assert_eq!(followers(), 0, "nobody follows the output yet");
    let mut raw = RawSocket::connect(&b.url, &b.token).await;
    raw.handshake().await;

    // A call the session does not know is refused as on the hosting node, and takes no slot.
    let unknown = raw.call_raw(subscribe(1, &session_id, "call-9-9", "nope", json!({}))).await;
    assert_eq!(error_code(&unknown), (-32000, "tool_call_not_found"), "{unknown}");

    // The connection's bound holds for remote subscriptions; unsubscribing each one lets go of its follow.
    for index in 0..64 {
        let name = format!("extra-{index}");
        let reply =
            raw.call_raw(subscribe(100 + index, &session_id, &tool_call_id, &name, json!({"stream": "stderr"}))).await;
        assert_eq!(reply["result"], json!({"subscription_id": name, "running": true}), "{reply}");
    }
    assert_eq!(followers(), 64, "each subscription follows the output while it runs");
    let refused = raw.call_raw(subscribe(200, &session_id, &tool_call_id, "one-too-many", json!({}))).await;
    assert_eq!(error_code(&refused), (-32000, "too_many_subscriptions"), "{refused}");
    for index in 0..64 {
        let reply = raw
            .call(300 + index, "tool_output.unsubscribe", json!({"subscription_id": format!("extra-{index}")}))
            .await;
        assert_eq!(reply["result"], json!({"unsubscribed": true}), "{reply}");
    }
    eventually("the unsubscribed follows let go of their NATS subscriptions", || followers() == 0).await;

    // The subscription: stdout and stderr from 0; the reply comes first, then the snapshot of the durable part.
    let reply = raw.call_raw(subscribe(500, &session_id, &tool_call_id, "mine", json!({}))).await;
    assert_eq!(reply["result"], json!({"subscription_id": "mine", "running": true}), "{reply}");
    std::fs::write(project.join("go"), "").expect("go");
    let expected = expected_stdout();
    let mut received = Vec::new();
    let mut kinds = Vec::new();
    let end = loop {
        let frame = raw.recv().await;
        let params = &frame["params"];
        assert_eq!(params["subscription_id"], "mine", "only the named subscription's notices: {frame}");
        assert_eq!((&params["session_id"], &params["tool_call_id"]), (&json!(session_id), &json!(tool_call_id)));
        assert_eq!(params["stream"].as_str().unwrap_or("stdout"), "stdout", "nothing on stderr: {frame}");
        let method = frame["method"].as_str().expect("a notification").trim_start_matches("events.tool_output_");
        kinds.push(method.to_owned());
        match method {
            "snapshot" => {
                assert_eq!(kinds, ["snapshot"], "the snapshot comes first: {frame}");
                assert_eq!(params["start_offset"], 0, "{frame}");
                received.extend(BASE64.decode(params["data"].as_str().expect("data")).expect("base64"));
                assert_eq!(params["end_offset"].as_u64(), Some(received.len() as u64), "{frame}");
            }
            "delta" => {
                assert_eq!(params["byte_offset"].as_u64(), Some(received.len() as u64), "contiguous: {frame}");
                received.extend(BASE64.decode(params["data"].as_str().expect("data")).expect("base64"));
            }
            "end" => break params.clone(),
            other => panic!("unexpected {other}: {frame}"),
        }
    };
    assert_eq!(kinds.first().map(String::as_str), Some("snapshot"), "{kinds:?}");
    assert_eq!(String::from_utf8_lossy(&received), String::from_utf8_lossy(&expected), "{kinds:?}");
    assert_eq!(end["end_offsets"], json!({"stdout": expected.len(), "stderr": 0}), "{end}");
    eventually("the ended subscription let go of its NATS subscription", || followers() == 0).await;

    // Nothing comes after the end: the next frame is the reply to the next request.
    let status = raw.call_raw(json!({"jsonrpc": "2.0", "id": 600, "method": "daemon.status", "params": {}})).await;
    assert_eq!(status["id"], 600, "{status}");

    // Once ended, a subscription is served whole from the log, at once.
    let from = EARLY_BYTES as u64 - 4;
    let late = raw.call_raw(subscribe(700, &session_id, &tool_call_id, "late", json!({"from_offset": from}))).await;
    assert_eq!(late["result"], json!({"subscription_id": "late", "running": false}), "{late}");
    let snapshot = raw.recv().await;
    assert_eq!(snapshot["method"], "events.tool_output_snapshot", "{snapshot}");
    assert_eq!(snapshot["params"]["start_offset"], from, "{snapshot}");
    let data = BASE64.decode(snapshot["params"]["data"].as_str().expect("data")).expect("base64");
    assert_eq!(data, &expected[from as usize..], "{snapshot}");
    let late_end = raw.recv().await;
    assert_eq!(late_end["method"], "events.tool_output_end", "{late_end}");
    assert_eq!(late_end["params"]["end_offsets"], json!({"stdout": expected.len(), "stderr": 0}), "{late_end}");
    eventually("the follow of an ended call let go of its NATS subscription", || followers() == 0).await;
}
