//! Goals over the real wire: automatic runs driven by `local/scripted` calling `goal_update` until the checklist
//! is finished (completion at r+1/r+2, then no more runs), user lifecycle with stale identities and revisions
//! refused, the opt-in idle-run bound (by default only the user pauses a goal), and a restart during an active goal.

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::goal::{
    GoalLifecycleAction, GoalLifecycleParams, GoalSetParams, GoalState, GoalStatus, GoalUpdateResult,
};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;

use super::support::*;

fn update(items: &[(&str, bool)]) -> Value {
    let items: Vec<Value> =
        items.iter().map(|(description, finished)| json!({"description": description, "finished": finished})).collect();
    json!({"tool_calls": [{"tool": "goal_update", "arguments": {"items": items}}]})
}

pub(super) async fn set_goal(
    client: &Client,
    session_id: &str,
    objective: &str,
    model: &str,
) -> Result<GoalState, ClientError> {
    within(
        "session.goal.set",
        client.call::<method::SessionGoalSet>(GoalSetParams {
            session_id: session_id.to_owned(),
            objective: objective.to_owned(),
            selection: Some(selection_of("default", model)),
        }),
    )
    .await
    .map(|result| result.goal)
}

pub(super) async fn get_goal(client: &Client, session_id: &str) -> Option<GoalState> {
    within("session.goal.get", client.call::<method::SessionGoalGet>(SessionIdParams { session_id: session_id.into() }))
        .await
        .expect("session.goal.get")
        .goal
}

async fn lifecycle(
    client: &Client,
    session_id: &str,
    goal: &GoalState,
    action: GoalLifecycleAction,
) -> Result<GoalState, ClientError> {
    lifecycle_with(client, session_id, &goal.goal_id, goal.revision, action, None).await
}

async fn lifecycle_with(
    client: &Client,
    session_id: &str,
    goal_id: &str,
    expected_revision: u64,
    action: GoalLifecycleAction,
    selection: Option<troupe_protocol::types::common::RunSelection>,
) -> Result<GoalState, ClientError> {
    within(
        "session.goal.lifecycle",
        client.call::<method::SessionGoalLifecycle>(GoalLifecycleParams {
            session_id: session_id.to_owned(),
            goal_id: goal_id.to_owned(),
            expected_revision,
            action,
            selection,
        }),
    )
    .await
    .map(|result| result.goal)
}

fn typed(error: ClientError) -> (i64, String) {
    let ClientError::Rpc(rpc) = error else { panic!("not an RPC error: {error:?}") };
    (rpc.code, rpc.typed_code().unwrap_or_default().to_owned())
}

/// A root session in `yolo` (so `goal_update` is allowed without asking), subscribed.
pub(super) async fn yolo_session(daemon: &TestDaemon) -> (Client, Deliveries, String) {
    let (client, deliveries) = daemon.client().await;
    let session = create_session_in(&client, daemon.project_path()).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    (client, deliveries, session.session_id)
}

fn is_goal_status(event: &StoredEvent, wanted: GoalStatus) -> bool {
    matches!(&event.payload, EventPayload::GoalLifecycleChanged { status, .. } if *status == wanted)
}

