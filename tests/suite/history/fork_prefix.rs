//! `session.fork` copies the physical prefix exactly (every kind, the same sequences), so a client holding the
//! source's events follows the fork from `cursor = through_seq`; the fork's own events then end what must not
//! carry over (the goal, producer messages, tree grants, the source's place in its tree, usage already counted).
//! And a tree grant made on a branch a revert hid stops applying.

use serde_json::{Value, json};
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::approval::{
    ApprovalDecision, ApprovalListParams, ApprovalListResult, ApprovalRecord, ApprovalRespondParams,
};
use troupe_protocol::types::common::{Empty, SessionIdParams, SessionMeta, SessionOrigin, SessionStatus};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::goal::GoalStatus;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::{PermissionMode, SessionForkParams, SessionListParams};
use troupe_protocol::types::usage::UsageRollup;

use super::super::approvals::tool_statuses;
use super::super::support::*;

const SOURCE: &str = "01957a1c-0000-7000-8000-0000000000f1";
const CHILD: &str = "01957a1c-0000-7000-8000-0000000000f2";

async fn get(client: &Client, session_id: &str) -> SessionMeta {
    within("session.get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }))
        .await
        .expect("session.get")
        .session
}

async fn fork(client: &Client, session_id: &str, through_seq: u64) -> String {
    let params = SessionForkParams { session_id: session_id.into(), through_seq };
    within("session.fork", client.call::<method::SessionFork>(params)).await.expect("session.fork").session_id
}

async fn approvals(client: &Client, root: &str) -> ApprovalListResult {
    let params = ApprovalListParams { root_session_id: root.into(), status: None };
    within("approval.list", client.call::<method::ApprovalList>(params)).await.expect("approval.list")
}

async fn global_usage(client: &Client) -> UsageRollup {
    within("usage.global", client.call::<method::UsageGlobal>(Empty {})).await.expect("usage.global").usage
}

/// Events of `session_id` from `cursor` on `deliveries`, through seq `last`.
async fn events_through(
    client: &Client,
    deliveries: &mut Deliveries,
    session_id: &str,
    cursor: Option<u64>,
    last: u64,
) -> Vec<StoredEvent> {
    client.subscribe(session_id, cursor).await.expect("subscribe");
    events_until(deliveries, |event| event.session_id == session_id && event.seq == last)
        .await
        .into_iter()
        .filter(|event| event.session_id == session_id)
        .collect()
}

/// A source with every kind of state a fork must not take over, as the daemon would have written it: a run with
/// its usage and a delegation, a tree grant, a paused goal, a producer's pending message, archived, and a rename
/// that a revert hid. Its child is laid down too.
fn lay_down_source(data_dir: &std::path::Path) -> u64 {
    let payloads = [
        json!({"type": "session_title_committed", "title": "Visible", "change": "set", "client_rename_id": "r1"}),
        json!({"type": "run_started", "client_run_id": "c1", "selection": echo_selection(), "input": "hello",
            "fallback_index": 0}),
        json!({"type": "model_usage_recorded", "attempt_id": "a1", "model": "local/echo", "agent": "default",
            "input_tokens": 10, "output_tokens": 5}),
        json!({"type": "delegate_started", "tool_call_id": "t1", "child_session_id": CHILD, "agent": "default",
            "task": "help"}),
        json!({"type": "delegate_finished", "tool_call_id": "t1", "child_session_id": CHILD, "status": "completed",
            "summary": "helped"}),
        json!({"type": "run_completed", "final_text": "hello"}),
        json!({"type": "tree_approval_grant_committed", "grant": {"action": "execute", "resource": "make",
            "granted_at": "2026-01-01T00:00:01.000Z", "granted_by": "test"}}),
        json!({"type": "goal_activated", "goal_id": "g1", "objective": "ship", "revision": 1, "selection": null}),
        json!({"type": "goal_lifecycle_changed", "goal_id": "g1", "revision": 2, "status": "paused"}),
        json!({"type": "session_archived", "archived": true}),
        json!({"type": "session_title_committed", "title": "Hidden", "change": "set", "client_rename_id": "r2"}),
        json!({"type": "session_reverted", "through_seq": 11}),
        json!({"type": "producer_message_accepted", "message_id": "m1",
            "producer_owner": {"type": "plugin", "plugin": "p"}, "mode": "steer", "idempotency_key": "k1",
            "body": "from the producer"}),
    ];
    let run_events = 3..=7;
    let mut lines = vec![session_created_line(SOURCE, json!({"type": "root"}))];
    for (index, payload) in payloads.into_iter().enumerate() {
        let seq = index as u64 + 2;
        let run_id = run_events.contains(&seq).then_some("run-1");
        lines.push(
            json!({"session_id": SOURCE, "run_id": run_id, "seq": seq, "timestamp": "2026-01-01T00:00:01.000Z",
                "origin": "user", "payload": payload})
            .to_string(),
        );
    }
    let last = lines.len() as u64;
    lines.push(String::new());
    write_session_log(data_dir, SOURCE, &lines);
    let delegated = json!({"type": "delegated", "root_session_id": SOURCE, "parent_session_id": SOURCE,
        "parent_run_id": "run-1", "parent_tool_call_id": "t1", "depth": 1});
    write_session_log(data_dir, CHILD, &[session_created_line(CHILD, delegated), String::new()]);
    last
}

fn without_session_id(event: &StoredEvent) -> Value {
    let mut value = serde_json::to_value(event).unwrap();
    value["session_id"] = Value::Null;
    value
}

#[tokio::test]
async fn a_fork_copies_every_event_of_the_prefix_at_its_seq_and_ends_what_must_not_carry_over() {
    let data_dir = tempfile::tempdir().unwrap();
    let through = lay_down_source(data_dir.path());
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, mut deliveries) = daemon.client().await;
    // The source's own pending message wakes it into a run: the fork is measured once that run has ended and the
    // usage index counts it (the source's spending is then all there is).
    let source_events = events_through(&client, &mut deliveries, SOURCE, None, through).await;
    assert_eq!(source_events.len() as u64, through);
    events_until(&mut deliveries, |event| event.session_id == SOURCE && event.seq > through && is_terminal(event))
        .await;
    let usage_before = eventually_some("the index counts the source's run", WAIT, || async {
        let global = global_usage(&client).await;
        let source = client.call::<method::SessionUsage>(SessionIdParams { session_id: SOURCE.into() });
        (source.await.unwrap().spent.totals == global.totals).then_some(global)
    })
    .await;

    let fork_id = fork(&client, SOURCE, through).await;

    // A client holding the source's events 1..=through follows the fork from there: the fork's own events only.
    let (follower, mut followed) = daemon.client().await;
    let own = events_through(&follower, &mut followed, &fork_id, Some(through), through + 4).await;
    assert_eq!(
        kinds(&own),
        ["session_forked", "session_title_committed", "goal_lifecycle_changed", "producer_message_discarded"]
    );
    assert_eq!(own.iter().map(|event| event.seq).collect::<Vec<_>>(), (through + 1..=through + 4).collect::<Vec<_>>());
    assert_eq!(own[0].payload, EventPayload::SessionForked { source_session_id: SOURCE.into(), through_seq: through });
    assert!(matches!(
        &own[2].payload,
        EventPayload::GoalLifecycleChanged { status: GoalStatus::Cancelled, revision: 3, reason: Some(_), .. }
    ));
    assert_eq!(own[3].payload, EventPayload::ProducerMessageDiscarded { message_id: "m1".into() });

    // The prefix itself: every kind, the same seqs and contents, under the fork's id.
    let (reader, mut read) = daemon.client().await;
    let copied = events_through(&reader, &mut read, &fork_id, None, through).await;
    assert!(copied.iter().all(|event| event.session_id == fork_id));
    assert_eq!(
        copied.iter().map(without_session_id).collect::<Vec<_>>(),
        source_events.iter().map(without_session_id).collect::<Vec<_>>()
    );

    // The copied request was the source's: counted once. The fork's visible usage is its conversation's.
    let fork_meta = get(&client, &fork_id).await;
    let session_usage = || client.call::<method::SessionUsage>(SessionIdParams { session_id: fork_id.clone() });
    let usage = session_usage().await.unwrap();
    assert_eq!(usage.usage.totals.input_tokens, 10, "the conversation the fork continues");
    assert_eq!(usage.spent.totals.request_count, 0, "the fork spent nothing yet");
    assert_eq!(global_usage(&client).await, usage_before, "usage.global counts the copied request once");

    // Nothing of the source acts in the fork: no wake-up run for the discarded message, no goal run; the next
    // event is the run a client starts.
    assert_eq!(fork_meta.last_event_seq, through + 4, "the fork appended nothing of its own accord");
    let run_id = start_run(&follower, &fork_id, echo_selection(), "in the fork").await;
    let run = events_until(&mut followed, |event| event.session_id == fork_id && is_terminal(event)).await;
    let started = run.iter().find(|event| matches!(event.payload, EventPayload::RunStarted { .. })).unwrap();
    assert_eq!((started.seq, started.run_id.as_deref()), (through + 5, Some(run_id.as_str())));

    // The fork's metadata: the visible branch's title and status, a listed root session, archived or not.
    assert_eq!(fork_meta.title.as_deref(), Some("Visible (fork)"));
    assert_eq!(fork_meta.origin, SessionOrigin::Root);
    assert!(!fork_meta.archived);
    assert_eq!(fork_meta.status, SessionStatus::Completed);
    let listed = client.call::<method::SessionList>(SessionListParams::default()).await.unwrap().sessions;
    assert!(listed.iter().any(|session| session.session_id == fork_id), "a fork is listed");
    let goal = client.call::<method::SessionGoalGet>(SessionIdParams { session_id: fork_id.clone() }).await;
    assert_eq!(goal.unwrap().goal.map(|goal| (goal.goal_id, goal.status)), Some(("g1".into(), GoalStatus::Cancelled)));
    assert!(approvals(&client, &fork_id).await.tree_grants.is_empty(), "the source tree's grant is not the fork's");
    assert_eq!(approvals(&client, SOURCE).await.tree_grants.len(), 1);
    let children =
        |session_id: &str| client.call::<method::SessionChildren>(SessionIdParams { session_id: session_id.into() });
    assert!(children(&fork_id).await.unwrap().children.is_empty(), "the copied delegation adopts no child");
    assert_eq!(children(SOURCE).await.unwrap().children.len(), 1);

    // After its own run, the fork's spending is that run's, in every rollup (the index follows the commits).
    let spent = session_usage().await.unwrap().spent.totals;
    assert!(spent.request_count > 0, "the fork's own run is its spending: {spent:?}");
    eventually_some("the index counts the fork's run, once", WAIT, || async {
        let global = global_usage(&client).await.totals;
        let tree = client.call::<method::SessionTreeUsage>(SessionIdParams { session_id: fork_id.clone() });
        let tree = tree.await.unwrap().usage.totals;
        (global.input_tokens - usage_before.totals.input_tokens == spent.input_tokens && tree == spent).then_some(())
    })
    .await;
}

