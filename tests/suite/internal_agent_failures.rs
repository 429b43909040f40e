//! Internal-agent model failures over the real wire: when the model request of a compaction's summary or of an
//! automatic title fails, the session records `internal_agent_failed` with the failure's `ModelErrorSummary`, whose
//! `response_body` is the same bounded, terminal-safe `DiagnosticText` a run's failures carry (the fake OpenAI
//! vendor answers with a 10 KiB body full of escape sequences and bidi overrides).

use troupe_protocol::diagnostic::{MAX_DIAGNOSTIC_BYTES, TRUNCATION_MARKER};
use troupe_protocol::types::common::ModelErrorSummary;
use troupe_protocol::types::events::{CompactionOutcome, EventPayload, InternalAgent, StoredEvent, TitleChangeKind};

use super::compaction::{MODEL, compact, vendor_session};
use super::support::*;
use troupe_test_support::replies::escape_laden_body;
use troupe_test_support::replies::{models_list, openai_text};
use troupe_test_support::{FakeResponse, FakeServer};

/// A 400 whose body is 10 KiB of escape sequences and bidi overrides, then 6,000 plain bytes: more than a
/// DiagnosticText may hold even once cleaned.
fn escape_laden_400() -> FakeResponse {
    FakeResponse::status(400, &[], format!("{}{}", escape_laden_body(), "z".repeat(6000)))
}

/// Asserts that `error` is the summary of [`escape_laden_400`]: kept, cleaned and cut.
fn assert_clean_bounded_body(error: &ModelErrorSummary) {
    assert_eq!((error.kind.as_str(), error.http_status), ("invalid_request", Some(400)), "{error:?}");
    let body = error.response_body.as_deref().expect("the vendor's body is kept");
    assert!(body.starts_with("{\"error\":{\"message\":\"server exploded\""), "{body:.80}");
    assert!(body.len() <= MAX_DIAGNOSTIC_BYTES && body.ends_with(TRUNCATION_MARKER), "{} bytes", body.len());
    assert!(body.contains("redred"), "the text between the escapes is kept: {body:.80}");
    assert!(!body.contains('\u{1b}') && !body.contains("[31m") && !body.contains('\u{202e}'), "{body:.80}");
}

fn internal_failures(events: &[StoredEvent]) -> Vec<&StoredEvent> {
    events.iter().filter(|event| matches!(event.payload, EventPayload::InternalAgentFailed { .. })).collect()
}

#[tokio::test]
async fn a_failed_summary_request_records_its_model_error_with_a_clean_bounded_body() {
    let vendor = FakeServer::start(vec![models_list(&["gpt-c"]), openai_text("answer one"), escape_laden_400()]).await;
    let (_daemon, client, mut deliveries, id) = vendor_session(&vendor, DaemonSetup::default()).await;
    client.subscribe(&id, None).await.expect("subscribe");
    start_run(&client, &id, selection_of("default", MODEL), "question one").await;
    events_until(&mut deliveries, is_terminal).await;

    let result = compact(&client, &id, None).await.expect("session.compact");
    assert!(!result.compacted, "{result:?}");
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::CompactionEnded { .. })).await;
    let Some(EventPayload::CompactionStarted { compaction_id, .. }) =
        events.iter().map(|event| &event.payload).find(|p| matches!(p, EventPayload::CompactionStarted { .. }))
    else {
        panic!("no compaction_started: {:?}", kinds(&events))
    };
    let failures = internal_failures(&events);
    assert_eq!(failures.len(), 1, "one failed request, one record: {:?}", kinds(&events));
    let EventPayload::InternalAgentFailed { agent, model, compaction_id: failed_compaction, error } =
        &failures[0].payload
    else {
        unreachable!()
    };
    assert_eq!(
        (*agent, model.as_str(), failed_compaction.as_deref(), failures[0].origin.as_deref()),
        (InternalAgent::ContextCompaction, MODEL, Some(compaction_id.as_str()), Some("engine:compaction"))
    );
    assert_clean_bounded_body(error);
    let ended = events.last().unwrap();
    assert!(
        matches!(&ended.payload, EventPayload::CompactionEnded { outcome: CompactionOutcome::Failed, reason: Some(reason), .. }
            if reason.starts_with(&format!("{MODEL} could not summarize: HTTP 400"))),
        "{:?}",
        ended.payload
    );
}

#[tokio::test]
async fn a_failed_title_request_records_its_model_error_and_the_title_falls_back() {
    // The run's request and the title's go out together: both get a 400 with the escape-laden body (a 400 is not
    // retried), so the run fails and the title is the input's first line.
    let vendor = FakeServer::start(vec![models_list(&["gpt-c"]), escape_laden_400(), escape_laden_400()]).await;
    let setup = DaemonSetup { config_toml: Some("[titles]\nauto = true\n".to_owned()), ..DaemonSetup::default() };
    let (_daemon, client, mut deliveries, id) = vendor_session(&vendor, setup).await;
    client.subscribe(&id, None).await.expect("subscribe");
    start_run(&client, &id, selection_of("default", MODEL), "rename the parser module\nand its tests").await;
    let (mut ended, mut titled) = (false, false);
    let events = events_until(&mut deliveries, |event| {
        ended |= is_terminal(event);
        titled |= matches!(event.payload, EventPayload::SessionTitleCommitted { change: TitleChangeKind::Auto, .. });
        ended && titled
    })
    .await;

    let failures = internal_failures(&events);
    assert_eq!(failures.len(), 1, "{:?}", kinds(&events));
    let EventPayload::InternalAgentFailed { agent, model, compaction_id, error } = &failures[0].payload else {
        unreachable!()
    };
    assert_eq!(
        (*agent, model.as_str(), compaction_id.as_deref(), failures[0].run_id.as_deref()),
        (InternalAgent::SessionTitle, MODEL, None, None)
    );
    assert_eq!(failures[0].origin.as_deref(), Some("engine:title"));
    assert_clean_bounded_body(error);
    let title = events.iter().find_map(|event| match &event.payload {
        EventPayload::SessionTitleCommitted { title, change: TitleChangeKind::Auto, .. } => title.clone(),
        _ => None,
    });
    assert_eq!(title.as_deref(), Some("rename the parser module"));
}
