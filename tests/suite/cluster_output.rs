//! Live tool output across a cluster, through real `troupe serve --cluster` processes on a real nats-server: a
//! client on node b following a session that node a hosts is sent the running command's output as a client on a
//! is (`events.tool_output_snapshot`/`_delta`), after the call's `tool_call_started` event and before its
//! `tool_call_terminated`, with nothing missing once it follows.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use troupe_protocol::types::session::PermissionMode;

use super::cluster::Loopback;
use super::cluster_follow::listed_on;
use super::support::*;

/// Prints `early`, waits for the file `go`, then prints three lines a moment apart.
const COMMAND: &str = "echo early; touch waiting; while [ ! -e go ]; do sleep 0.02; done; \
                       for n in 1 2 3; do echo late$n; sleep 0.2; done";

/// The tool-call events and live output a subscriber was sent, in arrival order.
#[derive(Default)]
struct Seen {
    /// `started`, `terminated`, or `output <method> <offset>` per frame about the tool call.
    order: Vec<String>,
    /// Stdout bytes by offset, from snapshots and deltas.
    stdout: std::collections::BTreeMap<u64, u8>,
    gaps: usize,
}

impl Seen {
    fn absorb(&mut self, frame: &Value) {
        let method = frame["method"].as_str().unwrap_or_default();
        let params = &frame["params"];
        match params["event"]["payload"]["type"].as_str() {
            Some("tool_call_started") => self.order.push("started".into()),
            Some("tool_call_terminated") => self.order.push("terminated".into()),
            _ => {}
        }
        if !method.starts_with("events.tool_output_") {
            return;
        }
        if method == "events.tool_output_gap" {
            self.gaps += 1;
        }
        let offset = params.get("byte_offset").or(params.get("start_offset")).and_then(Value::as_u64);
        self.order.push(format!("output {method}"));
        if let (Some(offset), Some(data), "stdout") =
            (offset, params["data"].as_str(), params["stream"].as_str().unwrap_or_default())
        {
            for (index, byte) in BASE64.decode(data).expect("base64").into_iter().enumerate() {
                self.stdout.insert(offset + index as u64, byte);
            }
        }
    }

    fn terminated(&self) -> bool {
        self.order.iter().any(|entry| entry == "terminated")
    }

    /// The stdout bytes from `from` on, as long as they run on without a hole.
    fn text_from(&self, from: u64) -> String {
        let mut text = Vec::new();
        for (offset, byte) in self.stdout.range(from..) {
            if *offset != from + text.len() as u64 {
                break;
            }
            text.push(*byte);
        }
        String::from_utf8_lossy(&text).into_owned()
    }
}

/// A session in the cluster's project, created through `client`'s node, whose next `local/scripted` run calls
/// `shell` with `command` (no approval asked), then answers text. Returns its id.
pub(super) async fn shell_session(
    cluster: &Loopback,
    client: &troupe_protocol::client::Client,
    command: &str,
) -> String {
    let session_id = create_session_in(client, &cluster.project).await.session_id;
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]},
        {"text": "done"}
    ]});
    connect_script(client, cluster.dirs.path(), script).await;
    set_mode(client, &session_id, PermissionMode::Yolo).await;
    session_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_another_node_is_sent_the_running_commands_output_after_its_started_event() {
    let cluster = Loopback::start();
    let project = cluster.project.clone();
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, _) = a.client().await;
    let session_id = shell_session(&cluster, &client_a, COMMAND).await;
    let (client_b, _) = b.client().await;
    listed_on(&client_b, &session_id, "a").await;
    start_run(&client_a, &session_id, selection_of("default", "local/scripted"), "go").await;
    eventually("the command is running", || project.join("waiting").exists()).await;

    let mut subscriber = RawSocket::connect(&b.url, &b.token).await;
    subscriber.handshake().await;
    subscriber
        .send(&json!({"jsonrpc": "2.0", "id": 1, "method": "events.subscribe", "params": {"session_id": session_id}}))
        .await;
    let mut seen = Seen::default();
    let reply = loop {
        let frame = subscriber.recv().await;
        if frame["id"] == 1 {
            break frame;
        }
        seen.absorb(&frame);
    };
    for event in reply["result"]["events"].as_array().expect("events") {
        seen.absorb(&json!({"params": {"event": event}}));
    }
    assert_eq!(seen.order, ["started"], "the reply holds the call's start: {reply}");

    // The follower hears the command from now on: what it prints once `go` exists reaches b's client.
    std::fs::write(project.join("go"), "").expect("go");
    let read = tokio::time::timeout(WAIT, async {
        while !seen.terminated() {
            seen.absorb(&subscriber.recv().await);
        }
    })
    .await;
    assert!(read.is_ok(), "the call never ended on b; seen: {:?}", seen.order);
    let late = "late1\nlate2\nlate3\n";
    assert_eq!(seen.text_from("early\n".len() as u64), late, "seen: {:?}", seen.order);
    assert_eq!(seen.gaps, 0, "nothing was missed: {:?}", seen.order);
    let outputs = seen.order.iter().filter(|entry| entry.starts_with("output")).count();
    assert!(outputs >= 1, "{:?}", seen.order);
    assert_eq!(seen.order.first().map(String::as_str), Some("started"), "{:?}", seen.order);
    assert_eq!(seen.order.last().map(String::as_str), Some("terminated"), "no output after the end: {:?}", seen.order);
}
