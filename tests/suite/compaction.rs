//! Compaction over the real socket, against the fake OpenAI vendor: a manual `session.compact` with a scripted
//! summary after which the next request starts with the summary; nothing to compact; a busy session; cancelling a
//! slow compaction; automatic compaction under a small configured context window; overflow recovery on a 400
//! context-length error, and a second overflow failing the run. Usage of the summary requests is checked exactly.

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::events::{CompactionOutcome, CompactionTrigger, EventPayload, StoredEvent, UsagePurpose};
use troupe_protocol::types::run::RunIdParams;
use troupe_protocol::types::session::{SessionCompactParams, SessionCompactResult};

use super::support::*;
use troupe_test_support::replies::{models_list, openai_text};
use troupe_test_support::{FakeResponse, FakeServer};

pub(super) const MODEL: &str = "openai/gpt-c";

/// A streamed OpenAI answer of one text that reports its usage.
fn openai_text_with_usage(text: &str, input_tokens: u64, output_tokens: u64) -> FakeResponse {
    let chunk = |value: Value| format!("data: {value}\n\n");
    FakeResponse::Sse {
        pieces: vec![
            chunk(json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})),
            chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            chunk(json!({"choices": [], "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens}})),
            "data: [DONE]\n\n".to_owned(),
        ],
    }
}

/// OpenAI's answer to a request that does not fit the model's context window.
pub(super) fn context_length_exceeded() -> FakeResponse {
    let body = json!({"error": {
        "message": "This model's maximum context length is 1000 tokens. However, your messages resulted in 5000 tokens.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }});
    FakeResponse::status(400, &[], body.to_string())
}

pub(super) async fn connect_vendor(client: &Client, vendor: &FakeServer) {
    connect_provider(client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
}

/// A daemon started with `setup` and connected to `vendor`, a client of it and a new session's id.
pub(super) async fn vendor_session(
    vendor: &FakeServer,
    setup: DaemonSetup,
) -> (TestDaemon, Client, Deliveries, String) {
    let daemon = TestDaemon::start_with(setup);
    let (client, deliveries) = daemon.client().await;
    connect_vendor(&client, vendor).await;
    let id = daemon.create_session(&client).await.session_id;
    (daemon, client, deliveries, id)
}

async fn run(client: &Client, deliveries: &mut Deliveries, session_id: &str, input: &str) -> Vec<StoredEvent> {
    let run_id = start_run(client, session_id, selection_of("default", MODEL), input).await;
    events_until(deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await
}

pub(super) async fn compact(
    client: &Client,
    session_id: &str,
    focus: Option<&str>,
) -> Result<SessionCompactResult, ClientError> {
    within(
        "session.compact",
        client.call::<method::SessionCompact>(SessionCompactParams {
            session_id: session_id.into(),
            focus: focus.map(str::to_owned),
        }),
    )
    .await
}

fn error_code(error: &ClientError) -> String {
    match error {
        ClientError::Rpc(error) => error.typed_code().unwrap_or("").to_owned(),
        other => format!("{other:?}"),
    }
}

/// The chat requests the vendor received, as JSON bodies.
pub(super) fn chat_requests(vendor: &FakeServer) -> Vec<Value> {
    vendor.bodies_to("/chat/completions")
}

/// The text of each message of a chat request, with its role.
fn conversation(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|message| {
            let text = message["content"].as_str().map(str::to_owned).unwrap_or_else(|| message["content"].to_string());
            (message["role"].as_str().unwrap_or("").to_owned(), text)
        })
        .collect()
}

/// The non-system messages of a chat request.
fn history_of(body: &Value) -> Vec<(String, String)> {
    conversation(body).into_iter().filter(|(role, _)| role != "system").collect()
}

fn compaction_events(events: &[StoredEvent]) -> Vec<&EventPayload> {
    events
        .iter()
        .map(|event| &event.payload)
        .filter(|payload| {
            matches!(
                payload,
                EventPayload::CompactionStarted { .. }
                    | EventPayload::ContextCheckpointCommitted { .. }
                    | EventPayload::CompactionEnded { .. }
            ) || matches!(payload, EventPayload::ModelUsageRecorded { purpose: UsagePurpose::Compaction, .. })
        })
        .collect()
}

#[tokio::test]
async fn a_manual_compaction_commits_the_summary_and_the_next_request_starts_with_it() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        openai_text("answer one"),
        openai_text_with_usage("SUMMARY: the user asked question one; it was answered.", 40, 7),
        openai_text("answer two"),
        openai_text("answer three"),
        openai_text("answer four"),
    ])
    .await;
    // Configured prices replace the built-in table's in the stamped cost.
    let (daemon, client, mut deliveries, id) = vendor_session(
        &vendor,
        DaemonSetup {
            config_toml: Some(format!(
                "[models.\"{MODEL}\"]\npricing = {{ input_per_million_usd = 1.0, output_per_million_usd = 2.0 }}\n"
            )),
            ..DaemonSetup::default()
        },
    )
    .await;

    // Nothing to compact yet: skipped, with a reason, and the session stays usable.
    let skipped = compact(&client, &id, None).await.expect("compact an empty session");
    assert!(!skipped.compacted);
    assert!(skipped.reason.as_deref().unwrap_or("").contains("nothing to compact"), "{skipped:?}");

    client.subscribe(&id, None).await.expect("subscribe");
    let first = run(&client, &mut deliveries, &id, "question one").await;
    let end_of_first = first.last().unwrap().seq;

    let result = compact(&client, &id, Some("the parser")).await.expect("session.compact");
    assert_eq!(result, SessionCompactResult { compacted: true, reason: None, cancellation_reason: None });
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::CompactionEnded { .. })).await;
    let compaction = compaction_events(&events);
    assert_eq!(compaction.len(), 4, "{compaction:?}");
    assert!(
        matches!(compaction[0], EventPayload::CompactionStarted { trigger: CompactionTrigger::Manual, focus, model, .. }
        if focus.as_deref() == Some("the parser") && model == MODEL)
    );
    assert!(
        matches!(compaction[1], EventPayload::ModelUsageRecorded {
            model, agent, input_tokens: 40, output_tokens: 7, estimated_cost_usd: Some(cost), ..
        } if model == MODEL && agent == "default" && (cost - 54e-6).abs() < 1e-12),
        "{:?}",
        compaction[1]
    );
    let EventPayload::ContextCheckpointCommitted {
        summary,
        through_seq,
        compacted_messages,
        elided_tool_results,
        trigger,
        ..
    } = compaction[2]
    else {
        panic!("{compaction:?}")
    };
    assert_eq!(summary, "SUMMARY: the user asked question one; it was answered.");
    assert_eq!((*compacted_messages, *elided_tool_results, *trigger), (2, 0, CompactionTrigger::Manual));
    // The checkpoint covers everything before the compaction started (the skipped one's events included).
    assert!(*through_seq >= end_of_first, "{through_seq} < {end_of_first}");
    assert!(matches!(compaction[3], EventPayload::CompactionEnded { outcome: CompactionOutcome::Committed, .. }));

    // The summary request saw the conversation and was told the focus.
    let requests = chat_requests(&vendor);
    let summary_request = history_of(&requests[1]);
    assert_eq!(summary_request[0], ("user".to_owned(), "question one".to_owned()));
    assert_eq!(summary_request[1], ("assistant".to_owned(), "answer one".to_owned()));
    let instruction = &summary_request.last().unwrap().1;
    assert!(instruction.contains("Summarize") && instruction.ends_with("Focus the summary on: the parser"));
    assert!(requests[1]["tools"].as_array().is_none_or(Vec::is_empty), "a summary request offers no tools");

    // The next run's request starts with the summary, not with the compacted turns.
    run(&client, &mut deliveries, &id, "question two").await;
    let requests = chat_requests(&vendor);
    let history = history_of(requests.last().unwrap());
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0].0, "user");
    assert!(history[0].1.starts_with("[Summary of the earlier conversation."), "{}", history[0].1);
    assert!(history[0].1.contains("not available") && history[0].1.ends_with("it was answered."));
    assert_eq!(history[1], ("user".to_owned(), "question two".to_owned()));

    // After a restart the history is rebuilt from the log: still the summary, then what followed it.
    drop((client, deliveries));
    let data_dir = daemon.stop();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(&id, None).await.expect("subscribe");
    run(&client, &mut deliveries, &id, "question three").await;
    let history = history_of(chat_requests(&vendor).last().unwrap());
    let texts: Vec<&str> = history.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert!(texts[0].starts_with("[Summary of the earlier conversation."));
    assert_eq!(texts[1..], ["question two", "answer two", "question three"]);

    // A revert to before the compaction hides the checkpoint: the history it replaced comes back.
    let revert =
        troupe_protocol::types::session::SessionRevertParams { session_id: id.clone(), through_seq: end_of_first };
    within("session.revert", client.call::<method::SessionRevert>(revert)).await.expect("revert");
    run(&client, &mut deliveries, &id, "question four").await;
    let history = history_of(chat_requests(&vendor).last().unwrap());
    let texts: Vec<&str> = history.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(texts, ["question one", "answer one", "question four"]);
}

