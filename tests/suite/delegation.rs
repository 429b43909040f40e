//! Delegation over the real wire: a `delegate` call runs its task in a child session (reachable by `session.get`,
//! `session.resume`, `events.subscribe`, `session.children` and `session.tree`, not listed by `session.list`) and
//! returns the child's final text; the child's approvals are answered through the root; cancelling the parent run
//! cancels the children; the calls of one turn run concurrently; the depth and concurrency limits and bad
//! arguments are tool errors.

use serde_json::{Value, json};
use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalListParams, ApprovalRespondParams, ApprovalStatus};
use troupe_protocol::types::common::{SessionIdParams, SessionMeta, SessionOrigin, SessionStatus};
use troupe_protocol::types::events::{DelegateStatus, EventPayload, StoredEvent};
use troupe_protocol::types::run::{RunIdParams, ToolResultStatus};
use troupe_protocol::types::session::{PermissionMode, SessionChildSummary, SessionListParams};

use super::support::*;

/// A `helper` agent on the scripted model, and the limits given.
pub(super) fn config(max_depth: u32, max_concurrency: u32, extra: &str) -> String {
    format!(
        "[agents.helper]\nmodels = [\"local/scripted\"]\n\n[delegation]\nmax_depth = {max_depth}\n\
         max_concurrency = {max_concurrency}\n{extra}"
    )
}

pub(super) fn delegate(agent: &str, task: &str) -> Value {
    json!({"tool": "delegate", "arguments": {"agent": agent, "task": task}})
}

pub(super) struct Tree {
    pub(super) daemon: TestDaemon,
    pub(super) client: Client,
    pub(super) deliveries: troupe_protocol::client::Deliveries,
    pub(super) root: String,
}

/// A daemon with `config_toml`, the script connected, and a subscribed root session in `mode`.
pub(super) async fn tree(config_toml: String, script: Value, mode: PermissionMode) -> Tree {
    tree_with(DaemonSetup { config_toml: Some(config_toml), ..Default::default() }, script, mode).await
}

/// [`tree`] on a daemon started with `setup`.
pub(super) async fn tree_with(setup: DaemonSetup, script: Value, mode: PermissionMode) -> Tree {
    let daemon = TestDaemon::start_with(setup);
    let (client, deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), script).await;
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, mode).await;
    client.subscribe(&root, None).await.expect("subscribe to the root");
    Tree { daemon, client, deliveries, root }
}

pub(super) async fn children(client: &Client, session_id: &str) -> Vec<SessionChildSummary> {
    let params = SessionIdParams { session_id: session_id.to_owned() };
    within("session.children", client.call::<method::SessionChildren>(params)).await.expect("children").children
}

pub(super) async fn get(client: &Client, session_id: &str) -> SessionMeta {
    let params = SessionIdParams { session_id: session_id.to_owned() };
    within("session.get", client.call::<method::SessionGet>(params)).await.expect("session.get").session
}

/// Polls `session.children` until `condition` holds for the list.
pub(super) async fn children_when(
    client: &Client,
    session_id: &str,
    condition: impl Fn(&[SessionChildSummary]) -> bool,
) -> Vec<SessionChildSummary> {
    eventually_some("the children to match", WAIT, || async {
        let listed = children(client, session_id).await;
        condition(&listed).then_some(listed)
    })
    .await
}

/// A daemon binary on `data_dir` whose subscribed root session (in `project`, mode yolo) runs a turn that delegates
/// a task the child never finishes, then would say `then`; returned once the child's run is running.
pub(super) struct MidDelegation {
    pub(super) daemon: ChildDaemon,
    pub(super) client: Client,
    pub(super) deliveries: troupe_protocol::client::Deliveries,
    pub(super) root: String,
    pub(super) child: String,
}

pub(super) async fn mid_delegation(data_dir: &std::path::Path, project: &std::path::Path, then: &str) -> MidDelegation {
    std::fs::write(data_dir.join("config.toml"), config(3, 4, "")).unwrap();
    let daemon = spawn_daemon(data_dir, "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "take your time")]}, {"text": then}],
        "by_input": {"take your time": {"turns": [{"text": "never", "delay_ms": 600000}]}}
    });
    connect_script(&client, data_dir, script).await;
    let root = create_session_in(&client, project).await.session_id;
    set_mode(&client, &root, PermissionMode::Yolo).await;
    client.subscribe(&root, None).await.unwrap();
    start_run(&client, &root, selection_of("default", "local/scripted"), "go").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::DelegateStarted { .. })).await;
    let child = children_when(&client, &root, |listed| {
        listed.first().is_some_and(|child| child.status == SessionStatus::Running)
    })
    .await[0]
        .session_id
        .clone();
    MidDelegation { daemon, client, deliveries, root, child }
}

