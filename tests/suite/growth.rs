//! What grows with use shrinks again: runs leave the engine's run registry when they end (a bounded number of
//! ended runs is remembered), idle trees' approval actors stop and come back with their grants and mode, closed
//! connections leave the runtime's notifier map; and `providers.json` changes stay ordered and durable while they
//! are saved off the actors' threads.

use std::time::Duration;

use futures::StreamExt;

use serde_json::{Value, json};
use troupe_actors::EngineSizes;
use troupe_actors::run_registry::FINISHED_RUNS_KEPT;
use troupe_protocol::client::{Client, ClientError};
use troupe_protocol::method;
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalListParams, ApprovalRespondParams};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{RunIdParams, RunSteerParams, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;

use super::support::*;

/// Polls the engine's sizes until `holds` is true for them, failing after the suite's wait.
async fn sizes_until(daemon: &TestDaemon, what: &str, holds: impl Fn(&EngineSizes) -> bool) -> EngineSizes {
    eventually_some(what, WAIT, || async {
        let sizes = daemon.engine().sizes().await.expect("sizes");
        holds(&sizes).then_some(sizes)
    })
    .await
}

fn typed_code(result: Result<impl std::fmt::Debug, ClientError>) -> Option<String> {
    match result {
        Err(ClientError::Rpc(error)) => error.typed_code().map(str::to_owned),
        other => panic!("expected a typed error, got {other:?}"),
    }
}

fn short_lived() -> DaemonSetup {
    DaemonSetup { hibernate_after: Some(Duration::from_millis(200)), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_runs_leave_no_active_run_a_bounded_memory_of_ended_ones_and_no_idle_approval_actor() {
    const SESSIONS: usize = 10;
    const RUNS_PER_SESSION: usize = 20;
    let daemon = TestDaemon::start_with(short_lived());
    let (client, mut deliveries) = daemon.client().await;
    // A run plays the turn at the index of the session's assistant messages so far: one text turn per run.
    let turns: Vec<Value> = (0..RUNS_PER_SESSION).map(|index| json!({"text": format!("run {index}")})).collect();
    connect_script(&client, daemon.data_path(), json!({ "turns": turns })).await;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let session = daemon.create_session(&client).await;
        client.subscribe(&session.session_id, None).await.expect("subscribe");
        sessions.push(session.session_id);
    }
    let mut run_ids = Vec::new();
    for round in 0..RUNS_PER_SESSION {
        for session_id in &sessions {
            let run_id = start_run(&client, session_id, selection_of("default", "local/scripted"), "go").await;
            let events =
                events_until(&mut deliveries, |e| e.run_id.as_deref() == Some(&run_id) && is_terminal(e)).await;
            let last: &StoredEvent = events.last().expect("the run's end");
            assert!(matches!(last.payload, EventPayload::RunCompleted { .. }), "round {round}: {:?}", kinds(&events));
            run_ids.push(run_id);
        }
    }
    assert_eq!(run_ids.len(), SESSIONS * RUNS_PER_SESSION);

    let sizes = sizes_until(&daemon, "every run actor to be gone", |sizes| sizes.runs.active == 0).await;
    assert_eq!(sizes.runs.finished, FINISHED_RUNS_KEPT, "ended runs are remembered up to the bound: {sizes:?}");
    // The newest ended run still reaches its session through the registry, which answers for an ended run. The
    // oldest is no longer in memory, but an ended run is still an ended run: it is found in its session's log.
    for run_id in [run_ids.last().unwrap().clone(), run_ids[0].clone()] {
        let cancelled =
            within("cancel", client.call::<method::RunCancel>(RunIdParams { run_id: run_id.clone() })).await;
        assert!(!cancelled.expect("an ended run's cancel").cancelled);
        let steered = client
            .call::<method::RunSteer>(RunSteerParams { run_id, input: "late".into(), attachments: Vec::new() })
            .await;
        assert_eq!(typed_code(steered).as_deref(), Some("run_not_active"));
    }
    let sizes = daemon.engine().sizes().await.expect("sizes");
    assert!(sizes.runs.finished <= FINISHED_RUNS_KEPT, "looking a run up keeps the memory bounded: {sizes:?}");

    // Ten trees were used; once idle, their approval actors stop, and with no client left, so do the sessions.
    drop(client);
    drop(deliveries);
    let sizes = sizes_until(&daemon, "idle approval actors, sessions and connections to be gone", |sizes| {
        sizes.approval_actors == 0 && sizes.live_sessions == 0 && sizes.notifiers == 0
    })
    .await;
    assert_eq!(sizes.tree_modes, 0, "no tree left the default mode");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_approval_actor_comes_back_with_the_trees_grants_and_mode() {
    let daemon = TestDaemon::start_with(short_lived());
    let (client, mut deliveries) = daemon.client().await;
    let shell = |command: &str| json!({"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]});
    // Run 1 plays turns 0-1, run 2 turns 2-4.
    let script = json!({"turns": [
        shell("touch granted.txt"), {"text": "one"},
        shell("touch granted.txt"), shell("ls"), {"text": "two"}
    ]});
    connect_script(&client, daemon.data_path(), script).await;
    let session = daemon.create_session(&client).await;
    let session_id = session.session_id.clone();
    // `ask` is not the default mode: in the default `auto_approve`, `ls` would run without asking.
    set_mode(&client, &session_id, PermissionMode::Ask).await;
    client.subscribe(&session_id, None).await.expect("subscribe");

    let first = start_run(&client, &session_id, selection_of("default", "local/scripted"), "first").await;
    let asked = events_until(&mut deliveries, |e| matches!(e.payload, EventPayload::ApprovalRequested { .. })).await;
    let EventPayload::ApprovalRequested { approval } = &asked.last().unwrap().payload else { unreachable!() };
    let respond = ApprovalRespondParams {
        session_id: approval.session_id.clone(),
        approval_id: approval.approval_id.clone(),
        request_revision: approval.revision,
        operation_fingerprint: approval.operation_fingerprint.clone(),
        client_response_id: "grant-touch".into(),
        decision: ApprovalDecision::ApproveTree,
        feedback: None,
    };
    within("approval.respond", client.call::<method::ApprovalRespond>(respond)).await.expect("respond");
    events_until(&mut deliveries, |e| e.run_id.as_deref() == Some(&first) && is_terminal(e)).await;

    // Idle: the tree's approval actor stops; the mode is remembered without it.
    let sizes = sizes_until(&daemon, "the idle approval actor to stop", |sizes| sizes.approval_actors == 0).await;
    assert_eq!(sizes.tree_modes, 1, "{sizes:?}");

    // The next use starts a new one: the grant still covers `touch granted.txt`, and `ls` asks, as `ask` says.
    let second = start_run(&client, &session_id, selection_of("default", "local/scripted"), "second").await;
    let events = events_until(&mut deliveries, |e| {
        e.run_id.as_deref() == Some(&second) && matches!(e.payload, EventPayload::ApprovalRequested { .. })
    })
    .await;
    let of_second: Vec<&StoredEvent> = events.iter().filter(|e| e.run_id.as_deref() == Some(&second)).collect();
    let asked: Vec<String> = of_second
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ApprovalRequested { approval } => Some(approval.operation.resource.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["ls"], "only the ungranted command asks");
    let statuses: Vec<ToolResultStatus> = of_second
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallTerminated { result, .. } => Some(result.status),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [ToolResultStatus::Ok], "the granted command ran unasked");
    let listed = within(
        "approval.list",
        client.call::<method::ApprovalList>(ApprovalListParams { root_session_id: session_id.clone(), status: None }),
    )
    .await
    .expect("approval.list");
    assert_eq!(listed.tree_grants.len(), 1, "{listed:?}");
    within("cancel", client.call::<method::RunCancel>(RunIdParams { run_id: second })).await.expect("cancel");

    // Back to the default mode, nothing needs remembering.
    set_mode(&client, &session_id, PermissionMode::AutoApprove).await;
    sizes_until(&daemon, "the default mode to be forgotten", |sizes| sizes.tree_modes == 0).await;
}

#[tokio::test]
async fn closed_connections_leave_the_runtime_notifiers() {
    let daemon = TestDaemon::start();
    let (keeper, _keeper_deliveries) = daemon.client().await;
    let mut clients: Vec<(Client, _)> = Vec::new();
    for _ in 0..5 {
        clients.push(daemon.client().await);
    }
    sizes_until(&daemon, "six registered connections", |sizes| sizes.notifiers == 6).await;
    drop(clients);
    sizes_until(&daemon, "only the open connection left", |sizes| sizes.notifiers == 1).await;
    drop(keeper);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_provider_connects_are_saved_in_order_and_each_is_durable_when_acknowledged() {
    const CONNECTS: u64 = 12;
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let client = &client;
    let scripts: Vec<String> = (0..CONNECTS)
        .map(|index| {
            let path = daemon.data_path().join(format!("script-{index}.json"));
            std::fs::write(&path, json!({"turns": [{"text": format!("script {index}")}]}).to_string()).unwrap();
            path.to_string_lossy().into_owned()
        })
        .collect();
    let mut connects: futures::stream::FuturesUnordered<_> = scripts
        .iter()
        .map(|script| async move { (connect_provider(client, "local", &[("script", script)], None).await, script) })
        .collect();
    let mut generations: Vec<u64> = Vec::new();
    let mut newest: Option<(u64, String)> = None;
    while let Some((result, script)) = connects.next().await {
        let generation = result.expect("provider.connect").durable_connection.generation;
        generations.push(generation);
        // Acknowledged only once durable: the file holds this generation already (or a later one).
        let stored: Value =
            serde_json::from_slice(&std::fs::read(daemon.data_path().join("providers.json")).unwrap()).unwrap();
        assert!(stored["connections"]["local"]["generation"].as_u64().unwrap() >= generation, "{stored}");
        if newest.as_ref().is_none_or(|(known, _)| generation > *known) {
            newest = Some((generation, script.clone()));
        }
    }
    drop(connects);
    generations.sort_unstable();
    assert_eq!(generations, (1..=CONNECTS).collect::<Vec<_>>(), "each change saw the one before it");
    let stored: Value =
        serde_json::from_slice(&std::fs::read(daemon.data_path().join("providers.json")).unwrap()).unwrap();
    let (generation, script) = newest.unwrap();
    assert_eq!(stored["connections"]["local"]["generation"], generation);
    assert_eq!(stored["connections"]["local"]["setup_values"]["script"], script.as_str(), "the last save wins");
}