#[tokio::test]
async fn a_busy_session_is_not_compacted_and_a_compaction_keeps_runs_out_until_cancelled() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        openai_text("answer one"),
        // The run that keeps the session busy, then the summary that never ends.
        FakeResponse::SseThenHold { pieces: vec![] },
        FakeResponse::SseThenHold { pieces: vec![] },
    ])
    .await;
    let (_daemon, client, mut deliveries, id) = vendor_session(&vendor, DaemonSetup::default()).await;
    client.subscribe(&id, None).await.expect("subscribe");
    run(&client, &mut deliveries, &id, "question one").await;

    // A run in flight: compacting is refused.
    let busy_run = start_run(&client, &id, selection_of("default", MODEL), "question two").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ModelAttemptStarted { .. })).await;
    let refused = compact(&client, &id, None).await.expect_err("a busy session");
    assert_eq!(error_code(&refused), "session_busy");
    within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id: busy_run.clone() }))
        .await
        .expect("cancel the run");
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&busy_run) && is_terminal(event)).await;

    // A slow compaction: runs are refused while it lasts, and `run.cancel` on its id cancels it.
    let (compacted, ()) = tokio::join!(compact(&client, &id, None), async {
        let started =
            events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::CompactionStarted { .. }))
                .await;
        let Some(EventPayload::CompactionStarted { compaction_id, .. }) = started.last().map(|event| &event.payload)
        else {
            unreachable!()
        };
        let refused = within(
            "run.start",
            client.call::<method::RunStart>(troupe_protocol::types::run::RunStartParams {
                session_id: id.clone(),
                client_run_id: troupe_runtime::clock::new_id(),
                selection: selection_of("default", MODEL),
                input: "question three".into(),
                reset_fallback: false,
                attachments: Vec::new(),
            }),
        )
        .await
        .expect_err("a session being compacted");
        assert_eq!(error_code(&refused), "session_busy");
        let revert = troupe_protocol::types::session::SessionRevertParams { session_id: id.clone(), through_seq: 1 };
        let refused = within("session.revert", client.call::<method::SessionRevert>(revert))
            .await
            .expect_err("a revert of a session being compacted");
        assert_eq!(error_code(&refused), "session_busy");
        let cancelled =
            within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id: compaction_id.clone() }))
                .await
                .expect("cancel the compaction");
        assert!(cancelled.cancelled);
    });
    let compacted = compacted.expect("session.compact");
    assert!(!compacted.compacted);
    assert_eq!(compacted.cancellation_reason.as_deref(), Some("cancelled by a client"));
    let ended =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::CompactionEnded { .. })).await;
    assert!(matches!(
        ended.last().unwrap().payload,
        EventPayload::CompactionEnded { outcome: CompactionOutcome::Cancelled, .. }
    ));
    assert!(
        !ended.iter().any(|event| matches!(event.payload, EventPayload::ContextCheckpointCommitted { .. })),
        "a cancelled compaction commits nothing"
    );
}