fn delegate_events(events: &[StoredEvent]) -> Vec<&EventPayload> {
    events
        .iter()
        .map(|event| &event.payload)
        .filter(|payload| {
            matches!(payload, EventPayload::DelegateStarted { .. } | EventPayload::DelegateFinished { .. })
        })
        .collect()
}

#[tokio::test]
async fn a_delegated_task_runs_in_a_reachable_child_session_and_its_final_text_is_the_tool_result() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "count the files")]}, {"text": "the parent is done"}],
        // The child runs a command without asking: the root's `yolo` applies to the whole tree.
        "by_input": {"count the files": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch counted.txt"}}]},
            {"text": "there are three files"}
        ]}}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    let results = tool_results(&events);
    assert_eq!(results.len(), 1);
    assert_eq!((results[0].status, results[0].output.as_str()), (ToolResultStatus::Ok, "there are three files"));

    let delegated = delegate_events(&events);
    let [EventPayload::DelegateStarted { child_session_id, agent, task, .. }, finished] = delegated[..] else {
        panic!("a delegate_started and a delegate_finished: {delegated:?}");
    };
    assert_eq!((agent.as_str(), task.as_str()), ("helper", "count the files"));
    let EventPayload::DelegateFinished { child_session_id: finished_child, status, summary, .. } = finished else {
        panic!("{finished:?}");
    };
    assert_eq!(
        (finished_child, *status, summary.as_str()),
        (child_session_id, DelegateStatus::Completed, "there are three files")
    );

    // The child: in the tree and among the children, not in the list of sessions.
    let listed = children(&tree.client, &tree.root).await;
    assert_eq!(listed.len(), 1);
    assert_eq!((&listed[0].session_id, listed[0].agent.as_str()), (child_session_id, "helper"));
    let params = SessionIdParams { session_id: tree.root.clone() };
    let root_tree = within("session.tree", tree.client.call::<method::SessionTree>(params)).await.unwrap().tree;
    assert_eq!(root_tree.children.len(), 1);
    assert_eq!(&root_tree.children[0].session.session_id, child_session_id);
    let roots = within("session.list", tree.client.call::<method::SessionList>(SessionListParams::default()))
        .await
        .unwrap()
        .sessions;
    assert!(roots.iter().any(|meta| meta.session_id == tree.root));
    assert!(roots.iter().all(|meta| &meta.session_id != child_session_id), "children are not listed");

    // Its metadata: delegated from the root's run and call, in the root's cwd, on the agent's first model.
    let child = get(&tree.client, child_session_id).await;
    let parent_run = events.iter().find_map(|event| event.run_id.clone()).expect("a run event");
    let call_id =
        match &events.iter().find(|e| matches!(e.payload, EventPayload::DelegateStarted { .. })).unwrap().payload {
            EventPayload::DelegateStarted { tool_call_id, .. } => tool_call_id.clone(),
            _ => unreachable!(),
        };
    assert_eq!(
        child.origin,
        SessionOrigin::Delegated {
            root_session_id: tree.root.clone(),
            parent_session_id: tree.root.clone(),
            parent_run_id: parent_run,
            parent_tool_call_id: call_id,
            depth: 1
        }
    );
    let engine_written = |event: &&StoredEvent| event.origin.as_deref() == Some("engine:delegate");
    assert_eq!(events.iter().filter(engine_written).count(), 2, "delegate_started and delegate_finished");
    assert_eq!(child.cwd, get(&tree.client, &tree.root).await.cwd);
    assert_eq!(child.creation_selection, selection_of("helper", "local/scripted"));
    assert_eq!(child.status, SessionStatus::Completed);
    let resumed = within(
        "session.resume",
        tree.client.call::<method::SessionResume>(SessionIdParams { session_id: child_session_id.clone() }),
    )
    .await
    .expect("session.resume of a child");
    assert_eq!(&resumed.session.session_id, child_session_id);

    // Its own events: the task as the run's input, started by the engine, and the answer.
    let (child_client, mut child_deliveries) = tree.daemon.client().await;
    child_client.subscribe(child_session_id, None).await.expect("subscribe to the child");
    let child_events = events_until(&mut child_deliveries, is_terminal).await;
    let started = child_events.iter().find(|e| matches!(e.payload, EventPayload::RunStarted { .. })).unwrap();
    assert_eq!(started.origin.as_deref(), Some("engine:delegate"));
    assert!(matches!(&started.payload, EventPayload::RunStarted { input, .. } if input == "count the files"));
    assert!(matches!(
        &child_events.last().unwrap().payload,
        EventPayload::RunCompleted { final_text: Some(text) } if text == "there are three files"
    ));
    assert_eq!(tool_results(&child_events)[0].status, ToolResultStatus::Ok);
    assert!(tree.daemon.project_path().join("counted.txt").exists(), "the child works in the parent's cwd");
}

