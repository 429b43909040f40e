//! Approvals over the real wire: the five permission modes on a write and a shell command, the four answers,
//! exactly one winner among racing answers, typed refusals of stale or mismatched answers, late clients, and
//! restarts.

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::approval::{
    ApprovalDecision, ApprovalFeedback, ApprovalListParams, ApprovalRecord, ApprovalRespondParams, ApprovalStatus,
};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;

use super::support::*;
use troupe_test_support::{FakeResponse, FakeServer};

/// A script whose first turn writes a file and whose second runs a command.
fn write_then_shell() -> Value {
    json!({"turns": [
        {"tool_calls": [{"tool": "write_file", "arguments": {"path": "a.txt", "content": "x"}}]},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch b.txt"}}]},
        {"text": "done"}
    ]})
}

struct Setup {
    daemon: TestDaemon,
    client: Client,
    deliveries: Deliveries,
    session_id: String,
}

async fn setup(script: Value, mode: Option<PermissionMode>) -> Setup {
    let (daemon, client, deliveries) = scripted_daemon(script).await;
    let session = daemon.create_session(&client).await;
    if let Some(mode) = mode {
        set_mode(&client, &session.session_id, mode).await;
    }
    client.subscribe(&session.session_id, None).await.unwrap();
    Setup { daemon, client, deliveries, session_id: session.session_id }
}

fn requested(event: &StoredEvent) -> Option<ApprovalRecord> {
    match &event.payload {
        EventPayload::ApprovalRequested { approval } => Some((**approval).clone()),
        _ => None,
    }
}

/// The statuses of the tool results in `events`, in order.
pub(super) fn tool_statuses(events: &[StoredEvent]) -> Vec<ToolResultStatus> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolCallTerminated { result, .. } => Some(result.status),
            _ => None,
        })
        .collect()
}

fn respond_params(
    record: &ApprovalRecord,
    client_response_id: &str,
    decision: ApprovalDecision,
) -> ApprovalRespondParams {
    ApprovalRespondParams {
        session_id: record.session_id.clone(),
        approval_id: record.approval_id.clone(),
        request_revision: record.revision,
        operation_fingerprint: record.operation_fingerprint.clone(),
        client_response_id: client_response_id.into(),
        decision,
        feedback: None,
    }
}

async fn respond(client: &Client, params: ApprovalRespondParams) -> Result<ApprovalRecord, ClientError> {
    within("approval.respond", client.call::<method::ApprovalRespond>(params)).await.map(|result| result.approval)
}

