//! Attacks on delegation (red team), found to hold: the root's mode changed while a child works, a child's tree
//! grant outliving the tree's approval actor, a client steering a child's run, revert and fork while a delegation
//! works and a revert into a finished one, many delegations in one turn and over many turns (nothing left behind, a
//! tiny `hibernate_after` included), results in call order with a huge answer capped, agents on disconnected models,
//! extra arguments, an unknown agent's call in a full turn, stdin for a delegate call, a child's approval answered
//! under the root's id. Cancellations are in `cancels`, daemon stops in `restarts`.
//! Each test states what must hold (one found a bug, now fixed: an unknown agent's call took a concurrency slot).

use serde_json::{Value, json};
use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::approval::{ApprovalListParams, ApprovalRecord, ApprovalStatus};
use troupe_protocol::types::common::SessionStatus;
use troupe_protocol::types::events::{DelegateStatus, EventPayload, StoredEvent};
use troupe_protocol::types::run::{RunIdParams, ToolResultStatus};
use troupe_protocol::types::session::{PermissionMode, SessionChildSummary};

use super::delegation::{
    MidDelegation, Tree, children, children_when, config, delegate, get, mid_delegation, tree, tree_with,
};
use super::support::*;

/// The attacks that cancel a parent or a child.
mod cancels;
/// The attacks that stop and start the daemon binary.
mod restarts;
/// The bound on the sessions one tree creates.
mod tree_cap;

/// Delegating to any agent is allowed by a rule, so under `ask` only what the children do asks.
const ALLOW_DELEGATE: &str =
    "\n[[permissions.rules]]\neffect = \"allow\"\naction = \"execute\"\nresource = \"agent:*\"\ntool = \"delegate\"\n";

async fn status(client: &Client, session_id: &str) -> SessionStatus {
    get(client, session_id).await.status
}

async fn pending_approvals(client: &Client, root: &str) -> Vec<ApprovalRecord> {
    let params = ApprovalListParams { root_session_id: root.to_owned(), status: Some(ApprovalStatus::Pending) };
    within("approval.list", client.call::<method::ApprovalList>(params)).await.expect("approval.list").approvals
}

/// Polls `approval.list` of the tree until an approval is pending; returns the first.
async fn first_pending_approval(client: &Client, root: &str, what: &str) -> ApprovalRecord {
    eventually_some(what, WAIT, || async { pending_approvals(client, root).await.into_iter().next() }).await
}

fn running(child: &SessionChildSummary) -> bool {
    child.status == SessionStatus::Running
}

fn delegate_statuses(events: &[StoredEvent]) -> Vec<DelegateStatus> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::DelegateFinished { status, .. } => Some(*status),
            _ => None,
        })
        .collect()
}

/// A root script of `turns` turns of `per_turn` delegations to `helper` ("task {turn}-{index}", each child
/// answering `answer(turn, index)`), then "parent done".
fn delegation_waves(turns: usize, per_turn: usize, answer: impl Fn(usize, usize) -> String) -> Value {
    let mut script: Vec<Value> = (0..turns)
        .map(|turn| {
            let calls: Vec<Value> =
                (0..per_turn).map(|index| delegate("helper", &format!("task {turn}-{index}"))).collect();
            json!({"tool_calls": calls})
        })
        .collect();
    script.push(json!({"text": "parent done"}));
    let mut by_input = serde_json::Map::new();
    for turn in 0..turns {
        for index in 0..per_turn {
            by_input.insert(format!("task {turn}-{index}"), json!({"turns": [{"text": answer(turn, index)}]}));
        }
    }
    json!({"turns": script, "by_input": by_input})
}

/// Runs `script` in a yolo root on a daemon whose idle actors hibernate after `hibernate_after_ms`; returns the
/// tree and the root's events up to the run's end.
async fn run_waves(hibernate_after_ms: u64, script: Value) -> (Tree, Vec<StoredEvent>) {
    let setup = DaemonSetup {
        config_toml: Some(config(3, 4, "")),
        hibernate_after: Some(std::time::Duration::from_millis(hibernate_after_ms)),
        ..Default::default()
    };
    let mut tree = tree_with(setup, script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    (tree, events)
}

/// The id of the run a session's own events show started (a child's delegated run).
async fn first_run_id(daemon: &TestDaemon, session_id: &str) -> String {
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(session_id, None).await.expect("subscribe to the child");
    let events = events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunStarted { .. })).await;
    events.last().and_then(|event| event.run_id.clone()).expect("the run's id")
}