#[tokio::test]
async fn an_approval_asked_in_a_child_is_listed_and_answered_through_the_root() {
    let script = json!({
        "turns": [
            {"tool_calls": [delegate("helper", "make a file")]},
            {"text": "parent done"},
            // The root's second run.
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch second.txt"}}]},
            {"text": "second done"}
        ],
        "by_input": {"make a file": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch made-by-child.txt"}}]},
            {"text": "made it"}
        ]}}
    });
    // `ask` for the tree; delegating to any agent is allowed by a rule, so only the child's command asks.
    let rule = "\n[[permissions.rules]]\neffect = \"allow\"\naction = \"execute\"\nresource = \"agent:*\"\ntool = \"delegate\"\n";
    let mut tree = tree(config(3, 4, rule), script, PermissionMode::Ask).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let listed = eventually_some("the child's approval in the root's list", WAIT, || async {
        let params = ApprovalListParams { root_session_id: tree.root.clone(), status: Some(ApprovalStatus::Pending) };
        let approvals = tree.client.call::<method::ApprovalList>(params).await.expect("approval.list").approvals;
        (!approvals.is_empty()).then_some(approvals)
    })
    .await;
    assert_eq!(listed.len(), 1);
    let record = &listed[0];
    let child = children(&tree.client, &tree.root).await;
    assert_eq!(record.session_id, child[0].session_id, "the approval belongs to the child");
    assert_eq!(record.operation.resource, "touch made-by-child.txt");
    let answer = ApprovalRespondParams {
        session_id: record.session_id.clone(),
        approval_id: record.approval_id.clone(),
        request_revision: record.revision,
        operation_fingerprint: record.operation_fingerprint.clone(),
        client_response_id: "answer-1".into(),
        decision: ApprovalDecision::ApproveOnce,
        feedback: None,
    };
    within("approval.respond", tree.client.call::<method::ApprovalRespond>(answer)).await.expect("answered");
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert_eq!(tool_results(&events)[0].output, "made it");
    assert!(tree.daemon.project_path().join("made-by-child.txt").exists());

    // The mode set through the child is the tree's: the root's next run runs its command without asking.
    set_mode(&tree.client, &record.session_id, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "again").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(!events.iter().any(|event| matches!(event.payload, EventPayload::ApprovalRequested { .. })));
    assert_eq!(tool_results(&events)[0].status, ToolResultStatus::Ok);
    assert!(tree.daemon.project_path().join("second.txt").exists());
}

#[tokio::test]
async fn two_delegations_of_one_turn_run_concurrently_and_cancelling_the_parent_cancels_both() {
    // Each child waits a long time for its model: they are both running at once only if started concurrently.
    let slow = json!({"turns": [{"text": "never", "delay_ms": 600000}]});
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "task A"), delegate("helper", "task B")]}],
        "by_input": {"task A": slow, "task B": slow}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let both = children_when(&tree.client, &tree.root, |listed| {
        listed.len() == 2 && listed.iter().all(|child| child.status == SessionStatus::Running)
    })
    .await;

    let cancelled = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
    assert!(cancelled.expect("run.cancel").cancelled);
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCancelled { .. }));
    let finished: Vec<DelegateStatus> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::DelegateFinished { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [DelegateStatus::Cancelled, DelegateStatus::Cancelled]);
    let statuses: Vec<ToolResultStatus> = tool_results(&events).iter().map(|result| result.status).collect();
    assert_eq!(statuses, [ToolResultStatus::Cancelled, ToolResultStatus::Cancelled]);
    for child in both {
        assert_eq!(get(&tree.client, &child.session_id).await.status, SessionStatus::Cancelled);
    }
}

