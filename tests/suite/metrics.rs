//! `GET /metrics` over real HTTP: refused without the bearer token (unless `metrics_public = true`), and its
//! series move as a `local/scripted` run with a tool call and an approval goes by, as a fake OpenAI vendor answers
//! and then refuses, and as an idle session hibernates.

use serde_json::json;
use troupe_protocol::method;
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRespondParams};
use troupe_protocol::types::events::EventPayload;

use super::metrics_support::*;
use super::support::*;

#[tokio::test]
async fn metrics_are_refused_without_the_bearer_token() {
    let daemon = TestDaemon::start();
    for authorization in [None, Some("Bearer wrong-token".to_owned()), Some(format!("Basic {}", daemon.token))] {
        let scrape = get_metrics(&daemon, authorization.as_deref()).await;
        assert_eq!(scrape.status, 401, "{authorization:?}: {}", scrape.body);
        assert!(scrape.headers.contains("www-authenticate: bearer"), "{}", scrape.headers);
        assert!(!scrape.body.contains("troupe_"), "{}", scrape.body);
    }
    let samples = scrape(&daemon).await;
    assert_eq!(value(&samples, r#"troupe_runs_ended_total{outcome="completed"}"#), 0.0);
}

#[tokio::test]
async fn metrics_public_serves_them_without_a_token() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("metrics_public = true\n".to_owned()),
        ..DaemonSetup::default()
    });
    let scrape = get_metrics(&daemon, None).await;
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    let samples = samples(&scrape.body);
    assert_eq!(value(&samples, "troupe_connections_open"), 0.0);
    assert!(scrape.body.ends_with("# EOF\n"), "{}", scrape.body);
}

