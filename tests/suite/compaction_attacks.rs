//! Red-team findings against compaction and usage (issue 11), each a test that failed before its fix:
//! - an overflow recovery sends the model a summary request holding the whole history that just overflowed, and
//!   more (no tool unit is elided when the window is unknown), so against a real provider it overflows in turn;
//! - the usage a provider reported for a summary request (or a run's turn) is dropped when the compaction (or the
//!   run) is cancelled before the stream's end, so spent usage under-counts what was paid;
//! - `session.compact` takes a focus of any size, where every other input is held to `[limits] max_input_bytes`;
//! - a summary larger than the model's whole context window is committed;
//! - auto compaction runs every turn even when the system prompt and tools alone exceed the window.
//!
//! And what held, kept as regression tests: a daemon SIGKILLed mid-compaction restarts with a usable session and
//! exact usage; a compacted history of tool results with emitted messages, an attachment, an unanswered call and
//! a late termination keeps the summary request (with elided units) and the next request valid for OpenAI.

use serde_json::{Value, json};
use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::RunIdParams;
use troupe_protocol::types::session::PermissionMode;

use super::compaction::{MODEL, chat_requests, compact, connect_vendor, context_length_exceeded, vendor_session};
use super::support::*;
use troupe_test_support::replies::{models_list, openai_text};
use troupe_test_support::{FakeResponse, FakeServer};

/// The bytes of a request's non-system messages: what the history costs the context window.
fn history_bytes(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["role"] != "system")
        .map(|message| message.to_string().len())
        .sum()
}

/// A streamed answer that finished and reported its usage, then holds the connection open (no `[DONE]` yet).
fn answer_with_usage_then_hold(text: &str, input_tokens: u64, output_tokens: u64) -> FakeResponse {
    let chunk = |value: Value| format!("data: {value}\n\n");
    FakeResponse::SseConsumedThenHold {
        pieces: vec![
            chunk(json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})),
            chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            chunk(json!({"choices": [], "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens}})),
        ],
    }
}

async fn spent_requests(client: &Client, session_id: &str) -> (u64, u64) {
    let usage = within(
        "session.usage",
        client.call::<method::SessionUsage>(SessionIdParams { session_id: session_id.to_owned() }),
    )
    .await
    .expect("session.usage");
    (usage.spent.totals.request_count, usage.spent.totals.input_tokens)
}

/// The provider said the request did not fit. The recovery's summary request must be smaller than the request that
/// overflowed, or it overflows too and the recovery can never succeed against a real provider. With the model's
/// window unknown (no `[models]` entry, not in the built-in table) nothing is elided: the summary request carries
/// the whole overflowing history, the big tool result included, plus the instruction.
#[tokio::test]
async fn an_overflow_recovery_asks_for_a_summary_smaller_than_the_request_that_overflowed() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        context_length_exceeded(),
        openai_text("SUMMARY: a long listing was printed."),
        openai_text("answer two"),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_vendor(&client, &vendor).await;
    // The first run prints a long tool result (a scripted model), the second runs on the fake OpenAI vendor.
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "seq 100000 120000"}}]},
        {"text": "printed"},
    ]});
    connect_script(&client, daemon.data_path(), script).await;
    let session = create_session_in(&client, daemon.project_path()).await;
    let id = session.session_id;
    set_mode(&client, &id, PermissionMode::Yolo).await;
    client.subscribe(&id, None).await.expect("subscribe");
    let first = run_in_subscribed(&client, &mut deliveries, &id, "local/scripted", "print a listing").await;
    let results = tool_results(&first);
    assert_eq!(results.len(), 1, "{:?}", kinds(&first));
    assert!(results[0].output.len() > 20_000, "a long tool result: {} bytes", results[0].output.len());

    let second = run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question two").await;
    assert!(
        second.iter().any(|event| matches!(event.payload, EventPayload::CompactionStarted { .. })),
        "{:?}",
        kinds(&second)
    );
    let requests = chat_requests(&vendor);
    assert!(requests.len() >= 2, "the overflowing request and the summary request: {}", requests.len());
    let (overflowed, summary) = (history_bytes(&requests[0]), history_bytes(&requests[1]));
    assert!(
        summary < overflowed,
        "the summary request's history ({summary} bytes) is no smaller than the history that overflowed \
         ({overflowed} bytes)"
    );
}