#[tokio::test]
async fn limits_unknown_agents_and_empty_or_oversized_tasks_are_tool_errors_and_the_run_goes_on() {
    let script = json!({
        "turns": [
            {"tool_calls": [delegate("helper", "task A"), delegate("helper", "task B")]},
            {"tool_calls": [delegate("nobody", "task C"), delegate("helper", "  ")]},
            {"tool_calls": [delegate("helper", &"x".repeat(2048))]},
            {"text": "the parent carries on"}
        ],
        // The child is at depth 1 = max_depth: its own delegation is refused.
        "by_input": {"task A": {"turns": [{"tool_calls": [delegate("helper", "task D")]}, {"text": "A done"}]}}
    });
    let mut tree = tree(config(1, 1, "\n[limits]\nmax_input_bytes = 1024\n"), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(
        &events.last().unwrap().payload,
        EventPayload::RunCompleted { final_text: Some(text) } if text == "the parent carries on"
    ));
    let results = tool_results(&events);
    let statuses: Vec<ToolResultStatus> = results.iter().map(|result| result.status).collect();
    assert_eq!(
        statuses,
        [
            ToolResultStatus::Ok,
            ToolResultStatus::Error,
            ToolResultStatus::Error,
            ToolResultStatus::Error,
            ToolResultStatus::Error
        ]
    );
    assert_eq!(results[0].output, "A done");
    assert!(results[1].output.contains("max_concurrency"), "{}", results[1].output);
    assert!(results[2].output.contains("no agent `nobody`"), "{}", results[2].output);
    assert!(results[3].output.contains("the task is empty"), "{}", results[3].output);
    assert!(results[4].output.contains("max_input_bytes"), "{}", results[4].output);
    assert_eq!(children(&tree.client, &tree.root).await.len(), 1, "only the accepted call made a child");

    let child = &children(&tree.client, &tree.root).await[0].session_id;
    let (child_client, mut child_deliveries) = tree.daemon.client().await;
    child_client.subscribe(child, None).await.expect("subscribe to the child");
    let child_results = tool_results(&events_until(&mut child_deliveries, is_terminal).await);
    assert_eq!(child_results.len(), 1);
    assert_eq!(child_results[0].status, ToolResultStatus::Error);
    assert!(child_results[0].output.contains("max_depth"), "{}", child_results[0].output);
    assert!(children(&tree.client, child).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_delegation_interrupts_the_child_and_the_parent_records_its_delegate_as_interrupted() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let MidDelegation { mut daemon, client: _client, deliveries: _deliveries, root, child } =
        mid_delegation(data_dir.path(), project.path(), "parent done").await;
    daemon.kill();

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(&root, None).await.unwrap();
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunInterrupted { .. })).await;
    let finished: Vec<(&str, DelegateStatus)> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::DelegateFinished { child_session_id, status, .. } => {
                Some((child_session_id.as_str(), *status))
            }
            _ => None,
        })
        .collect();
    assert_eq!(finished, [(child.as_str(), DelegateStatus::Interrupted)], "{:?}", kinds(&events));

    let (child_client, mut child_deliveries) = daemon.client().await;
    child_client.subscribe(&child, None).await.unwrap();
    events_until(&mut child_deliveries, |event| matches!(event.payload, EventPayload::RunInterrupted { .. })).await;
    assert_eq!(get(&client, &child).await.status, SessionStatus::Interrupted);
}

#[tokio::test]
async fn a_child_whose_run_fails_gives_a_failed_delegation_and_an_error_result() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "fail please")]}, {"text": "the parent saw the failure"}],
        "by_input": {"fail please": {"turns": [{"error": {"kind": "auth", "message": "the key was revoked"}}]}}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "the parent goes on");
    let results = tool_results(&events);
    assert_eq!(results[0].status, ToolResultStatus::Error);
    assert!(results[0].output.contains("the key was revoked"), "{}", results[0].output);
    let finished = events.iter().find_map(|event| match &event.payload {
        EventPayload::DelegateFinished { status, .. } => Some(*status),
        _ => None,
    });
    assert_eq!(finished, Some(DelegateStatus::Failed));
    let child = &children(&tree.client, &tree.root).await[0];
    assert_eq!(child.status, SessionStatus::Failed);
}

