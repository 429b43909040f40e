//! The engine never changes a goal's lifecycle because its model cannot run: with the provider of the goal's model
//! disconnected the goal stays active, no automatic run starts (one that could only fail), `session.goal.get` and
//! `troupe goal show` say why the runs wait; reconnecting the provider starts them again with no request. The
//! check follows the session's sticky fallback, where the goal's runs would start.

use std::time::Duration;

use serde_json::json;
use troupe_protocol::method;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::goal::{GoalBlockedReason, GoalSetParams, GoalStatus};
use troupe_protocol::types::origin::Origin;

use super::cli_support::troupe;
use super::goals::{get_goal, set_goal, yolo_session};
use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{anthropic_text, models_list, openai_error, openai_text, openai_tool_call};

/// Longer than the goal actor's periodic re-check (3 s), so it woke up more than once while the goal was blocked.
const QUIET_WINDOW: Duration = Duration::from_secs(7);

fn is_goal_run(event: &StoredEvent) -> bool {
    matches!(event.payload, EventPayload::RunStarted { .. }) && event.origin_of() == Some(Origin::GOAL)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_whose_provider_is_disconnected_stays_active_starts_no_run_and_resumes_on_reconnect() {
    let vendor = FakeServer::start(vec![
        models_list(&["m"]),
        models_list(&["m"]),
        openai_tool_call("goal_update", json!({"items": [{"description": "do it", "finished": true}]})),
        openai_text("done"),
    ])
    .await;
    let base_url = format!("{}/v1", vendor.base_url);
    let daemon = TestDaemon::start();
    let (client, mut deliveries, session_id) = yolo_session(&daemon).await;
    connect_provider(&client, "openai", &[("base_url", &base_url)], Some("k")).await.expect("connect openai");
    disconnect_provider(&client, "openai").await;

    let goal = set_goal(&client, &session_id, "ship it", "openai/m").await.expect("session.goal.set");
    let blocked = goal.blocked.clone().expect("the reply says the goal's runs wait");
    assert_eq!(blocked.reason, GoalBlockedReason::ProviderNotConnected);
    assert!(blocked.detail.contains("openai/m") && blocked.detail.contains("provider.connect"), "{blocked:?}");

    let shown = troupe(&daemon, &["goal", "show", &session_id]).await.ok();
    assert!(shown.contains("(active, revision 1)"), "{shown}");
    assert!(shown.contains("waiting: openai/m cannot run") && shown.contains("troupe connect"), "{shown}");

    let quiet = events_during(&mut deliveries, QUIET_WINDOW).await;
    assert!(!quiet.iter().any(is_goal_run), "no automatic run starts while it could only fail: {:?}", kinds(&quiet));
    let lifecycle = |event: &StoredEvent| matches!(event.payload, EventPayload::GoalLifecycleChanged { .. });
    assert!(!quiet.iter().any(lifecycle), "the engine left the lifecycle alone: {:?}", kinds(&quiet));
    let still = get_goal(&client, &session_id).await.expect("the goal");
    assert_eq!((still.status, still.revision), (GoalStatus::Active, 1));
    assert_eq!(still.blocked.map(|blocked| blocked.reason), Some(GoalBlockedReason::ProviderNotConnected));

    // Reconnecting is all it takes: the next automatic run starts by itself and completes the goal.
    connect_provider(&client, "openai", &[("base_url", &base_url)], Some("k")).await.expect("reconnect openai");
    let mut events = events_until(&mut deliveries, is_goal_run).await;
    let before = &events[..events.len() - 1];
    assert!(!before.iter().any(is_goal_run), "one automatic run, after the reconnect: {:?}", kinds(before));
    events.extend(events_until(&mut deliveries, |event| is_terminal(event) && event.run_id.is_some()).await);
    assert!(
        events.iter().any(|event| matches!(event.payload, EventPayload::RunCompleted { .. })),
        "the automatic run ran on openai/m: {:?}",
        kinds(&events)
    );
    let statuses: Vec<GoalStatus> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::GoalLifecycleChanged { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, vec![GoalStatus::Completed], "the only lifecycle change is the completion");
    let done = get_goal(&client, &session_id).await.expect("the goal");
    assert_eq!((done.status, done.blocked), (GoalStatus::Completed, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_whose_runs_would_start_on_a_disconnected_sticky_fallback_waits() {
    // The first model refuses the key, so the session's run falls back to the second and sticks there.
    let first = FakeServer::start(vec![models_list(&["first"]), openai_error(401, "bad key")]).await;
    let backup = FakeServer::start(vec![models_list(&["backup"]), anthropic_text("one")]).await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.chain]\nmodels = [\"openai/first\", \"anthropic/backup\"]\n".into()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries, session_id) = yolo_session(&daemon).await;
    let first_url = format!("{}/v1", first.base_url);
    connect_provider(&client, "openai", &[("base_url", &first_url)], Some("k1")).await.expect("connect openai");
    connect_provider(&client, "anthropic", &[("base_url", &backup.base_url)], Some("k2")).await.expect("connect");
    let asked = selection_of("chain", "openai/first");
    let run_id = start_run(&client, &session_id, asked.clone(), "go").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    disconnect_provider(&client, "anthropic").await;

    // openai/first could be asked for, but the goal's runs would start on anthropic/backup: they wait.
    let params = GoalSetParams { session_id: session_id.clone(), objective: "ship it".into(), selection: Some(asked) };
    let goal = within("session.goal.set", client.call::<method::SessionGoalSet>(params)).await.expect("goal set").goal;
    let blocked = goal.blocked.expect("blocked on the sticky fallback");
    assert_eq!(blocked.reason, GoalBlockedReason::ProviderNotConnected);
    assert!(blocked.detail.starts_with("anthropic/backup cannot run"), "{blocked:?}");
    let quiet = events_during(&mut deliveries, QUIET_WINDOW).await;
    assert!(!quiet.iter().any(is_goal_run), "no automatic run that could only fail: {:?}", kinds(&quiet));
}