#[tokio::test]
async fn the_roots_mode_changed_to_ask_while_a_child_works_makes_the_childs_next_command_ask() {
    // The child's first answer waits, so the mode changes before it asks to run its command.
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "make a file")]}, {"text": "parent done"}],
        "by_input": {"make a file": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch asked-first.txt"}}], "delay_ms": 1500},
            {"text": "made it"}
        ]}}
    });
    let tree = tree(config(3, 4, ALLOW_DELEGATE), script, PermissionMode::Yolo).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    children_when(&tree.client, &tree.root, |listed| listed.first().is_some_and(running)).await;
    set_mode(&tree.client, &tree.root, PermissionMode::Ask).await;
    let client = tree.client.clone();
    let root = tree.root.clone();
    let asked = eventually_some("the child's command to ask", WAIT, || async {
        let pending = pending_approvals(&client, &root).await.into_iter().next();
        assert!(
            pending.is_some() || !tree.daemon.project_path().join("asked-first.txt").exists(),
            "the child ran its command without asking after the root's mode became ask"
        );
        pending
    })
    .await;
    assert_eq!(asked.operation.resource, "touch asked-first.txt");
    let _ = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
}

#[tokio::test]
async fn six_delegations_in_one_turn_start_at_most_max_concurrency_children() {
    let calls: Vec<Value> = (0..6).map(|index| delegate("helper", &format!("task {index}"))).collect();
    let by_input: serde_json::Map<String, Value> = (0..6)
        .map(|index| (format!("task {index}"), json!({"turns": [{"text": format!("answer {index}")}]})))
        .collect();
    let script = json!({"turns": [{"tool_calls": calls}, {"text": "parent done"}], "by_input": by_input});
    let mut tree = tree(config(3, 2, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));
    let results = tool_results(&events);
    assert_eq!(results.len(), 6);
    let ok = results.iter().filter(|result| result.status == ToolResultStatus::Ok).count();
    let refused = results.iter().filter(|result| result.output.contains("max_concurrency")).count();
    assert_eq!((ok, refused), (2, 4), "{results:?}");
    assert_eq!(children(&tree.client, &tree.root).await.len(), 2);
}

#[tokio::test]
async fn delegating_to_an_agent_on_a_disconnected_model_is_an_error_result_and_no_child_is_left_running() {
    let script = json!({
        "turns": [
            {"tool_calls": [delegate("remote", "needs a vendor"),
                            {"tool": "delegate", "arguments": {"agent": "helper", "task": "t", "extra": 1}}]},
            {"text": "the parent goes on"}
        ]
    });
    let extra = "\n[agents.remote]\nmodels = [\"openai/not-connected\"]\n";
    let mut tree = tree(config(3, 4, extra), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(
        matches!(&events.last().unwrap().payload, EventPayload::RunCompleted { final_text: Some(text) } if text == "the parent goes on"),
        "{:?}",
        kinds(&events)
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|result| result.status == ToolResultStatus::Error), "{results:?}");
    assert!(results[1].output.contains("invalid arguments"), "{}", results[1].output);
    for child in children(&tree.client, &tree.root).await {
        assert_ne!(child.status, SessionStatus::Running, "a child left running: {child:?}");
    }
}

fn typed_code<T: std::fmt::Debug>(result: Result<T, troupe_protocol::client::ClientError>) -> Option<String> {
    match result {
        Err(troupe_protocol::client::ClientError::Rpc(error)) => error.typed_code().map(str::to_owned),
        other => panic!("expected a typed error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_client_steers_a_child_run_and_the_steer_reaches_the_childs_next_turn() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "steerable task")]}, {"text": "parent done"}],
        "by_input": {"steerable task": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "true"}}], "delay_ms": 1500},
            {"text": "after the steer"}
        ]}}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let child = children_when(&tree.client, &tree.root, |listed| listed.first().is_some_and(running)).await[0]
        .session_id
        .clone();
    let child_run = first_run_id(&tree.daemon, &child).await;
    let params = troupe_protocol::types::run::RunSteerParams {
        run_id: child_run,
        input: "also say hi".into(),
        attachments: Vec::new(),
    };
    let steered = within("run.steer", tree.client.call::<method::RunSteer>(params)).await;
    assert!(steered.expect("run.steer of a child's run").accepted);
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert_eq!(tool_results(&events)[0].output, "after the steer");

    let (client, mut deliveries) = tree.daemon.client().await;
    client.subscribe(&child, None).await.unwrap();
    let child_events = events_until(&mut deliveries, is_terminal).await;
    assert!(
        child_events.iter().any(|event| matches!(&event.payload,
            EventPayload::UserInputSubmitted { input, .. } if input == "also say hi")),
        "{:?}",
        kinds(&child_events)
    );
}