/// A manual compaction cancelled after the provider reported the summary request's usage, before the stream's
/// `[DONE]`: the tokens were paid for, so `session.usage`'s `spent` must count them.
#[tokio::test]
async fn a_cancelled_compaction_still_records_the_usage_its_provider_reported() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        openai_text("answer one"),
        answer_with_usage_then_hold("SUMMARY", 40, 7),
    ])
    .await;
    let (_daemon, client, mut deliveries, id) = vendor_session(&vendor, DaemonSetup::default()).await;
    client.subscribe(&id, None).await.expect("subscribe");
    run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question one").await;
    let before = spent_requests(&client, &id).await;

    let (compacted, ()) = tokio::join!(compact(&client, &id, None), async {
        let started =
            events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::CompactionStarted { .. }))
                .await;
        let Some(EventPayload::CompactionStarted { compaction_id, .. }) = started.last().map(|event| &event.payload)
        else {
            unreachable!()
        };
        eventually("the summary request reached the vendor", || chat_requests(&vendor).len() == 2).await;
        // Nothing on the daemon's wire shows the usage chunk was parsed; the vendor knows once the daemon read on.
        within("the daemon took the usage chunk", vendor.pieces_consumed.notified()).await;
        within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id: compaction_id.clone() }))
            .await
            .expect("cancel the compaction");
    });
    let compacted = compacted.expect("session.compact");
    assert!(!compacted.compacted, "{compacted:?}");
    let after = spent_requests(&client, &id).await;
    assert_eq!(after, (before.0 + 1, before.1 + 40), "the summary request's reported usage is spent");
}

/// The same for a run: cancelled after its turn's usage was reported, before the stream's end.
#[tokio::test]
async fn a_cancelled_run_still_records_the_usage_its_provider_reported() {
    let vendor =
        FakeServer::start(vec![models_list(&["gpt-c"]), answer_with_usage_then_hold("partial answer", 55, 3)]).await;
    let (_daemon, client, mut deliveries, id) = vendor_session(&vendor, DaemonSetup::default()).await;
    client.subscribe(&id, None).await.expect("subscribe");
    let run_id = start_run(&client, &id, selection_of("default", MODEL), "question one").await;
    // The text delta shows the stream was read up to the text; the vendor knows once the usage chunk after it was.
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::TextDelta { .. })).await;
    within("the daemon took the usage chunk", vendor.pieces_consumed.notified()).await;
    within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id: run_id.clone() }))
        .await
        .expect("cancel the run");
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert_eq!(spent_requests(&client, &id).await, (1, 55), "the turn's reported usage is spent");
}

/// A daemon killed (SIGKILL) while a manual compaction waits for its summary: after a restart the session is not
/// left busy (`run.start` and `session.compact` work), the dangling `compaction_started` changes nothing the
/// model sees, and the usage spent before the kill is counted once by every rollup.
#[tokio::test]
async fn a_daemon_killed_mid_compaction_leaves_a_usable_session_and_exact_usage() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        troupe_test_support::replies::openai_text_reporting(
            "answer one",
            json!({"prompt_tokens": 10, "completion_tokens": 2}),
        ),
        FakeResponse::SseThenHold { pieces: vec![] },
    ])
    .await;
    let data_dir = tempfile::tempdir().expect("data dir");
    let project = tempfile::tempdir().expect("project");
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let id = {
        let (client, mut deliveries) = daemon.client().await;
        connect_vendor(&client, &vendor).await;
        let id = create_session_in(&client, project.path()).await.session_id;
        client.subscribe(&id, None).await.expect("subscribe");
        run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question one").await;
        let (answer, ()) = tokio::join!(compact(&client, &id, None), async {
            events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::CompactionStarted { .. }))
                .await;
            eventually("the summary request reached the vendor", || chat_requests(&vendor).len() == 2).await;
            daemon.kill();
        });
        assert!(answer.is_err(), "the daemon died before answering: {answer:?}");
        id
    };

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    assert_eq!(spent_requests(&client, &id).await, (1, 10), "spent before the kill");
    let global = within("usage.global", client.call::<method::UsageGlobal>(Default::default()))
        .await
        .expect("usage.global")
        .usage
        .totals;
    assert_eq!((global.request_count, global.input_tokens), (1, 10), "counted once globally");
    client.subscribe(&id, None).await.expect("subscribe");
    let events = run_in_subscribed(&client, &mut deliveries, &id, "local/echo", "question two").await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&events));
    let compacted = compact(&client, &id, None).await.expect("session.compact after the restart");
    assert!(compacted.compacted, "{compacted:?}");
}

