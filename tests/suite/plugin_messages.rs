//! A plugin tool's `additional_messages` over the real wire: a real plugin process answers `plugin/tools/call` with
//! messages, the run records them with the result, and the next request to the fake OpenAI vendor carries the tool
//! result first, then the messages in order (a user message with its image attached, a system message as a marked
//! user turn). Messages out of bounds (a text part too long, a file part naming no stored artifact) are refused at
//! the edge: the result is an `error` without them, saying why, and the model never sees them.

use std::path::Path;

use serde_json::{Value, json};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::producers::PluginRecoveryStatus;
use troupe_protocol::types::run::{
    MAX_MESSAGE_TEXT_BYTES, MessagePart, MessageRole, PersistedToolResult, ToolEmittedMessage, ToolResultStatus,
};

use super::plugins::{plugin_section, wait_for_status};
use super::support::*;
use troupe_test_support::replies::{models_list, openai_text};
use troupe_test_support::{FakeResponse, FakeServer};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\nfake";

/// A plugin with one tool, `emit`, that answers with the output `emitted` and the additional messages held (as
/// JSON) in the file `MESSAGES` at the time of the call.
const EMITTER_PLUGIN: &str = r#"
import json, os, sys
def send(message):
    message["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    method, mid = message.get("method"), message.get("id")
    if method == "plugin/initialize":
        tools = [{"name": "emit", "description": "emits messages", "input_schema": {"type": "object"}}]
        send({"id": mid, "result": {"protocol_version": "0.0.6", "name": "emitter", "version": "1",
              "capabilities": {"tools": True}, "tools": tools}})
    elif method == "plugin/recovery/start":
        send({"id": "rc", "method": "plugin/recovery/complete", "params": {"outcome": {"status": "ready"}}})
    elif method == "plugin/tools/call":
        with open(os.environ["MESSAGES"]) as f:
            messages = json.load(f)
        send({"id": mid, "result": {"output": {"type": "single", "text": "emitted"}, "additional_messages": messages}})
    elif method == "plugin/ping":
        send({"id": mid, "result": {}})
    elif method == "plugin/shutdown":
        break
"#;

/// An OpenAI answer that calls `tool` once, with no arguments.
fn openai_tool_call(id: &str, tool: &str) -> FakeResponse {
    let delta = json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
        "function": {"name": tool, "arguments": "{}"}}]});
    FakeResponse::Sse {
        pieces: vec![
            format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]})),
            format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            "data: [DONE]\n\n".to_owned(),
        ],
    }
}

struct Emitter {
    daemon: TestDaemon,
    vendor: FakeServer,
    messages_file: std::path::PathBuf,
    _files: tempfile::TempDir,
}

/// A daemon running the emitter plugin (its tool allowed by a rule) and connected to a fake vendor that answers
/// each of `runs` runs with a call of the tool, then a text.
async fn start_emitter(runs: usize) -> Emitter {
    let files = tempfile::tempdir().unwrap();
    let script = files.path().join("emitter.py");
    std::fs::write(&script, EMITTER_PLUGIN).unwrap();
    let messages_file = files.path().join("messages.json");
    std::fs::write(&messages_file, "[]").unwrap();
    let rules =
        "\n[permissions]\nrules = [{ effect = \"allow\", action = \"execute\", resource = \"plugin:emitter/*\" }]\n";
    let config = plugin_section("emitter", &script, &[("MESSAGES", &messages_file)], rules);
    let mut replies = vec![models_list(&["gpt-p"])];
    for run in 0..runs {
        replies.push(openai_tool_call(&format!("call_{run}"), "plugin__emitter__emit"));
        replies.push(openai_text("done"));
    }
    let vendor = FakeServer::start(replies).await;
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..Default::default() });
    wait_for_status(&daemon, "emitter", PluginRecoveryStatus::Ready).await;
    Emitter { daemon, vendor, messages_file, _files: files }
}

impl Emitter {
    /// Runs once in `session_id` with the plugin answering `messages`; the run's events.
    async fn run(&self, session_id: &str, messages: &[ToolEmittedMessage]) -> Vec<StoredEvent> {
        std::fs::write(&self.messages_file, serde_json::to_vec(messages).unwrap()).unwrap();
        let (client, mut deliveries) = self.daemon.client().await;
        client.subscribe(session_id, None).await.expect("subscribe");
        let run_id = start_run(&client, session_id, selection_of("default", "openai/gpt-p"), "go").await;
        let events = events_until(&mut deliveries, |e| e.run_id.as_deref() == Some(&run_id) && is_terminal(e)).await;
        assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&events));
        // The subscription replays the session's earlier runs first.
        events.into_iter().filter(|event| event.run_id.as_deref() == Some(&run_id)).collect()
    }

    /// The messages of the `index`th chat request the vendor received.
    fn chat_messages(&self, index: usize) -> Vec<Value> {
        let chats: Vec<Value> = self.vendor.bodies_to("/chat/completions");
        chats[index]["messages"].as_array().expect("messages").clone()
    }
}