fn requested(event: &StoredEvent) -> Option<ApprovalRecord> {
    match &event.payload {
        EventPayload::ApprovalRequested { approval } => Some((**approval).clone()),
        _ => None,
    }
}

/// Starts a run and answers its approvals with `answer` (none expected when `None`); returns its events.
async fn run_answering(
    client: &Client,
    deliveries: &mut Deliveries,
    session_id: &str,
    answer: Option<ApprovalDecision>,
) -> Vec<StoredEvent> {
    start_run(client, session_id, selection_of("default", "local/scripted"), "go").await;
    let mut events = Vec::new();
    loop {
        let mut batch = events_until(deliveries, |event| is_terminal(event) || requested(event).is_some()).await;
        let last = batch.last().cloned().unwrap();
        events.append(&mut batch);
        let Some(record) = requested(&last) else { return events };
        let decision = answer.unwrap_or_else(|| panic!("no approval expected, got {record:?}"));
        let params = ApprovalRespondParams {
            session_id: record.session_id.clone(),
            approval_id: record.approval_id.clone(),
            request_revision: record.revision,
            operation_fingerprint: record.operation_fingerprint.clone(),
            client_response_id: format!("answer-{}", record.approval_id),
            decision,
            feedback: None,
        };
        within("approval.respond", client.call::<method::ApprovalRespond>(params)).await.expect("respond");
    }
}