#[tokio::test]
async fn a_run_with_a_tool_call_and_an_approval_moves_the_counters() {
    let (daemon, client, mut deliveries) = scripted_daemon(write_file_script()).await;

    // Protocol-level refusals: a handshake with the wrong version, and a request before any handshake.
    let mut raw = daemon.raw().await;
    let refused = raw.call(1, "handshake", json!({"protocol_version": 19})).await;
    assert!(refused["error"].is_object(), "{refused}");
    let early = raw.call(2, "session.list", json!({})).await;
    assert_eq!(early["error"]["code"], -32001, "{early}");

    let WaitingRun { session_id, approval: record, .. } =
        run_waiting_for_approval(&daemon, &client, &mut deliveries).await;

    // While the run waits: one run active, one approval pending, the session live, two clients connected.
    let waiting = eventually_value(&daemon, "troupe_approvals_pending", 1.0).await;
    assert_eq!(value(&waiting, "troupe_runs_active"), 1.0);
    assert_eq!(value(&waiting, "troupe_sessions_live"), 1.0);
    assert_eq!(value(&waiting, "troupe_sessions_hibernated"), 0.0);
    assert_eq!(value(&waiting, "troupe_connections_open"), 2.0);
    assert_eq!(value(&waiting, r#"troupe_runs_ended_total{outcome="completed"}"#), 0.0);

    // Answered from a second connection, as a reviewer would.
    let (reviewer, _reviewer_deliveries) = daemon.client().await;
    within(
        "approval.respond",
        reviewer.call::<method::ApprovalRespond>(ApprovalRespondParams {
            session_id: record.session_id.clone(),
            approval_id: record.approval_id.clone(),
            request_revision: record.revision,
            operation_fingerprint: record.operation_fingerprint.clone(),
            client_response_id: "metrics-answer".into(),
            decision: ApprovalDecision::ApproveOnce,
            feedback: None,
        }),
    )
    .await
    .expect("approval.respond");
    let rest = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(rest.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })), "{rest:?}");

    let ended = eventually_value(&daemon, "troupe_runs_active", 0.0).await;
    let expect = |series: &str, expected: f64| assert_eq!(value(&ended, series), expected, "{series}");
    expect(r#"troupe_runs_ended_total{outcome="completed"}"#, 1.0);
    expect(r#"troupe_runs_ended_total{outcome="failed"}"#, 0.0);
    expect(r#"troupe_tool_calls_total{tool="write_file",status="ok"}"#, 1.0);
    expect("troupe_approvals_pending", 0.0);
    // The two clients' handshakes and the raw socket's refused one.
    expect(r#"troupe_handshakes_total{outcome="ok"}"#, 2.0);
    expect(r#"troupe_handshakes_total{outcome="refused"}"#, 1.0);
    expect(r#"troupe_requests_total{method="handshake",outcome="invalid_params"}"#, 1.0);
    expect(r#"troupe_requests_total{method="session.list",outcome="handshake_required"}"#, 1.0);
    expect(r#"troupe_requests_total{method="run.start",outcome="ok"}"#, 1.0);
    expect(r#"troupe_requests_total{method="approval.respond",outcome="ok"}"#, 1.0);
    expect(r#"troupe_request_duration_seconds_count{method="run.start"}"#, 1.0);
    // One model request per turn, both answered.
    expect(r#"troupe_model_request_duration_seconds_count{provider="local"}"#, 2.0);
    assert!(!ended.keys().any(|series| series.starts_with("troupe_model_errors_total")), "{ended:?}");
    expect(r#"troupe_outbound_dropped_total{kind="event"}"#, 0.0);
    expect("troupe_gaps_sent_total", 0.0);

    // Every line of the session's log was counted once it was durable, each batch with one fsync.
    let log = daemon.data_path().join("sessions").join(&session_id).join("events.jsonl");
    let lines = std::fs::read_to_string(&log).expect("the log").lines().count() as f64;
    let samples = eventually_value(&daemon, "troupe_events_appended_total", lines).await;
    let fsyncs = value(&samples, "troupe_event_log_fsync_duration_seconds_count");
    assert!((1.0..=lines).contains(&fsyncs), "{fsyncs} fsyncs for {lines} events");
}

#[tokio::test]
async fn sessions_are_counted_live_then_hibernated() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        hibernate_after: Some(std::time::Duration::from_millis(100)),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    daemon.create_session(&client).await;
    // Nobody subscribes, so the idle session is unloaded after `hibernate_after`; it stays known on disk.
    let hibernated = eventually_value(&daemon, "troupe_sessions_hibernated", 1.0).await;
    assert_eq!(value(&hibernated, "troupe_sessions_live"), 0.0);
    assert_eq!(value(&hibernated, r#"troupe_requests_total{method="session.create",outcome="ok"}"#), 1.0);
}

#[tokio::test]
async fn model_requests_and_their_errors_are_counted_by_provider_and_kind() {
    use super::compaction::{MODEL, vendor_session};
    use troupe_test_support::FakeServer;
    use troupe_test_support::replies::{models_list, openai_error, openai_text};

    let vendor =
        FakeServer::start(vec![models_list(&["gpt-c"]), openai_text("hello"), openai_error(401, "bad key")]).await;
    let (daemon, client, mut deliveries, session_id) = vendor_session(&vendor, DaemonSetup::default()).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let completed = run_in_subscribed(&client, &mut deliveries, &session_id, MODEL, "one").await;
    assert!(matches!(completed.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    // A 401 is not retried and the chain has no other model: the run fails.
    let failed = run_in_subscribed(&client, &mut deliveries, &session_id, MODEL, "two").await;
    assert!(matches!(failed.last().map(|event| &event.payload), Some(EventPayload::RunFailed { .. })), "{failed:?}");

    let samples = eventually_value(&daemon, "troupe_runs_active", 0.0).await;
    let expect = |series: &str, expected: f64| assert_eq!(value(&samples, series), expected, "{series}");
    expect(r#"troupe_model_request_duration_seconds_count{provider="openai"}"#, 2.0);
    expect(r#"troupe_model_errors_total{provider="openai",kind="auth"}"#, 1.0);
    expect(r#"troupe_runs_ended_total{outcome="completed"}"#, 1.0);
    expect(r#"troupe_runs_ended_total{outcome="failed"}"#, 1.0);
}

/// A run's quick tool turns share their `fdatasync`s: what a tool call and the next request make (its start, its
/// result, the next attempt's start), which nothing waits for, waits for the next turn's commit and is written with
/// it (`[limits] batch_linger_ms`, long here so that a loaded machine cannot split a turn). Each turn had four
/// batches of its own before.
#[tokio::test]
async fn a_quick_tool_turn_shares_one_fsync_with_the_next_turns_commit() {
    let tool_turns = 9;
    let mut turns: Vec<serde_json::Value> =
        (0..tool_turns).map(|_| json!({"tool_calls": [{"tool": "list_dir", "arguments": {}}]})).collect();
    turns.push(json!({"text": "listed"}));
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\nbatch_linger_ms = 100\n".to_owned()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), json!({ "turns": turns })).await;
    let session_id = daemon.create_session(&client).await.session_id;
    set_mode(&client, &session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let log = daemon.data_path().join("sessions").join(&session_id).join("events.jsonl");
    let lines_before = std::fs::read_to_string(&log).expect("the log").lines().count() as f64;
    let before = eventually_value(&daemon, "troupe_events_appended_total", lines_before).await;
    let fsyncs_before = value(&before, "troupe_event_log_fsync_duration_seconds_count");

    start_run(&client, &session_id, selection_of("default", "local/scripted"), "list it again and again").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })), "{events:?}");
    let results = events.iter().filter(|event| matches!(event.payload, EventPayload::ToolCallTerminated { .. }));
    assert_eq!(results.count(), tool_turns);

    let lines = std::fs::read_to_string(&log).expect("the log").lines().count() as f64;
    let after = eventually_value(&daemon, "troupe_events_appended_total", lines).await;
    let fsyncs = value(&after, "troupe_event_log_fsync_duration_seconds_count") - fsyncs_before;
    // `run_started`, then about one batch per tool turn (the turn's commit with the previous call's events), the
    // last turn with the run's end, and the session's own events (its title): 11 to 13 here. With
    // `batch_linger_ms = 0` this run takes 39, four batches a turn; the bound leaves room for a loaded machine.
    let most = (2 * tool_turns) as f64;
    assert!(fsyncs <= most, "{fsyncs} fsyncs for {} events of {tool_turns} tool turns", lines - lines_before);
}
