use std::time::Duration;

use troupe_protocol::RpcError;
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::server::{DroppedNotification, HandshakeOutcome, ServerObserver};
use troupe_protocol::types::daemon::DaemonStatusResult;
use troupe_protocol::types::run::ToolResultStatus;

use super::{Metrics, RunOutcome, SnapshotOutcome};
use crate::model::ModelErrorKind;

/// The value of the sample line `series` (name and labels exactly as encoded), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn every_family_without_open_labels_has_help_and_a_type_from_the_start() {
    let text = Metrics::new().encode();
    for (name, kind) in [
        ("troupe_connections_open", "gauge"),
        ("troupe_handshakes", "counter"),
        ("troupe_sessions_live", "gauge"),
        ("troupe_sessions_hibernated", "gauge"),
        ("troupe_runs_active", "gauge"),
        ("troupe_runs_ended", "counter"),
        ("troupe_session_loads", "counter"),
        ("troupe_events_appended", "counter"),
        ("troupe_event_log_fsync_duration_seconds", "histogram"),
        ("troupe_outbound_dropped", "counter"),
        ("troupe_gaps_sent", "counter"),
        ("troupe_approvals_pending", "gauge"),
    ] {
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name} {kind} missing in:\n{text}");
        assert!(text.contains(&format!("# HELP {name} ")), "help of {name} missing");
    }
    assert!(text.ends_with("# EOF\n"));
    assert_eq!(sample(&text, r#"troupe_runs_ended_total{outcome="cancelled"}"#), Some(0.0));
    assert_eq!(sample(&text, r#"troupe_session_loads_total{snapshot="refused"}"#), Some(0.0));
}

#[test]
fn counters_and_histograms_count_by_typed_labels() {
    let metrics = Metrics::new();
    metrics.handshake(HandshakeOutcome::Accepted);
    metrics.handshake(HandshakeOutcome::Refused);
    metrics.handshake(HandshakeOutcome::Accepted);
    metrics.request_finished("session.get", Ok(()), Some(Duration::from_millis(2)));
    metrics.request_finished("session.get", Err(&RpcError::engine(ErrorCode::SessionNotFound, "no", &[])), None);
    metrics.request_finished("unknown", Err(&RpcError::method_not_found("x")), Some(Duration::ZERO));
    metrics.run_ended(RunOutcome::Completed);
    metrics.run_ended(RunOutcome::Interrupted);
    metrics.log_committed(3, Duration::from_micros(300));
    metrics.log_committed(2, Duration::from_micros(900));
    metrics.notification_dropped(DroppedNotification::Event);
    metrics.notification_dropped(DroppedNotification::Transient);
    metrics.gap_sent();
    metrics.model_request("openai", Duration::from_millis(120), Some(ModelErrorKind::RateLimited));
    metrics.model_request("openai", Duration::from_millis(80), None);
    metrics.tool_call("shell", ToolResultStatus::Denied);
    let text = metrics.encode();
    let expect = |series: &str, value: f64| {
        assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
    };
    expect(r#"troupe_handshakes_total{outcome="ok"}"#, 2.0);
    expect(r#"troupe_handshakes_total{outcome="refused"}"#, 1.0);
    expect(r#"troupe_requests_total{method="session.get",outcome="ok"}"#, 1.0);
    expect(r#"troupe_requests_total{method="session.get",outcome="engine_error"}"#, 1.0);
    expect(r#"troupe_requests_total{method="unknown",outcome="method_not_found"}"#, 1.0);
    // The refused request had no handler time: one observation of session.get, not two.
    expect(r#"troupe_request_duration_seconds_count{method="session.get"}"#, 1.0);
    expect(r#"troupe_runs_ended_total{outcome="completed"}"#, 1.0);
    expect(r#"troupe_runs_ended_total{outcome="interrupted"}"#, 1.0);
    expect("troupe_events_appended_total", 5.0);
    expect("troupe_event_log_fsync_duration_seconds_count", 2.0);
    expect(r#"troupe_event_log_fsync_duration_seconds_bucket{le="0.0004"}"#, 1.0);
    expect(r#"troupe_outbound_dropped_total{kind="event"}"#, 1.0);
    expect(r#"troupe_outbound_dropped_total{kind="transient"}"#, 1.0);
    expect("troupe_gaps_sent_total", 1.0);
    expect(r#"troupe_model_request_duration_seconds_count{provider="openai"}"#, 2.0);
    expect(r#"troupe_model_errors_total{provider="openai",kind="rate_limited"}"#, 1.0);
    expect(r#"troupe_tool_calls_total{tool="shell",status="denied"}"#, 1.0);
}

#[test]
fn session_loads_are_counted_and_timed_by_what_they_made_of_the_snapshot() {
    let metrics = Metrics::new();
    metrics.session_loaded(SnapshotOutcome::Used, Duration::from_micros(4_000));
    metrics.session_loaded(SnapshotOutcome::Used, Duration::from_micros(150));
    metrics.session_loaded(SnapshotOutcome::Missing, Duration::from_millis(130));
    let text = metrics.encode();
    let expect = |series: &str, value: f64| {
        assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
    };
    expect(r#"troupe_session_loads_total{snapshot="used"}"#, 2.0);
    expect(r#"troupe_session_loads_total{snapshot="missing"}"#, 1.0);
    expect(r#"troupe_session_loads_total{snapshot="refused"}"#, 0.0);
    assert!(text.contains("# TYPE troupe_session_load_duration_seconds histogram\n"), "{text}");
    expect(r#"troupe_session_load_duration_seconds_count{snapshot="used"}"#, 2.0);
    // Buckets double from 0.1 ms: 150 µs is within the one of 0.2 ms, 4 ms within the one of 6.4 ms.
    expect(r#"troupe_session_load_duration_seconds_bucket{le="0.0002",snapshot="used"}"#, 1.0);
    expect(r#"troupe_session_load_duration_seconds_bucket{le="0.0064",snapshot="used"}"#, 2.0);
    expect(r#"troupe_session_load_duration_seconds_count{snapshot="missing"}"#, 1.0);
    // A series of the histogram appears with its first observation.
    assert!(!text.contains(r#"troupe_session_load_duration_seconds_count{snapshot="refused"}"#), "{text}");
}

#[test]
fn state_gauges_are_set_not_accumulated() {
    let metrics = Metrics::new();
    let state = DaemonStatusResult {
        version: "0".to_owned(),
        started_at: "2026-01-01T00:00:00Z".to_owned(),
        uptime_ms: 1,
        connections: 2,
        sessions_live: 3,
        sessions_hibernated: 4,
        runs_active: 1,
        approvals_pending: 5,
        data_dir: None,
        listen: "127.0.0.1:0".to_owned(),
        cluster: None,
    };
    metrics.set_state(&state);
    metrics.set_state(&state);
    let text = metrics.encode();
    assert_eq!(sample(&text, "troupe_connections_open"), Some(2.0));
    assert_eq!(sample(&text, "troupe_sessions_live"), Some(3.0));
    assert_eq!(sample(&text, "troupe_sessions_hibernated"), Some(4.0));
    assert_eq!(sample(&text, "troupe_runs_active"), Some(1.0));
    assert_eq!(sample(&text, "troupe_approvals_pending"), Some(5.0));
}

#[test]
fn clones_count_into_one_registry_and_two_registries_count_apart() {
    let first = Metrics::new();
    first.clone().gap_sent();
    let second = Metrics::new();
    assert_eq!(sample(&first.encode(), "troupe_gaps_sent_total"), Some(1.0));
    assert_eq!(sample(&second.encode(), "troupe_gaps_sent_total"), Some(0.0));
}