fn automatic_runs(events: &[StoredEvent]) -> usize {
    events
        .iter()
        .filter(|event| {
            matches!(event.payload, EventPayload::RunStarted { .. }) && event.origin.as_deref() == Some("engine:goal")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_runs_update_the_checklist_until_the_goal_completes() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries, session_id) = yolo_session(&daemon).await;
    assert_eq!(get_goal(&client, &session_id).await, None);
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [
            update(&[("write the code", false), ("write the tests", false)]),
            {"text": "planned"},
            update(&[("write the code", true), ("write the tests", false)]),
            {"text": "code written"},
            {"tool_calls": [{"tool": "goal_get"}]},
            update(&[("write the code", true), ("write the tests", true)]),
            {"text": "all done"}
        ]}),
    )
    .await;
    let goal = set_goal(&client, &session_id, "ship the feature", "local/scripted").await.unwrap();
    assert_eq!((goal.status, goal.revision, goal.items.len()), (GoalStatus::Active, 1, 0));
    let refused = set_goal(&client, &session_id, "another", "local/scripted").await.unwrap_err();
    assert_eq!(typed(refused), (-32000, "goal_already_active".to_owned()));

    let mut events = events_until(&mut deliveries, |event| is_goal_status(event, GoalStatus::Completed)).await;
    // The run that completed the goal ends, and no other run follows.
    events.extend(events_until(&mut deliveries, is_terminal).await);
    let revisions: Vec<(u64, &'static str)> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::GoalActivated { revision, .. }
            | EventPayload::GoalChecklistRevised { revision, .. }
            | EventPayload::GoalLifecycleChanged { revision, .. } => Some((*revision, event.payload.kind().unwrap())),
            _ => None,
        })
        .collect();
    assert_eq!(
        revisions,
        vec![
            (1, "goal_activated"),
            (2, "goal_checklist_revised"),
            (3, "goal_checklist_revised"),
            (4, "goal_checklist_revised"),
            (5, "goal_lifecycle_changed"),
        ]
    );
    assert_eq!(automatic_runs(&events), 3);
    let first_input = events
        .iter()
        .find_map(|event| match &event.payload {
            EventPayload::RunStarted { input, .. } => Some(input.clone()),
            _ => None,
        })
        .unwrap();
    assert!(first_input.contains("ship the feature"), "{first_input}");
    // The tool answers with the goal: the completing update returns the final, completed state.
    let results = tool_results(&events);
    assert!(results.iter().all(|result| result.status == ToolResultStatus::Ok), "{results:?}");
    let last: GoalUpdateResult = serde_json::from_str(&results.last().unwrap().output).unwrap();
    assert_eq!((last.goal.status, last.goal.revision), (GoalStatus::Completed, 5));
    assert!(results[2].output.contains("write the code"), "goal_get reads the checklist: {}", results[2].output);

    let goal = get_goal(&client, &session_id).await.unwrap();
    assert_eq!((goal.status, goal.revision), (GoalStatus::Completed, 5));
    // A completed goal accepts no lifecycle change; a new goal may be set, and a user run still works.
    let refused = lifecycle(&client, &session_id, &goal, GoalLifecycleAction::Cancel).await.unwrap_err();
    assert_eq!(typed(refused), (-32000, "goal_terminal".to_owned()));
    let run = start_run(&client, &session_id, echo_selection(), "anything else?").await;
    let after =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run) && is_terminal(event)).await;
    assert_eq!(automatic_runs(&after), 0, "no automatic run after completion: {:?}", kinds(&after));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_cancel_check_identity_and_revision() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries, session_id) = yolo_session(&daemon).await;
    // The first automatic run is slow, so the goal can be paused while it runs.
    connect_script(&client, daemon.data_path(), json!({"turns": [{"text": "thinking", "delay_ms": 1500}]})).await;
    let goal = set_goal(&client, &session_id, "think", "local/scripted").await.unwrap();
    let started = events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunStarted { .. })).await;
    let run_id = started.last().unwrap().run_id.clone().unwrap();

    let wrong_id = lifecycle_with(&client, &session_id, "nope", goal.revision, GoalLifecycleAction::Pause, None).await;
    assert_eq!(typed(wrong_id.unwrap_err()), (-32000, "goal_id_mismatch".to_owned()));
    let stale = lifecycle_with(&client, &session_id, &goal.goal_id, 9, GoalLifecycleAction::Pause, None).await;
    assert_eq!(typed(stale.unwrap_err()), (-32000, "goal_revision_conflict".to_owned()));
    let with_selection = lifecycle_with(
        &client,
        &session_id,
        &goal.goal_id,
        goal.revision,
        GoalLifecycleAction::Pause,
        Some(echo_selection()),
    )
    .await;
    assert_eq!(typed(with_selection.unwrap_err()), (-32602, "goal_selection_not_allowed".to_owned()));
    let not_paused = lifecycle(&client, &session_id, &goal, GoalLifecycleAction::Resume).await;
    assert_eq!(typed(not_paused.unwrap_err()), (-32000, "goal_invalid_transition".to_owned()));

    let paused = lifecycle(&client, &session_id, &goal, GoalLifecycleAction::Pause).await.unwrap();
    assert_eq!((paused.status, paused.revision), (GoalStatus::Paused, 2));
    // The current run finishes; pausing started no other run.
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));
    let user_run = start_run(&client, &session_id, echo_selection(), "while paused").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&user_run) && is_terminal(event)).await;
    assert_eq!(automatic_runs(&events), 0, "{:?}", kinds(&events));

    // The old revision is stale now; resume with the current one and a new selection restarts the runs.
    let stale = lifecycle(&client, &session_id, &goal, GoalLifecycleAction::Resume).await;
    assert_eq!(typed(stale.unwrap_err()), (-32000, "goal_revision_conflict".to_owned()));
    let resumed = lifecycle_with(
        &client,
        &session_id,
        &paused.goal_id,
        paused.revision,
        GoalLifecycleAction::Resume,
        Some(echo_selection()),
    )
    .await
    .unwrap();
    assert_eq!((resumed.status, resumed.revision), (GoalStatus::Active, 3));
    assert_eq!(resumed.selection, Some(echo_selection()));
    let events = events_until(&mut deliveries, |event| {
        matches!(&event.payload, EventPayload::RunStarted { selection, .. } if *selection == echo_selection())
            && event.origin.as_deref() == Some("engine:goal")
    })
    .await;

    // The echo model never updates the checklist, and by default only the user changes a goal's lifecycle: the
    // automatic runs go on past the opt-in bound's old default (3) until the user acts.
    let mut seen = events;
    while automatic_runs(&seen) < 5 {
        let is_automatic_start = |event: &StoredEvent| {
            matches!(event.payload, EventPayload::RunStarted { .. }) && event.origin.as_deref() == Some("engine:goal")
        };
        seen.extend(events_until(&mut deliveries, is_automatic_start).await);
    }
    assert!(!seen.iter().any(|event| is_goal_status(event, GoalStatus::Paused)), "{:?}", kinds(&seen));
    // Cancel ends it for good.
    let current = get_goal(&client, &session_id).await.unwrap();
    let cancelled = lifecycle(&client, &session_id, &current, GoalLifecycleAction::Cancel).await.unwrap();
    assert_eq!(cancelled.status, GoalStatus::Cancelled);
    let again = lifecycle(&client, &session_id, &cancelled, GoalLifecycleAction::Resume).await;
    assert_eq!(typed(again.unwrap_err()), (-32000, "goal_terminal".to_owned()));
    // A cancelled goal makes room for a new one.
    let next = set_goal(&client, &session_id, "next", "local/echo").await.unwrap();
    assert_ne!(next.goal_id, cancelled.goal_id);
    assert_eq!((next.status, next.revision), (GoalStatus::Active, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_never_updates_the_checklist_is_paused_after_the_bound() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[goals]\nmax_idle_runs = 2\n".into()),
        ..Default::default()
    });
    let (client, mut deliveries, session_id) = yolo_session(&daemon).await;
    set_goal(&client, &session_id, "echo forever", "local/echo").await.unwrap();
    let events = events_until(&mut deliveries, |event| is_goal_status(event, GoalStatus::Paused)).await;
    assert_eq!(automatic_runs(&events), 2, "{:?}", kinds(&events));
    let EventPayload::GoalLifecycleChanged { reason: Some(reason), revision, .. } = &events.last().unwrap().payload
    else {
        panic!("a pause with a reason")
    };
    assert!(reason.contains("max_idle_runs"), "{reason}");
    let goal = get_goal(&client, &session_id).await.unwrap();
    assert_eq!((goal.status, goal.revision), (GoalStatus::Paused, *revision));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_goal_continues_after_a_restart() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    // Run 1 writes the list and then waits in a long command, where the daemon is killed. The goal's next run,
    // after the restart, plays the turn that finishes the list.
    connect_script(
        &client,
        data_dir.path(),
        json!({"turns": [
            update(&[("survive a restart", false)]),
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 60"}}]},
            update(&[("survive a restart", true)]),
        ]}),
    )
    .await;
    let session = create_session_in(&client, project.path()).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    set_goal(&client, &session.session_id, "outlive the daemon", "local/scripted").await.unwrap();
    events_until(
        &mut deliveries,
        |event| matches!(&event.payload, EventPayload::ToolCallStarted { tool, .. } if tool == "shell"),
    )
    .await;
    daemon.kill();

    // Nobody asks anything of the session: the restarted daemon resumes the goal by itself.
    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let events = events_until(&mut deliveries, |event| is_goal_status(event, GoalStatus::Completed)).await;
    assert!(events.iter().any(|event| matches!(event.payload, EventPayload::RunInterrupted { .. })));
    assert_eq!(automatic_runs(&events), 2, "{:?}", kinds(&events));
    let goal = get_goal(&client, &session.session_id).await.unwrap();
    assert_eq!((goal.status, goal.items.len()), (GoalStatus::Completed, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_shows_pauses_resumes_and_cancels_a_goal() {
    use super::cli_support::troupe;
    let daemon = TestDaemon::start();
    let (client, mut deliveries, session_id) = yolo_session(&daemon).await;
    // Slow runs, so the goal stays where the commands put it.
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [{"text": "thinking", "delay_ms": 1500}, {"text": "still thinking", "delay_ms": 30000}]}),
    )
    .await;

    let set = troupe(&daemon, &["goal", "set", &session_id, "tidy up", "--model", "local/scripted"]).await.ok();
    assert!(set.contains("(active, revision 1): tidy up"), "{set}");
    let refused = troupe(&daemon, &["goal", "set", &session_id, "another"]).await.refused();
    assert!(refused.contains("hint:") && refused.contains("troupe goal cancel"), "{refused}");
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunStarted { .. })).await;

    let stale = troupe(&daemon, &["goal", "pause", &session_id, "--revision", "7"]).await.refused();
    assert!(stale.contains("revision 1") && stale.contains("troupe goal show"), "{stale}");
    let paused = troupe(&daemon, &["goal", "pause", &session_id]).await.ok();
    assert!(paused.contains("(paused, revision 2)"), "{paused}");
    let shown = troupe(&daemon, &["goal", "show", &session_id, "--json"]).await.ok();
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["goal"]["status"], "paused");
    let resumed =
        troupe(&daemon, &["goal", "resume", &session_id, "--agent", "default", "--model", "local/scripted"]).await.ok();
    assert!(resumed.contains("(active, revision 3)") && resumed.contains("default on local/scripted"), "{resumed}");
    let cancelled = troupe(&daemon, &["goal", "cancel", &session_id]).await.ok();
    assert!(cancelled.contains("(cancelled, revision 4)"), "{cancelled}");
    let shown = troupe(&daemon, &["goal", "show", &session_id]).await.ok();
    assert!(shown.contains("cancelled"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goal_changes_are_root_only_and_a_missing_completion_is_repaired_on_load() {
    let data_dir = tempfile::tempdir().unwrap();
    let (root, child) = ("01957a1c-0000-7000-8000-000000000001", "01957a1c-0000-7000-8000-000000000002");
    let event = |seq: u64, payload: Value| {
        json!({"session_id": root, "run_id": null, "seq": seq, "timestamp": "2026-01-01T00:00:01.000Z",
            "origin": "user", "payload": payload})
        .to_string()
    };
    // The daemon stopped between an all-finished checklist and its completion.
    write_session_log(
        data_dir.path(),
        root,
        &[
            session_created_line(root, json!({"type": "root"})),
            event(
                2,
                json!({"type": "goal_activated", "goal_id": "g", "objective": "o", "revision": 1, "selection": null}),
            ),
            event(
                3,
                json!({"type": "goal_checklist_revised", "goal_id": "g", "revision": 2,
                    "items": [{"description": "a", "finished": true}]}),
            ),
            // A terminated last line: an unterminated one would be taken for a torn write.
            String::new(),
        ],
    );
    let delegated = json!({"type": "delegated", "root_session_id": root, "parent_session_id": root,
        "parent_run_id": "r", "parent_tool_call_id": "t", "depth": 1});
    write_session_log(data_dir.path(), child, &[session_created_line(child, delegated), String::new()]);
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let (client, _deliveries) = daemon.client().await;

    let goal = get_goal(&client, root).await.unwrap();
    assert_eq!((goal.status, goal.revision, goal.items.len()), (GoalStatus::Completed, 3, 1));

    let refused = set_goal(&client, child, "not here", "local/echo").await.unwrap_err();
    assert_eq!(typed(refused), (-32000, "not_root_session".to_owned()));
    // Reading is not a mutation: a delegated session answers its root's goal.
    assert_eq!(get_goal(&client, child).await, Some(goal));
}

#[tokio::test]
async fn a_delegated_session_of_a_tree_without_a_goal_reads_null() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let root = daemon.create_session(&client).await.session_id;
    let child = "01957a1c-0000-7000-8000-0000000000c1";
    let delegated = json!({"type": "delegated", "root_session_id": root, "parent_session_id": root,
        "parent_run_id": "r", "parent_tool_call_id": "t", "depth": 1});
    let data_dir = daemon.stop();
    write_session_log(data_dir.path(), child, &[session_created_line(child, delegated), String::new()]);
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let (client, _deliveries) = daemon.client().await;
    let reply = within("goal.get", client.call::<method::SessionGoalGet>(SessionIdParams { session_id: child.into() }))
        .await
        .expect("a delegated session's goal is readable");
    assert_eq!(reply.goal, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checklist_past_its_bounds_is_a_tool_error_and_the_goal_is_unchanged() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[goals]\nmax_idle_runs = 1\n[limits]\nmax_input_bytes = 4000\n".into()),
        ..Default::default()
    });
    let (client, mut deliveries, session_id) = yolo_session(&daemon).await;
    // The objective obeys `[limits] max_input_bytes`.
    let refused = set_goal(&client, &session_id, &"o".repeat(4001), "local/scripted").await.unwrap_err();
    assert_eq!(typed(refused), (-32602, "input_too_large".to_owned()));
    assert_eq!(get_goal(&client, &session_id).await, None);

    let many: Vec<(String, bool)> = (0..101).map(|n| (format!("step {n}"), false)).collect();
    let long = vec![("l".repeat(1025), false)];
    let heavy: Vec<(String, bool)> = (0..65).map(|n| (format!("{n:04}").repeat(256), false)).collect();
    let as_refs = |items: &[(String, bool)]| update(&items.iter().map(|(d, f)| (d.as_str(), *f)).collect::<Vec<_>>());
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [as_refs(&many), as_refs(&long), as_refs(&heavy), {"text": "gave up"}]}),
    )
    .await;
    let goal = set_goal(&client, &session_id, "plan big", "local/scripted").await.unwrap();
    let events = events_until(&mut deliveries, |event| is_goal_status(event, GoalStatus::Paused)).await;
    assert!(
        !events.iter().any(|e| matches!(e.payload, EventPayload::GoalChecklistRevised { .. })),
        "{:?}",
        kinds(&events)
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|result| result.status == ToolResultStatus::Error), "{results:?}");
    assert!(
        results[0].output.contains("101 items") && results[0].output.contains("at most 100"),
        "{}",
        results[0].output
    );
    assert!(
        results[1].output.contains("1025 bytes") && results[1].output.contains("at most 1024"),
        "{}",
        results[1].output
    );
    assert!(results[2].output.contains("at most 65536"), "{}", results[2].output);
    assert!(results.iter().all(|result| result.output.contains("the goal is unchanged")));
    let after = get_goal(&client, &session_id).await.unwrap();
    assert_eq!((after.goal_id, after.items.len(), after.status), (goal.goal_id, 0, GoalStatus::Paused));
}