#[tokio::test]
async fn a_run_compacts_first_when_its_request_would_not_fit_the_configured_window() {
    // Inputs of ~10,000 estimated tokens each: the first fits a 16,000-token window, the first and the second do
    // not, and the summary plus the second do again.
    let big = |tag: &str| format!("{tag} {}", "lorem ipsum ".repeat(3_400));
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        openai_text("answer one"),
        openai_text_with_usage("SUMMARY of the first question", 9_000, 12),
        openai_text("answer two"),
    ])
    .await;
    let (_daemon, client, mut deliveries, id) = vendor_session(
        &vendor,
        DaemonSetup {
            config_toml: Some(format!(
                "[models.\"{MODEL}\"]\ncontext_window = 16000\n\n[compaction]\nauto = true\nreserve_tokens = 100\n"
            )),
            ..DaemonSetup::default()
        },
    )
    .await;
    client.subscribe(&id, None).await.expect("subscribe");
    let snapshot = within("snapshot", client.call::<method::RuntimeSnapshotGet>(Default::default()))
        .await
        .expect("runtime.snapshot.get")
        .snapshot;
    let info = snapshot.models.iter().find(|info| info.model == MODEL).expect("the configured model is listed");
    assert_eq!(info.context_window, Some(16_000));
    let first = run(&client, &mut deliveries, &id, &big("first")).await;
    assert!(compaction_events(&first).is_empty(), "the first request fits");

    let second = run(&client, &mut deliveries, &id, &big("second")).await;
    assert!(matches!(second.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&second));
    let compaction = compaction_events(&second);
    assert_eq!(compaction.len(), 4, "{compaction:?}");
    let origins: Vec<Option<&str>> = second
        .iter()
        .filter(|event| compaction.iter().any(|payload| std::ptr::eq(*payload, &event.payload)))
        .map(|event| event.origin.as_deref())
        .collect();
    assert_eq!(origins, [Some("engine:compaction"); 4]);
    assert!(matches!(compaction[0], EventPayload::CompactionStarted { trigger: CompactionTrigger::Auto, .. }));
    assert!(matches!(compaction[1], EventPayload::ModelUsageRecorded { input_tokens: 9_000, output_tokens: 12, .. }));
    assert!(matches!(
        compaction[2],
        EventPayload::ContextCheckpointCommitted { trigger: CompactionTrigger::Auto, compacted_messages: 3, .. }
    ));
    // The compaction comes before the run's request.
    let started = second.iter().position(|event| matches!(event.payload, EventPayload::CompactionStarted { .. }));
    let attempt = second.iter().position(|event| matches!(event.payload, EventPayload::ModelAttemptStarted { .. }));
    assert!(started < attempt, "{:?}", kinds(&second));

    let requests = chat_requests(&vendor);
    assert_eq!(requests.len(), 3, "first turn, summary, second turn");
    let history = history_of(&requests[2]);
    assert_eq!(history.len(), 1, "the checkpoint covers the second input too: {:?}", history.len());
    assert!(
        history[0].1.starts_with("[Summary of the earlier conversation.") && history[0].1.ends_with("first question")
    );
}