#[tokio::test]
async fn revert_is_refused_and_fork_copies_an_idle_root_while_a_delegation_is_at_work() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "slow task")]}],
        "by_input": {"slow task": {"turns": [{"text": "never", "delay_ms": 600000}]}}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let started =
        events_until(&mut tree.deliveries, |event| matches!(event.payload, EventPayload::DelegateStarted { .. })).await;
    let started_seq = started.last().unwrap().seq;
    let child = children_when(&tree.client, &tree.root, |listed| listed.first().is_some_and(running)).await[0]
        .session_id
        .clone();
    assert_eq!(typed_code(revert(&tree.client, &tree.root, 1).await).as_deref(), Some("session_busy"));
    assert_eq!(typed_code(revert(&tree.client, &child, 1).await).as_deref(), Some("session_busy"));

    let params =
        troupe_protocol::types::session::SessionForkParams { session_id: tree.root.clone(), through_seq: started_seq };
    let fork = within("session.fork", tree.client.call::<method::SessionFork>(params)).await.expect("fork").session_id;
    assert_ne!(status(&tree.client, &fork).await, SessionStatus::Running, "the fork's copied run is closed");
    assert!(children(&tree.client, &fork).await.is_empty(), "the fork does not adopt the root's child");
    assert_eq!(children(&tree.client, &tree.root).await.len(), 1);
    assert_eq!(status(&tree.client, &child).await, SessionStatus::Running, "the child goes on");

    let cancelled = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
    assert!(cancelled.expect("run.cancel").cancelled);
    events_until(&mut tree.deliveries, is_terminal).await;
    assert_eq!(status(&tree.client, &child).await, SessionStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_delegations_leave_no_run_approval_actor_or_session_actor_behind() {
    const TURNS: usize = 4;
    const PER_TURN: usize = 4;
    let script = delegation_waves(TURNS, PER_TURN, |turn, index| format!("answer {turn}-{index}"));
    let (Tree { daemon, client, deliveries, root }, events) = run_waves(200, script).await;
    let results = tool_results(&events);
    assert_eq!(results.len(), TURNS * PER_TURN);
    assert!(results.iter().all(|result| result.status == ToolResultStatus::Ok), "{results:?}");
    assert_eq!(children(&client, &root).await.len(), TURNS * PER_TURN);
    drop(client);
    drop(deliveries);
    eventually_some("every actor of the tree to go", WAIT, || async {
        let sizes = daemon.engine().sizes().await.expect("sizes");
        (sizes.runs.active == 0 && sizes.approval_actors == 0 && sizes.live_sessions == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn concurrent_results_follow_the_call_order_and_a_huge_answer_is_cut_with_a_note() {
    let huge = "word ".repeat(8 * 1024); // 40 KiB
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "slow huge"), delegate("helper", "fast small")]}, {"text": "done"}],
        "by_input": {
            "slow huge": {"turns": [{"text": huge, "delay_ms": 400}]},
            "fast small": {"turns": [{"text": "small"}]}
        }
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    let terminated: Vec<&str> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolCallTerminated { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(terminated, ["call-1-1", "call-1-2"], "{:?}", kinds(&events));
    let results = tool_results(&events);
    assert_eq!(results[1].output, "small");
    assert!(results[0].output.len() < 17 * 1024, "{}", results[0].output.len());
    assert!(results[0].output.contains("[truncated: the first"), "{}", &results[0].output[16 * 1024 - 100..]);
    let summary = events.iter().find_map(|event| match &event.payload {
        EventPayload::DelegateFinished { summary, tool_call_id, .. } if tool_call_id == "call-1-1" => Some(summary),
        _ => None,
    });
    assert_eq!(summary, Some(&results[0].output), "the event carries the same bounded summary");
}

#[tokio::test]
async fn a_revert_into_a_finished_delegation_leaves_the_root_usable_and_the_child_untouched() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "quick task")]}, {"text": "parent done"}],
        "by_input": {"quick task": {"turns": [{"text": "quick answer"}]}}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    let started_seq = events
        .iter()
        .find(|event| matches!(event.payload, EventPayload::DelegateStarted { .. }))
        .map(|event| event.seq)
        .unwrap();
    let child = children(&tree.client, &tree.root).await[0].session_id.clone();
    revert(&tree.client, &tree.root, started_seq).await.expect("revert into the delegation");
    let after = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(after.last().unwrap().payload, EventPayload::RunInterrupted { .. }), "{:?}", kinds(&after));
    assert_ne!(status(&tree.client, &tree.root).await, SessionStatus::Running);
    assert_eq!(status(&tree.client, &child).await, SessionStatus::Completed, "the child is not touched");
    assert_eq!(children(&tree.client, &tree.root).await.len(), 1, "the hidden delegation's child stays listed");
    // A new run on the reverted root works (the scripted model plays the turn after the visible history's).
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "again").await;
    let next = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(!matches!(next.last().unwrap().payload, EventPayload::RunInterrupted { .. }), "{:?}", kinds(&next));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_grant_given_in_a_child_covers_the_root_after_the_trees_approval_actor_stopped() {
    use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRespondParams};
    let script = json!({
        "turns": [
            {"tool_calls": [delegate("helper", "make a file")]},
            {"text": "parent done"},
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch granted.txt"}}]},
            {"text": "second done"}
        ],
        "by_input": {"make a file": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch granted.txt"}}]},
            {"text": "made it"}
        ]}}
    });
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some(config(3, 4, ALLOW_DELEGATE)),
        hibernate_after: Some(std::time::Duration::from_millis(200)),
        ..Default::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), script).await;
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, PermissionMode::Ask).await;
    client.subscribe(&root, None).await.unwrap();
    start_run(&client, &root, selection_of("default", "local/scripted"), "go").await;
    let record = first_pending_approval(&client, &root, "the child's approval").await;
    let answer = ApprovalRespondParams {
        session_id: record.session_id.clone(),
        approval_id: record.approval_id.clone(),
        request_revision: record.revision,
        operation_fingerprint: record.operation_fingerprint.clone(),
        client_response_id: "tree-grant".into(),
        decision: ApprovalDecision::ApproveTree,
        feedback: None,
    };
    within("approval.respond", client.call::<method::ApprovalRespond>(answer)).await.expect("answered");
    let events = events_until(&mut deliveries, is_terminal).await;
    assert_eq!(tool_results(&events)[0].output, "made it");
    eventually_some("the tree's approval actor to stop", WAIT, || async {
        (daemon.engine().sizes().await.expect("sizes").approval_actors == 0).then_some(())
    })
    .await;

    start_run(&client, &root, selection_of("default", "local/scripted"), "again").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(
        !events.iter().any(|event| matches!(event.payload, EventPayload::ApprovalRequested { .. })),
        "the child's tree grant was lost: {:?}",
        kinds(&events)
    );
    assert_eq!(tool_results(&events)[0].status, ToolResultStatus::Ok);
}