/// A focus is input like a run's: `run.start`, `run.steer`, goals, delegations and producer messages refuse
/// anything over `[limits] max_input_bytes` with `input_too_large` before writing it, but `session.compact` writes
/// any focus into `compaction_started` and sends it to the model.
#[tokio::test]
async fn a_focus_over_the_input_limit_is_refused_like_any_input() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\nmax_input_bytes = 1024\n".into()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    run_in_subscribed(&client, &mut deliveries, &id, "local/echo", "question one").await;
    let too_long = "x".repeat(4_000);
    let run = client.call::<method::RunStart>(troupe_protocol::types::run::RunStartParams {
        session_id: id.clone(),
        client_run_id: troupe_runtime::clock::new_id(),
        selection: echo_selection(),
        input: too_long.clone(),
        reset_fallback: false,
        attachments: Vec::new(),
    });
    let refused = within("run.start", run).await.expect_err("an input over the limit");
    let code = |error: &troupe_protocol::client::ClientError| match error {
        troupe_protocol::client::ClientError::Rpc(error) => error.typed_code().unwrap_or("").to_owned(),
        other => format!("{other:?}"),
    };
    assert_eq!(code(&refused), "input_too_large");
    let answer = compact(&client, &id, Some(&too_long)).await;
    match answer {
        Err(error) => assert_eq!(code(&error), "input_too_large"),
        Ok(result) => panic!("a focus of 4,000 bytes over a limit of 1,024 was accepted: {result:?}"),
    }
}

/// The summary is asked to stay under 4,096 tokens, but nothing holds the model to it: a summary larger than the
/// model's whole context window is committed, and from then on every request starts with more than the window
/// holds (each auto compaction summarizes the oversized summary again, which cannot fit either). A summary that
/// does not fit the window should fail the compaction (or be cut), not be committed.
#[tokio::test]

async fn a_summary_larger_than_the_context_window_is_not_committed() {
    let huge = format!("SUMMARY {}", "the parser was rewritten; ".repeat(8_000));
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        openai_text("answer one"),
        openai_text(&huge),
        openai_text("answer two"),
    ])
    .await;
    let (_daemon, client, mut deliveries, id) = vendor_session(
        &vendor,
        DaemonSetup {
            config_toml: Some(format!("[models.\"{MODEL}\"]\ncontext_window = 16000\n")),
            ..DaemonSetup::default()
        },
    )
    .await;
    client.subscribe(&id, None).await.expect("subscribe");
    run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question one").await;
    let compacted = compact(&client, &id, None).await.expect("session.compact");
    let window_bytes = 16_000 * troupe_runtime::compaction::BYTES_PER_TOKEN as usize;
    assert!(huge.len() > window_bytes, "the summary alone is over the window");
    assert!(
        !compacted.compacted,
        "a summary of {} bytes (about {} tokens) was committed for a window of 16,000 tokens",
        huge.len(),
        huge.len() / 4
    );
}

/// With a context window smaller than the system prompt and tool specs alone, no compaction can make a request
/// fit; yet every model turn compacts first (the first run of a new session too, whose only history is its own
/// input, which the model then sees only as a summary), doubling the requests and paying for summaries that
/// change nothing.
#[tokio::test]

async fn no_auto_compaction_when_the_history_is_not_what_overflows() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        openai_text("SUMMARY of question one"),
        openai_text("answer one"),
        openai_text("answer one"),
    ])
    .await;
    let (_daemon, client, mut deliveries, id) = vendor_session(
        &vendor,
        DaemonSetup {
            config_toml: Some(format!(
                "[models.\"{MODEL}\"]\ncontext_window = 200\n\n[compaction]\nauto = true\nreserve_tokens = 10\n"
            )),
            ..DaemonSetup::default()
        },
    )
    .await;
    client.subscribe(&id, None).await.expect("subscribe");
    let events = run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question one").await;
    let compactions =
        events.iter().filter(|event| matches!(event.payload, EventPayload::CompactionStarted { .. })).count();
    let requests = chat_requests(&vendor);
    let fixed = requests.last().map(|body| {
        let system: usize = body["messages"][0]["content"].as_str().map_or(0, str::len);
        system + body["tools"].to_string().len()
    });
    assert_eq!(
        compactions,
        0,
        "a first run compacted its own input although the system prompt and tools alone take {fixed:?} bytes, \
         over a window of 200 tokens: {:?}",
        kinds(&events)
    );
}