#[tokio::test]
async fn a_context_length_error_compacts_once_and_retries_and_a_second_one_fails_the_run() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-c"]),
        openai_text("answer one"),
        context_length_exceeded(),
        openai_text_with_usage("SUMMARY after overflow", 30, 5),
        openai_text("answer two"),
        // The third run overflows, compacts, and overflows again.
        context_length_exceeded(),
        openai_text("SUMMARY again"),
        context_length_exceeded(),
    ])
    .await;
    let (_daemon, client, mut deliveries, id) = vendor_session(&vendor, DaemonSetup::default()).await;
    client.subscribe(&id, None).await.expect("subscribe");
    run(&client, &mut deliveries, &id, "question one").await;

    let second = run(&client, &mut deliveries, &id, "question two").await;
    assert!(matches!(second.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&second));
    let abandoned = second.iter().find_map(|event| match &event.payload {
        EventPayload::AttemptAbandoned { error, will_retry, .. } => Some((error.kind.clone(), *will_retry)),
        _ => None,
    });
    assert_eq!(abandoned, Some(("context_length".to_owned(), true)));
    let compaction = compaction_events(&second);
    assert!(matches!(compaction[0], EventPayload::CompactionStarted { trigger: CompactionTrigger::Overflow, .. }));
    assert!(matches!(
        compaction[1],
        EventPayload::ModelUsageRecorded { input_tokens: 30, output_tokens: 5, purpose: UsagePurpose::Compaction, .. }
    ));
    assert!(matches!(
        compaction[2],
        EventPayload::ContextCheckpointCommitted { trigger: CompactionTrigger::Overflow, .. }
    ));
    assert!(matches!(compaction[3], EventPayload::CompactionEnded { outcome: CompactionOutcome::Committed, .. }));
    let requests = chat_requests(&vendor);
    let retried = history_of(requests.last().unwrap());
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert!(retried[0].1.ends_with("SUMMARY after overflow"));

    let third = run(&client, &mut deliveries, &id, "question three").await;
    let Some(EventPayload::RunFailed { model_error, .. }) = third.last().map(|event| &event.payload) else {
        panic!("{:?}", kinds(&third))
    };
    assert_eq!(model_error.as_ref().map(|error| error.kind.as_str()), Some("context_length"));
    let overflows = compaction_events(&third)
        .into_iter()
        .filter(|payload| matches!(payload, EventPayload::CompactionStarted { .. }))
        .count();
    assert_eq!(overflows, 1, "one recovery per turn");
}