#[tokio::test]
async fn an_agent_whose_first_model_is_disconnected_falls_back_to_its_next_model() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("remote", "fall back")]}, {"text": "parent done"}],
        "by_input": {"fall back": {"turns": [{"text": "answered by the fallback"}]}}
    });
    let extra = "\n[agents.remote]\nmodels = [\"openai/not-connected\", \"local/scripted\"]\n";
    let mut tree = tree(config(3, 4, extra), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    let results = tool_results(&events);
    assert_eq!(
        (results[0].status, results[0].output.as_str()),
        (ToolResultStatus::Ok, "answered by the fallback"),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_tiny_hibernate_after_every_delegation_still_starts_its_child_run() {
    const TURNS: usize = 15;
    const PER_TURN: usize = 4;
    let script = delegation_waves(TURNS, PER_TURN, |_, _| "ok".to_owned());
    let (_tree, events) = run_waves(1, script).await;
    let failed: Vec<_> =
        tool_results(&events).into_iter().filter(|result| result.status != ToolResultStatus::Ok).collect();
    assert!(failed.is_empty(), "{} of {} delegations failed: {failed:?}", failed.len(), TURNS * PER_TURN);
}

#[tokio::test]
async fn stdin_for_a_running_delegate_call_is_not_accepted_since_nothing_reads_it() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "slow task")]}],
        "by_input": {"slow task": {"turns": [{"text": "never", "delay_ms": 600000}]}}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let started =
        events_until(&mut tree.deliveries, |event| matches!(event.payload, EventPayload::DelegateStarted { .. })).await;
    let Some(EventPayload::DelegateStarted { tool_call_id, .. }) = started.last().map(|event| &event.payload) else {
        unreachable!()
    };
    let params = troupe_protocol::types::run::RunToolStdinParams {
        run_id: run_id.clone(),
        tool_call_id: tool_call_id.clone(),
        data: Some("y\n".into()),
        eof: false,
    };
    let answer = within("run.tool_stdin", tree.client.call::<method::RunToolStdin>(params)).await;
    let cancelled = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
    assert!(cancelled.expect("run.cancel").cancelled);
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    let recorded = events.iter().any(|event| matches!(event.payload, EventPayload::ToolStdinSubmitted { .. }));
    match answer {
        Ok(result) => {
            assert!(!result.accepted, "stdin for a delegate call was accepted (recorded: {recorded})");
        }
        Err(error) => panic!("run.tool_stdin errored instead of answering accepted=false: {error:?}"),
    }
    assert!(!recorded, "{:?}", kinds(&events));
}