/// Runs the script to its end, answering every approval with `decision`; returns the run's events.
async fn run_answering(setup: &mut Setup, decision: Option<ApprovalDecision>) -> Vec<StoredEvent> {
    start_run(&setup.client, &setup.session_id, selection_of("default", "local/scripted"), "go").await;
    let mut events = Vec::new();
    loop {
        let mut batch = events_until(&mut setup.deliveries, |e| is_terminal(e) || requested(e).is_some()).await;
        let last = batch.last().cloned().unwrap();
        events.append(&mut batch);
        if is_terminal(&last) {
            return events;
        }
        let record = requested(&last).unwrap();
        let decision = decision.unwrap_or_else(|| panic!("no approval expected, got {record:?}"));
        respond(&setup.client, respond_params(&record, &format!("answer-{}", record.approval_id), decision))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn the_five_modes_on_a_write_and_a_shell_command() {
    use ApprovalDecision::ApproveOnce;
    use PermissionMode::*;
    use ToolResultStatus::{Denied, Ok as Done};
    // (mode, answer given when asked, expected statuses, approvals asked)
    let cases = [
        (Yolo, None, [Done, Done], 0),
        (AutoApproveY, None, [Done, Done], 0),
        (AutoApproveN, None, [Denied, Denied], 0),
        (Ask, Some(ApproveOnce), [Done, Done], 2),
        (AutoApprove, Some(ApproveOnce), [Done, Done], 2),
    ];
    for (mode, answer, expected, asked) in cases {
        let mut setup = setup(write_then_shell(), Some(mode)).await;
        let events = run_answering(&mut setup, answer).await;
        assert_eq!(tool_statuses(&events), expected, "{mode:?}");
        assert_eq!(events.iter().filter_map(requested).count(), asked, "{mode:?}");
        assert_eq!(setup.daemon.project_path().join("a.txt").exists(), expected[0] == Done, "{mode:?}");
        assert_eq!(setup.daemon.project_path().join("b.txt").exists(), expected[1] == Done, "{mode:?}");
    }
}

#[tokio::test]
async fn auto_approve_lets_the_classifier_approve_a_read_only_command_without_asking() {
    let mut setup = setup(
        json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": "ls"}}]}, {"text": "ok"}]}),
        None,
    )
    .await;
    let events = run_answering(&mut setup, None).await;
    assert_eq!(tool_statuses(&events), [ToolResultStatus::Ok]);
}

#[tokio::test]
async fn approve_tree_grants_the_same_operation_to_later_runs_without_asking() {
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch granted.txt"}}]},
        {"text": "first run done"},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch granted.txt"}}]},
        {"text": "second run done"},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch granted.txt other.txt"}}]},
        {"text": "third run done"}
    ]});
    let mut setup = setup(script, Some(PermissionMode::Ask)).await;
    let first = run_answering(&mut setup, Some(ApprovalDecision::ApproveTree)).await;
    assert!(kinds(&first).contains(&"tree_approval_grant_committed"));
    let second = run_answering(&mut setup, None).await;
    assert_eq!(tool_statuses(&second), [ToolResultStatus::Ok], "no second approval for the granted operation");
    // A grant covers exactly its resource: a command that merely starts like it asks again.
    let third = run_answering(&mut setup, Some(ApprovalDecision::Reject)).await;
    let asked: Vec<ApprovalRecord> = third.iter().filter_map(requested).collect();
    assert_eq!(asked.len(), 1, "{:?}", kinds(&third));
    assert_eq!(asked[0].operation.resource, "touch granted.txt other.txt");
    assert_eq!(tool_statuses(&third), [ToolResultStatus::Denied]);
    assert!(!setup.daemon.project_path().join("other.txt").exists());
    let listed = setup
        .client
        .call::<method::ApprovalList>(ApprovalListParams { root_session_id: setup.session_id.clone(), status: None })
        .await
        .unwrap();
    assert_eq!(listed.tree_grants.len(), 1);
    assert_eq!(listed.tree_grants[0].resource, "touch granted.txt");
    let decisions: Vec<_> = listed.approvals.iter().map(|record| (record.status, record.decision)).collect();
    assert_eq!(
        decisions,
        [
            (ApprovalStatus::Approved, Some(ApprovalDecision::ApproveTree)),
            (ApprovalStatus::Rejected, Some(ApprovalDecision::Reject))
        ]
    );
}

#[tokio::test]
async fn a_rejection_with_feedback_reaches_the_model_in_the_tool_result() {
    let models = FakeResponse::status(200, &[], json!({"data": [{"id": "m"}]}).to_string());
    let call = |id: &str| {
        let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function",
            "function": {"name": "write_file", "arguments": "{\"path\": \"x.txt\", \"content\": \"y\"}"}}]}, "finish_reason": null}]});
        let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
        FakeResponse::Sse {
            pieces: vec![format!("data: {chunk}\n\n"), format!("data: {end}\n\n"), "data: [DONE]\n\n".into()],
        }
    };
    let text = {
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": "understood"}, "finish_reason": "stop"}]});
        FakeResponse::Sse { pieces: vec![format!("data: {chunk}\n\n"), "data: [DONE]\n\n".into()] }
    };
    let vendor = FakeServer::start(vec![models, call("call_1"), text]).await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let session = daemon.create_session(&client).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    start_run(&client, &session.session_id, selection_of("default", "openai/m"), "write it").await;
    let asked = events_until(&mut deliveries, |e| requested(e).is_some()).await;
    let record = requested(asked.last().unwrap()).unwrap();
    let mut params = respond_params(&record, "reject-1", ApprovalDecision::Reject);
    params.feedback = Some(ApprovalFeedback { message: "not in this directory, please".into() });
    let rejected = respond(&client, params).await.unwrap();
    assert_eq!(rejected.status, ApprovalStatus::Rejected);
    assert_eq!(rejected.feedback.as_deref(), Some("not in this directory, please"));
    let events = events_until(&mut deliveries, is_terminal).await;
    assert_eq!(tool_statuses(&events), [ToolResultStatus::Denied]);
    let follow_up = vendor.requests()[2].json();
    let tool_message = follow_up["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap().clone();
    assert!(tool_message["content"].as_str().unwrap().contains("not in this directory, please"), "{tool_message}");
    assert!(!daemon.project_path().join("x.txt").exists());
}