async fn emitter_session(emitter: &Emitter) -> String {
    let (client, _) = emitter.daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", emitter.vendor.base_url))], Some("k"))
        .await
        .expect("connect the fake vendor");
    create_session_in(&client, emitter.daemon.project_path()).await.session_id
}

fn shape(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|message| match message["role"].as_str().unwrap_or("") {
            "tool" => format!("tool {}", message["tool_call_id"].as_str().unwrap_or("")),
            role => role.to_owned(),
        })
        .collect()
}

fn terminated(events: &[StoredEvent]) -> PersistedToolResult {
    let results = tool_results(events);
    assert_eq!(results.len(), 1, "{:?}", kinds(events));
    results.into_iter().next().unwrap()
}

fn text(text: &str) -> MessagePart {
    MessagePart::Text { text: text.to_owned() }
}

fn chart(path: &str) -> MessagePart {
    MessagePart::File { path: path.to_owned(), mime_type: "image/png".to_owned(), name: None }
}

fn write_artifact(data_dir: &Path, name: &str) {
    std::fs::create_dir_all(data_dir.join("artifacts")).unwrap();
    std::fs::write(data_dir.join("artifacts").join(name), PNG).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_tools_messages_follow_its_result_in_the_models_history() {
    let emitter = start_emitter(1).await;
    write_artifact(emitter.daemon.data_path(), "chart.png");
    let session_id = emitter_session(&emitter).await;
    let messages = [
        ToolEmittedMessage {
            role: MessageRole::User,
            parts: vec![text("see the chart"), chart("artifacts/chart.png")],
        },
        ToolEmittedMessage { role: MessageRole::System, parts: vec![text("remember the budget")] },
    ];
    let events = emitter.run(&session_id, &messages).await;

    // Recorded with the result, as the plugin sent them.
    let result = terminated(&events);
    assert_eq!((result.status, result.output.as_str()), (ToolResultStatus::Ok, "emitted"));
    assert_eq!(result.additional_messages, messages);
    let terminated_event =
        events.iter().find(|event| matches!(event.payload, EventPayload::ToolCallTerminated { .. })).unwrap();
    assert_eq!(terminated_event.origin.as_deref(), Some("engine:tool-result"));

    // The next request: the result first, then the messages in order, the system one as a marked user turn.
    let history = emitter.chat_messages(1);
    assert_eq!(shape(&history), ["system", "user", "assistant", "tool call_0", "user", "user"], "{history:?}");
    assert_eq!(history[3]["content"], "emitted");
    assert_eq!(
        history[4]["content"],
        json!([
            {"type": "text", "text": "see the chart"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgpmYWtl"}}
        ])
    );
    assert_eq!(
        history[5]["content"],
        Value::from("[tool-emitted system message; materialized as user history]\n\nremember the budget")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_tools_messages_out_of_bounds_are_refused_with_an_error_result() {
    let emitter = start_emitter(3).await;
    let session_id = emitter_session(&emitter).await;
    let too_long = "x".repeat(MAX_MESSAGE_TEXT_BYTES + 1);
    let cases = [
        // A text part past its bound.
        (vec![text("fine"), text(&too_long)], "text part 1 of additional message 0 is 32769 bytes; at most 32768"),
        // A file part naming an artifact that is not stored, and one naming a file outside the artifacts.
        (vec![chart("artifacts/missing.png")], "file part 0 of additional message 0: the artifact is not a stored"),
        (vec![chart("/etc/passwd")], "file part 0 of additional message 0: only stored artifacts"),
    ];
    for (run, (parts, reason)) in cases.into_iter().enumerate() {
        let messages = [ToolEmittedMessage { role: MessageRole::User, parts }];
        let events = emitter.run(&session_id, &messages).await;
        let result = terminated(&events);
        assert_eq!(result.status, ToolResultStatus::Error, "{}", result.output);
        assert!(result.additional_messages.is_empty());
        assert!(
            result.output.starts_with("emitted\n\n[the tool's additional messages were refused: "),
            "{}",
            result.output
        );
        assert!(result.output.contains(reason), "{}", result.output);
        assert!(!result.output.contains("xxxx"), "the refusal does not echo the content");

        // The model sees the result with the refusal, and no emitted message after it.
        let history = emitter.chat_messages(2 * run + 1);
        let last_two = &shape(&history)[history.len() - 2..];
        assert_eq!(last_two, ["assistant", &format!("tool call_{run}")], "{history:?}");
        assert!(history.last().unwrap()["content"].as_str().unwrap().contains(reason));
    }
}