/// Timing-dependent before its fix (failed about four runs in six): the refused calls reserved their slot before
/// they awaited the runtime snapshot in which they found no agent.
#[tokio::test]
async fn a_call_to_an_unknown_agent_does_not_take_a_concurrency_slot_from_the_valid_calls_of_its_turn() {
    let script = json!({
        "turns": [
            {"tool_calls": [
                delegate("nobody", "lost"), delegate("nobody", "lost"), delegate("nobody", "lost"),
                delegate("helper", "task A"), delegate("helper", "task B")
            ]},
            {"text": "parent done"}
        ],
        "by_input": {"task A": {"turns": [{"text": "A"}]}, "task B": {"turns": [{"text": "B"}]}}
    });
    let mut tree = tree(config(3, 2, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    let results = tool_results(&events);
    assert!(results[0].output.contains("no agent `nobody`"), "{}", results[0].output);
    // Two valid calls, `max_concurrency = 2`: both must run.
    let outputs: Vec<&str> = results[3..].iter().map(|result| result.output.as_str()).collect();
    assert_eq!(outputs, ["A", "B"], "{results:?}");
}

#[tokio::test]
async fn a_childs_approval_answered_under_the_roots_session_id_is_refused_and_stays_pending() {
    use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRespondParams};
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "make a file")]}],
        "by_input": {"make a file": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch wrong-session.txt"}}]}
        ]}}
    });
    let tree = tree(config(3, 4, ALLOW_DELEGATE), script, PermissionMode::Ask).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let record = first_pending_approval(&tree.client, &tree.root, "the child's approval").await;
    let answer = ApprovalRespondParams {
        session_id: tree.root.clone(),
        approval_id: record.approval_id.clone(),
        request_revision: record.revision,
        operation_fingerprint: record.operation_fingerprint.clone(),
        client_response_id: "wrong-session".into(),
        decision: ApprovalDecision::ApproveOnce,
        feedback: None,
    };
    let answered = within("approval.respond", tree.client.call::<method::ApprovalRespond>(answer)).await;
    assert!(answered.is_err(), "an answer naming the wrong session was taken: {answered:?}");
    let still = pending_approvals(&tree.client, &tree.root).await;
    assert_eq!(still.len(), 1, "the approval is still pending");
    assert!(!tree.daemon.project_path().join("wrong-session.txt").exists());
    // A child's id is not a root: its tree's list is not served under it.
    let params =
        ApprovalListParams { root_session_id: record.session_id.clone(), status: Some(ApprovalStatus::Pending) };
    let listed = within("approval.list", tree.client.call::<method::ApprovalList>(params)).await;
    if let Ok(listed) = &listed {
        assert!(
            listed.approvals.iter().all(|approval| approval.session_id == record.session_id),
            "a child's id lists other sessions' approvals: {listed:?}"
        );
    }
    let _ = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
}