#[tokio::test]
async fn cancel_as_an_answer_cancels_the_call_and_the_run_goes_on() {
    let mut setup = setup(write_then_shell(), Some(PermissionMode::Ask)).await;
    start_run(&setup.client, &setup.session_id, selection_of("default", "local/scripted"), "go").await;
    let asked = events_until(&mut setup.deliveries, |e| requested(e).is_some()).await;
    let record = requested(asked.last().unwrap()).unwrap();
    let cancelled = respond(&setup.client, respond_params(&record, "c1", ApprovalDecision::Cancel)).await.unwrap();
    assert_eq!(cancelled.status, ApprovalStatus::Cancelled);
    let asked = events_until(&mut setup.deliveries, |e| requested(e).is_some()).await;
    assert_eq!(tool_statuses(&asked), [ToolResultStatus::Cancelled]);
    // Cancelling the run cancels its pending approval.
    let run_id = asked.last().unwrap().run_id.clone().unwrap();
    setup.client.call::<method::RunCancel>(troupe_protocol::types::run::RunIdParams { run_id }).await.unwrap();
    let end = events_until(&mut setup.deliveries, is_terminal).await;
    assert!(kinds(&end).contains(&"approval_cancelled"), "{:?}", kinds(&end));
    let listed = setup
        .client
        .call::<method::ApprovalList>(ApprovalListParams {
            root_session_id: setup.session_id.clone(),
            status: Some(ApprovalStatus::Pending),
        })
        .await
        .unwrap();
    assert!(listed.approvals.is_empty());
}