#[tokio::test]
async fn a_child_delegates_in_turn_and_the_tree_nests_with_one_root() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "ask your own helper")]}, {"text": "root done"}],
        "by_input": {
            "ask your own helper": {"turns": [{"tool_calls": [delegate("helper", "the deepest task")]}, {"text": "child done"}]},
            "the deepest task": {"turns": [{"text": "grandchild done"}]}
        }
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert_eq!(tool_results(&events)[0].output, "child done");

    let params = SessionIdParams { session_id: tree.root.clone() };
    let root_tree = within("session.tree", tree.client.call::<method::SessionTree>(params)).await.unwrap().tree;
    let [child] = &root_tree.children[..] else { panic!("one child: {root_tree:?}") };
    let [grandchild] = &child.children[..] else { panic!("one grandchild: {child:?}") };
    assert!(grandchild.children.is_empty());
    let SessionOrigin::Delegated { root_session_id, parent_session_id, depth, .. } = &grandchild.session.origin else {
        panic!("{:?}", grandchild.session.origin);
    };
    assert_eq!((root_session_id, parent_session_id, *depth), (&tree.root, &child.session.session_id, 2));
    let child_results = {
        let (client, mut deliveries) = tree.daemon.client().await;
        client.subscribe(&child.session.session_id, None).await.unwrap();
        tool_results(&events_until(&mut deliveries, is_terminal).await)
    };
    assert_eq!(child_results[0].output, "grandchild done");
}

#[tokio::test]
async fn the_tool_is_offered_with_the_agents_above_the_depth_limit_only() {
    use troupe_test_support::{FakeResponse, FakeServer};
    let sse =
        |chunk: Value| FakeResponse::Sse { pieces: vec![format!("data: {chunk}\n\n"), "data: [DONE]\n\n".into()] };
    let text =
        |content: &str| sse(json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": "stop"}]}));
    let arguments = json!({"agent": "helper", "task": "answer briefly"}).to_string();
    let call = sse(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
        "type": "function", "function": {"name": "delegate", "arguments": arguments}}]}, "finish_reason": "tool_calls"}]}));
    let models = FakeResponse::status(200, &[], json!({"data": [{"id": "m"}]}).to_string());
    let vendor = FakeServer::start(vec![models, call, text("the child's answer"), text("all done")]).await;
    let config = "[agents.helper]\ndescription = \"answers questions\"\nmodels = [\"openai/m\"]\n\n\
                  [delegation]\nmax_depth = 1\n";
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config.into()), ..Default::default() });
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, PermissionMode::Yolo).await;
    client.subscribe(&root, None).await.unwrap();
    start_run(&client, &root, selection_of("default", "openai/m"), "go").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert_eq!(tool_results(&events)[0].output, "the child's answer");

    let requests = vendor.requests();
    let tools =
        |index: usize| -> Vec<Value> { requests[index].json()["tools"].as_array().cloned().unwrap_or_default() };
    let named = |tools: &[Value], name: &str| tools.iter().find(|tool| tool["function"]["name"] == name).cloned();
    let offered = named(&tools(1), "delegate").expect("the root's run is offered delegate");
    let description = offered["function"]["description"].as_str().unwrap();
    assert!(description.contains("`helper` (answers questions)"), "{description}");
    assert_eq!(requests[2].json()["messages"].as_array().unwrap().last().unwrap()["content"], "answer briefly");
    assert!(named(&tools(2), "delegate").is_none(), "the child, at max_depth, is not offered delegate");
    assert!(named(&tools(2), "shell").is_some());
}

/// The built-in `default` agent names no model of its own (its `local/echo` is the offline fallback): a child
/// delegated to it runs on its parent's model, not on an echo of its task. An agent of `config.toml` runs on its
/// own first model.
#[tokio::test]
async fn a_child_runs_on_its_parents_model_unless_its_agent_names_its_own() {
    let script = json!({
        "turns": [
            {"tool_calls": [delegate("default", "which model are you"), delegate("helper", "echo me")]},
            {"text": "the parent is done"}
        ],
        "by_input": {"which model are you": {"turns": [{"text": "the scripted model"}]}}
    });
    let helper_on_echo = "[agents.helper]\nmodels = [\"local/echo\"]\n";
    let mut tree = tree(helper_on_echo.to_owned(), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    let outputs: Vec<(ToolResultStatus, String)> =
        tool_results(&events).into_iter().map(|result| (result.status, result.output)).collect();
    assert_eq!(
        outputs,
        [(ToolResultStatus::Ok, "the scripted model".to_owned()), (ToolResultStatus::Ok, "echo me".to_owned())]
    );
    let mut selections = Vec::new();
    for child in children(&tree.client, &tree.root).await {
        selections.push(get(&tree.client, &child.session_id).await.creation_selection);
    }
    selections.sort_by(|a, b| a.agent.cmp(&b.agent));
    assert_eq!(selections, [selection_of("default", "local/scripted"), selection_of("helper", "local/echo")]);
}