mod tool_history {
    //! A compaction of a history whose tool results emitted messages (an attachment among them), with a call left
    //! unanswered by a cancelled run and terminated late: the summary request, eliding the oldest units to fit the
    //! window, and the next run's request stay valid for OpenAI (every tool message answers a call of the assistant
    //! message right before its group, every call is answered, no other message inside a group).

    use serde_json::{Value, json};
    use troupe_protocol::types::events::{EventPayload, StoredEvent, ToolCallRecord};
    use troupe_protocol::types::run::{
        MessagePart, MessageRole, PersistedToolResult, ToolEmittedMessage, ToolResultStatus,
    };

    use super::super::support::*;
    use super::{MODEL, chat_requests, compact, connect_vendor};
    use troupe_test_support::FakeServer;
    use troupe_test_support::replies::{models_list, openai_text};

    const SESSION: &str = "01957a1c-3f00-7a10-8b20-3c4d5e6f7a99";

    fn line(seq: u64, run_id: &str, payload: EventPayload) -> String {
        let event = StoredEvent {
            session_id: SESSION.into(),
            run_id: Some(run_id.to_owned()),
            seq,
            timestamp: format!("2026-01-01T00:00:{seq:02}.000Z"),
            origin: None,
            payload,
        };
        serde_json::to_string(&event).unwrap()
    }