#[tokio::test]
async fn of_two_racing_answers_exactly_one_wins_and_stale_or_mismatched_answers_are_refused() {
    let mut setup = setup(write_then_shell(), Some(PermissionMode::Ask)).await;
    start_run(&setup.client, &setup.session_id, selection_of("default", "local/scripted"), "go").await;
    let asked = events_until(&mut setup.deliveries, |e| requested(e).is_some()).await;
    let record = requested(asked.last().unwrap()).unwrap();

    // A client that connects now finds it through approval.list.
    let (late, _late_deliveries) = setup.daemon.client().await;
    let pending = late
        .call::<method::ApprovalList>(ApprovalListParams {
            root_session_id: setup.session_id.clone(),
            status: Some(ApprovalStatus::Pending),
        })
        .await
        .unwrap();
    assert_eq!(pending.approvals, vec![record.clone()]);

    let mut stale = respond_params(&record, "stale", ApprovalDecision::ApproveOnce);
    stale.request_revision = 7;
    let ClientError::Rpc(stale) = respond(&late, stale).await.unwrap_err() else { panic!() };
    assert_eq!((stale.code, stale.typed_code()), (-32602, Some("approval_revision_conflict")));
    let mut wrong = respond_params(&record, "wrong", ApprovalDecision::ApproveOnce);
    wrong.operation_fingerprint = "0".repeat(64);
    let ClientError::Rpc(wrong) = respond(&late, wrong).await.unwrap_err() else { panic!() };
    assert_eq!((wrong.code, wrong.typed_code()), (-32602, Some("operation_fingerprint_mismatch")));

    let (first, second) = tokio::join!(
        respond(&setup.client, respond_params(&record, "laptop", ApprovalDecision::ApproveOnce)),
        respond(&late, respond_params(&record, "phone", ApprovalDecision::Reject)),
    );
    let (winner, loser) = match (first, second) {
        (Ok(winner), Err(loser)) | (Err(loser), Ok(winner)) => (winner, loser),
        other => panic!("exactly one answer must win: {other:?}"),
    };
    let ClientError::Rpc(loser) = loser else { panic!() };
    assert_eq!((loser.code, loser.typed_code()), (-32000, Some("approval_not_pending")));
    assert_ne!(winner.status, ApprovalStatus::Pending);
    assert!(winner.answered_by.as_deref().unwrap().starts_with("client:"));
    // The winner's redelivery is answered like the first time.
    let client_response_id = if winner.decision == Some(ApprovalDecision::ApproveOnce) { "laptop" } else { "phone" };
    let decision = winner.decision.unwrap();
    let again = respond(&setup.client, respond_params(&record, client_response_id, decision)).await.unwrap();
    assert_eq!(again, winner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_cancels_a_pending_approval_and_interrupts_its_run() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, data_dir.path(), write_then_shell()).await;
    let session = create_session_in(&client, project.path()).await;
    set_mode(&client, &session.session_id, PermissionMode::Ask).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    let asked = events_until(&mut deliveries, |e| requested(e).is_some()).await;
    let pending = requested(asked.last().unwrap()).unwrap();
    daemon.kill();

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    let listed = eventually_some("no approval pending in the list", WAIT, || async {
        let listed = client
            .call::<method::ApprovalList>(ApprovalListParams {
                root_session_id: session.session_id.clone(),
                status: None,
            })
            .await
            .unwrap();
        listed.approvals.iter().all(|record| record.status != ApprovalStatus::Pending).then_some(listed)
    })
    .await;
    assert_eq!(listed.approvals.len(), 1);
    assert_eq!(listed.approvals[0].approval_id, pending.approval_id);
    assert_eq!(listed.approvals[0].status, ApprovalStatus::Cancelled);
    assert!(!project.path().join("a.txt").exists());

    // The run itself is recorded as interrupted, once, after its approval was cancelled, and nothing ran.
    client.subscribe(&session.session_id, None).await.unwrap();
    let events = events_until(&mut deliveries, |event| {
        event.run_id.as_deref() == Some(&run_id) && matches!(event.payload, EventPayload::RunInterrupted { .. })
    })
    .await;
    let cancelled_at = events.iter().position(|event| {
        matches!(&event.payload, EventPayload::ApprovalCancelled { approval_id, .. } if *approval_id == pending.approval_id)
    });
    let interrupted_at = events.len() - 1;
    assert!(cancelled_at.is_some_and(|at| at < interrupted_at), "{:?}", kinds(&events));
    let run_ends: Vec<&StoredEvent> =
        events.iter().filter(|event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).collect();
    assert_eq!(run_ends.len(), 1, "{:?}", kinds(&events));
    assert!(tool_statuses(&events).iter().all(|status| *status != ToolResultStatus::Ok), "{:?}", kinds(&events));

    // The session has no active run any more: a new one starts and completes.
    let next = start_run(&client, &session.session_id, echo_selection(), "again").await;
    assert_ne!(next, run_id);
    let after =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&next) && is_terminal(event)).await;
    assert!(matches!(after.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&after));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_mode_is_auto_approve_again_and_tree_grants_still_hold() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let write =
        |path: &str| json!({"tool_calls": [{"tool": "write_file", "arguments": {"path": path, "content": "x"}}]});
    // Run 1 plays turns 0-1, run 2 turns 2-4 (a turn is chosen by the number of assistant messages so far).
    let script = json!({"turns": [write("a.txt"), {"text": "one"}, write("a.txt"), write("b.txt"), {"text": "two"}]});
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, data_dir.path(), script).await;
    let session = create_session_in(&client, project.path()).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "first").await;
    let asked = events_until(&mut deliveries, |e| requested(e).is_some()).await;
    let record = requested(asked.last().unwrap()).unwrap();
    respond(&client, respond_params(&record, "grant-a", ApprovalDecision::ApproveTree)).await.unwrap();
    events_until(&mut deliveries, is_terminal).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    drop(client);
    daemon.terminate();

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    let second = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "second").await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let events =
        events_until(&mut deliveries, |e| e.run_id.as_deref() == Some(&second) && requested(e).is_some()).await;
    let asked: Vec<ApprovalRecord> =
        events.iter().filter(|e| e.run_id.as_deref() == Some(&second)).filter_map(requested).collect();
    assert_eq!(asked.len(), 1, "only b.txt asks");
    assert!(asked[0].operation.resource.ends_with("b.txt"), "{:?}", asked[0].operation);
    let statuses =
        tool_statuses(&events.into_iter().filter(|e| e.run_id.as_deref() == Some(&second)).collect::<Vec<_>>());
    assert_eq!(statuses, [ToolResultStatus::Ok], "a.txt ran unasked under the grant");
    client.call::<method::RunCancel>(troupe_protocol::types::run::RunIdParams { run_id: second }).await.unwrap();
}
