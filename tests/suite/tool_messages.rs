//! Tool-emitted messages (`additional_messages`) reaching a real provider wire: a session whose log holds a
//! turn with three tool calls, whose results emitted a user message with an image, a system message, and (the
//! third, damaged) five messages. The next run's request to a fake OpenAI server carries all three tool results
//! first, then the emitted messages in order (the image as an `image_url` part, the system one as a marked user
//! turn), and the damaged result without its messages but with a note; the damaged event is still loaded.

use serde_json::{Value, json};
use troupe_protocol::types::events::{EventPayload, StoredEvent, ToolCallRecord};
use troupe_protocol::types::run::{
    MessagePart, MessageRole, PersistedToolResult, ToolEmittedMessage, ToolResultStatus,
};

use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text};

const SESSION: &str = "01957a1c-3f00-7a10-8b20-3c4d5e6f7a81";
const PNG: &[u8] = b"\x89PNG\r\n\x1a\nfake";

fn line(seq: u64, run_id: Option<&str>, origin: Option<&str>, payload: EventPayload) -> String {
    let event = StoredEvent {
        session_id: SESSION.into(),
        run_id: run_id.map(str::to_owned),
        seq,
        timestamp: format!("2026-01-01T00:00:{seq:02}.000Z"),
        origin: origin.map(str::to_owned),
        payload,
    };
    serde_json::to_string(&event).unwrap()
}

fn text_message(role: MessageRole, text: &str) -> ToolEmittedMessage {
    ToolEmittedMessage { role, parts: vec![MessagePart::Text { text: text.into() }] }
}

fn terminated(seq: u64, id: &str, messages: Vec<ToolEmittedMessage>) -> String {
    let result = PersistedToolResult {
        status: ToolResultStatus::Ok,
        output: format!("result of {id}"),
        display: None,
        output_ref: None,
        additional_messages: messages,
    };
    line(
        seq,
        Some("r0"),
        Some("engine:tool-result"),
        EventPayload::ToolCallTerminated { tool_call_id: id.into(), result },
    )
}

fn earlier_session_log() -> Vec<String> {
    let calls = ["c1", "c2", "c3"]
        .iter()
        .map(|id| ToolCallRecord { tool_call_id: (*id).into(), tool: "probe".into(), arguments: json!({}) })
        .collect();
    let committed = |seq: u64, text: &str, tool_calls: Vec<ToolCallRecord>| {
        line(
            seq,
            Some("r0"),
            None,
            EventPayload::ModelTurnCommitted {
                attempt_id: format!("a{seq}"),
                model: "local/echo".into(),
                fallback_index: 0,
                text: text.into(),
                reasoning: None,
                tool_calls,
            },
        )
    };
    let chart = ToolEmittedMessage {
        role: MessageRole::User,
        parts: vec![
            MessagePart::Text { text: "see the chart".into() },
            MessagePart::File { path: "artifacts/chart.png".into(), mime_type: "image/png".into(), name: None },
        ],
    };
    vec![
        session_created_line(SESSION, json!({"type": "root"})),
        line(
            2,
            Some("r0"),
            Some("user"),
            EventPayload::RunStarted {
                client_run_id: "c0".into(),
                selection: echo_selection(),
                input: "first input".into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        ),
        committed(3, "", calls),
        terminated(4, "c1", vec![chart]),
        terminated(5, "c2", vec![text_message(MessageRole::System, "remember the budget")]),
        terminated(6, "c3", vec![text_message(MessageRole::User, "one too many"); 5]),
        committed(7, "done", Vec::new()),
        line(8, Some("r0"), None, EventPayload::RunCompleted { final_text: Some("done".into()) }),
    ]
}

#[tokio::test]
async fn a_turns_tool_results_come_first_then_emitted_messages_with_the_image_attached() {
    let data_dir = tempfile::tempdir().unwrap();
    write_session_log(data_dir.path(), SESSION, &earlier_session_log());
    std::fs::create_dir_all(data_dir.path().join("artifacts")).unwrap();
    std::fs::write(data_dir.path().join("artifacts/chart.png"), PNG).unwrap();
    let vendor = FakeServer::start(vec![models_list(&["gpt-test"]), openai_text("seen")]).await;
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    client.subscribe(SESSION, None).await.unwrap();
    let run_id = start_run(&client, SESSION, selection_of("default", "openai/gpt-test"), "and now?").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(&events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&events));
    // The damaged result was loaded, not skipped: it is replayed as it was written.
    let replayed =
        events.iter().filter(|event| matches!(event.payload, EventPayload::ToolCallTerminated { .. })).count();
    assert_eq!(replayed, 3);

    let body = vendor.requests()[1].json();
    let messages = body["messages"].as_array().unwrap();
    let shape: Vec<String> = messages
        .iter()
        .map(|message| match message["role"].as_str().unwrap() {
            "tool" => format!("tool {}", message["tool_call_id"].as_str().unwrap()),
            role => role.to_owned(),
        })
        .collect();
    assert_eq!(
        shape,
        ["system", "user", "assistant", "tool c1", "tool c2", "tool c3", "user", "user", "assistant", "user"],
        "{body}"
    );
    assert_eq!(messages[2]["tool_calls"].as_array().unwrap().len(), 3);
    assert_eq!(messages[3]["content"], "result of c1");
    let damaged = messages[5]["content"].as_str().unwrap();
    assert!(damaged.starts_with("result of c3") && damaged.contains("at most 4"), "{damaged}");
    assert_eq!(
        messages[6]["content"],
        json!([
            {"type": "text", "text": "see the chart"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgpmYWtl"}}
        ])
    );
    assert_eq!(
        messages[7]["content"],
        Value::from("[tool-emitted system message; materialized as user history]\n\nremember the budget")
    );
    assert_eq!(messages[9]["content"], "and now?");
}