    fn started(seq: u64, run_id: &str, input: &str) -> String {
        line(
            seq,
            run_id,
            EventPayload::RunStarted {
                client_run_id: format!("c-{run_id}"),
                selection: echo_selection(),
                input: input.into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        )
    }

    fn committed(seq: u64, run_id: &str, text: &str, calls: &[&str]) -> String {
        let tool_calls = calls
            .iter()
            .map(|id| ToolCallRecord { tool_call_id: (*id).into(), tool: "probe".into(), arguments: json!({}) })
            .collect();
        line(
            seq,
            run_id,
            EventPayload::ModelTurnCommitted {
                attempt_id: format!("a{seq}"),
                model: "local/echo".into(),
                fallback_index: 0,
                text: text.into(),
                reasoning: None,
                tool_calls,
            },
        )
    }

    fn terminated(seq: u64, run_id: &str, id: &str, messages: Vec<ToolEmittedMessage>) -> String {
        let result = PersistedToolResult {
            status: ToolResultStatus::Ok,
            output: format!("result of {id}: {}", "data ".repeat(4_000)),
            display: None,
            output_ref: None,
            additional_messages: messages,
        };
        line(seq, run_id, EventPayload::ToolCallTerminated { tool_call_id: id.into(), result })
    }

    fn text(role: MessageRole, text: &str) -> ToolEmittedMessage {
        ToolEmittedMessage { role, parts: vec![MessagePart::Text { text: text.into() }] }
    }

    fn log() -> Vec<String> {
        let chart = ToolEmittedMessage {
            role: MessageRole::User,
            parts: vec![
                MessagePart::Text { text: "see the chart".into() },
                MessagePart::File { path: "artifacts/chart.png".into(), mime_type: "image/png".into(), name: None },
            ],
        };
        vec![
            session_created_line(SESSION, json!({"type": "root"})),
            started(2, "r0", "first input"),
            committed(3, "r0", "", &["c1", "c2", "c3"]),
            terminated(4, "r0", "c1", vec![chart]),
            terminated(5, "r0", "c2", vec![text(MessageRole::System, "remember the budget")]),
            terminated(6, "r0", "c3", vec![text(MessageRole::User, "a note from c3")]),
            committed(7, "r0", "done", &[]),
            line(8, "r0", EventPayload::RunCompleted { final_text: Some("done".into()) }),
            started(9, "r1", "second input"),
            committed(10, "r1", "", &["c4", "c5"]),
            line(11, "r1", EventPayload::RunCancelled { reason: Some("cancelled by a client".into()) }),
            // The cancelled call's process ended after its run: its result comes late; c5 never ends.
            terminated(12, "r1", "c4", vec![text(MessageRole::User, "late note")]),
        ]
    }

    /// Panics unless every `tool` message answers a call of the assistant message opening its group and every
    /// call of an assistant message is answered right after it.
    fn assert_valid_for_openai(body: &Value) {
        let messages = body["messages"].as_array().expect("messages");
        let mut index = 0;
        while index < messages.len() {
            let message = &messages[index];
            assert_ne!(message["role"], "tool", "a tool message outside a group at {index}: {body}");
            index += 1;
            let calls: Vec<&str> = message["tool_calls"]
                .as_array()
                .map(|calls| calls.iter().map(|call| call["id"].as_str().expect("call id")).collect())
                .unwrap_or_default();
            let mut answered = Vec::new();
            while index < messages.len() && messages[index]["role"] == "tool" {
                answered.push(messages[index]["tool_call_id"].as_str().expect("tool_call_id"));
                index += 1;
            }
            let (mut calls, mut answered) = (calls, answered);
            calls.sort_unstable();
            answered.sort_unstable();
            assert_eq!(calls, answered, "the calls of message {} and the results after it: {body}", index);
        }
    }

    #[tokio::test]
    async fn a_compacted_tool_history_keeps_every_request_valid_for_openai() {
        let data_dir = tempfile::tempdir().unwrap();
        write_session_log(data_dir.path(), SESSION, &log());
        std::fs::create_dir_all(data_dir.path().join("artifacts")).unwrap();
        std::fs::write(data_dir.path().join("artifacts/chart.png"), b"\x89PNG\r\n\x1a\nfake").unwrap();
        let vendor = FakeServer::start(vec![models_list(&["gpt-c"]), openai_text("answer three")]).await;
        let daemon = TestDaemon::start_with(DaemonSetup {
            data_dir: Some(data_dir),
            config_toml: Some(format!(
                "[models.\"{MODEL}\"]\ncontext_window = 16000\n\n[compaction]\nreserve_tokens = 100\n"
            )),
            ..DaemonSetup::default()
        });
        let (client, mut deliveries) = daemon.client().await;
        connect_vendor(&client, &vendor).await;
        client.subscribe(SESSION, None).await.expect("subscribe");
        // The session's latest run used local/echo, so the echo model writes this summary; the vendor's summary
        // request is checked by the next test.
        let compacted = compact(&client, SESSION, None).await.expect("session.compact");
        assert!(compacted.compacted, "{compacted:?}");
        assert!(chat_requests(&vendor).is_empty(), "the echo model summarized");
        let events = run_in_subscribed(&client, &mut deliveries, SESSION, MODEL, "third input").await;
        assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&events));
        let last = chat_requests(&vendor).last().cloned().expect("the run's request");
        assert_valid_for_openai(&last);
    }

    /// The summary request itself, asked of the vendor's model: valid with units elided.
    #[tokio::test]
    async fn a_summary_request_eliding_units_is_valid_for_openai() {
        let data_dir = tempfile::tempdir().unwrap();
        write_session_log(data_dir.path(), SESSION, &log());
        let vendor = FakeServer::start(vec![
            models_list(&["gpt-c"]),
            openai_text("answer"),
            openai_text("SUMMARY of the probes"),
        ])
        .await;
        let daemon = TestDaemon::start_with(DaemonSetup {
            data_dir: Some(data_dir),
            config_toml: Some(format!(
                "[models.\"{MODEL}\"]\ncontext_window = 12000\n\n[compaction]\nauto = false\nreserve_tokens = 100\n"
            )),
            ..DaemonSetup::default()
        });
        let (client, mut deliveries) = daemon.client().await;
        connect_vendor(&client, &vendor).await;
        client.subscribe(SESSION, None).await.expect("subscribe");
        // A run on the vendor's model makes it the session's next model, and its request is checked too.
        run_in_subscribed(&client, &mut deliveries, SESSION, MODEL, "third input").await;
        assert_valid_for_openai(&chat_requests(&vendor)[0]);
        let compacted = compact(&client, SESSION, None).await.expect("session.compact");
        assert!(compacted.compacted, "{compacted:?}");
        let summary_request = &chat_requests(&vendor)[1];
        assert_valid_for_openai(summary_request);
        assert!(summary_request.to_string().contains("tool result elided"), "units were elided to fit");
    }
}