#[tokio::test]
async fn a_tree_grant_made_on_a_branch_a_revert_hid_stops_applying() {
    let command = json!({"tool_calls": [{"tool": "shell", "arguments": {"command": "touch granted.txt"}}]});
    let script = json!({"turns": [
        {"text": "nothing yet"},
        command, {"text": "granted"},
        command, {"text": "no question"},
        command, {"text": "asked again"}
    ]});
    let (daemon, client, mut deliveries) = scripted_daemon(script).await;
    let id = daemon.create_session(&client).await.session_id;
    set_mode(&client, &id, PermissionMode::Ask).await;
    client.subscribe(&id, None).await.expect("subscribe");
    let first = run_answering(&client, &mut deliveries, &id, None).await;
    let before_grant = first.last().unwrap().seq;
    let granting = run_answering(&client, &mut deliveries, &id, Some(ApprovalDecision::ApproveTree)).await;
    assert!(kinds(&granting).contains(&"tree_approval_grant_committed"));
    let covered = run_answering(&client, &mut deliveries, &id, None).await;
    assert_eq!(tool_statuses(&covered), [ToolResultStatus::Ok], "the grant covers the operation");

    // Back to before the grant: the same operation is asked about again.
    revert(&client, &id, before_grant).await.expect("revert");
    assert!(approvals(&client, &id).await.tree_grants.is_empty(), "approval.list shows no hidden grant");
    let asked = run_answering(&client, &mut deliveries, &id, Some(ApprovalDecision::Reject)).await;
    let asked_for: Vec<String> = asked.iter().filter_map(requested).map(|record| record.operation.resource).collect();
    assert_eq!(asked_for, ["touch granted.txt"], "{:?}", kinds(&asked));
    assert_eq!(tool_statuses(&asked), [ToolResultStatus::Denied]);
}
