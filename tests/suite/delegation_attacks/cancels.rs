//! Delegation attacks by cancellation: a root's cancel reaching a grandchild, a client cancelling a child's run
//! directly, and a parent cancelled while a child or one of its own delegations waits for an approval.

use serde_json::json;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionStatus;
use troupe_protocol::types::events::{DelegateStatus, EventPayload};
use troupe_protocol::types::run::{RunIdParams, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;

use super::*;

#[tokio::test]
async fn cancelling_the_root_run_cancels_the_grandchild_too() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "ask your own helper")]}],
        "by_input": {
            "ask your own helper": {"turns": [{"tool_calls": [delegate("helper", "the deepest task")]}]},
            "the deepest task": {"turns": [{"text": "never", "delay_ms": 600000}]}
        }
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let child = children_when(&tree.client, &tree.root, |listed| listed.len() == 1).await[0].session_id.clone();
    let grandchild =
        children_when(&tree.client, &child, |listed| listed.first().is_some_and(running)).await[0].session_id.clone();

    let cancelled = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
    assert!(cancelled.expect("run.cancel").cancelled);
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCancelled { .. }), "{:?}", kinds(&events));
    assert_eq!(delegate_statuses(&events), [DelegateStatus::Cancelled]);
    // The root's run ends only once its child's end is recorded, and the child's once the grandchild's is.
    assert_eq!(status(&tree.client, &child).await, SessionStatus::Cancelled);
    assert_eq!(status(&tree.client, &grandchild).await, SessionStatus::Cancelled);
}

#[tokio::test]
async fn a_client_cancelling_the_child_run_directly_gives_the_parent_a_cancelled_result_and_the_parent_goes_on() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "slow task")]}, {"text": "the parent went on"}],
        "by_input": {"slow task": {"turns": [{"text": "never", "delay_ms": 600000}]}}
    });
    let mut tree = tree(config(3, 4, ""), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let child = children_when(&tree.client, &tree.root, |listed| listed.first().is_some_and(running)).await[0]
        .session_id
        .clone();
    let child_run = first_run_id(&tree.daemon, &child).await;
    let cancelled =
        within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id: child_run })).await;
    assert!(cancelled.expect("run.cancel of the child's run").cancelled);

    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(
        matches!(&events.last().unwrap().payload, EventPayload::RunCompleted { final_text: Some(text) } if text == "the parent went on"),
        "{:?}",
        kinds(&events)
    );
    assert_eq!(delegate_statuses(&events), [DelegateStatus::Cancelled]);
    let results = tool_results(&events);
    assert_eq!(results[0].status, ToolResultStatus::Cancelled);
    assert!(results[0].output.contains("cancelled"), "{}", results[0].output);
    assert_eq!(status(&tree.client, &child).await, SessionStatus::Cancelled);
}

#[tokio::test]
async fn cancelling_the_parent_while_its_child_waits_for_an_approval_withdraws_the_approval() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "make a file")]}],
        "by_input": {"make a file": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch never-made.txt"}}]},
            {"text": "made it"}
        ]}}
    });
    let mut tree = tree(config(3, 4, ALLOW_DELEGATE), script, PermissionMode::Ask).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    first_pending_approval(&tree.client, &tree.root, "the child's approval").await;
    let cancelled = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
    assert!(cancelled.expect("run.cancel").cancelled);
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCancelled { .. }));
    assert!(pending_approvals(&tree.client, &tree.root).await.is_empty(), "no approval is left pending");
    let child = &children(&tree.client, &tree.root).await[0].session_id;
    assert_eq!(status(&tree.client, child).await, SessionStatus::Cancelled);
    assert!(!tree.daemon.project_path().join("never-made.txt").exists());
}

#[tokio::test]
async fn cancelling_a_turn_with_one_child_at_work_and_one_delegation_awaiting_approval_ends_both() {
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "slow task"), delegate("other", "needs approval")]}],
        "by_input": {
            "slow task": {"turns": [{"text": "never", "delay_ms": 600000}]},
            "needs approval": {"turns": [{"text": "should not run"}]}
        }
    });
    let extra = "\n[agents.other]\nmodels = [\"local/scripted\"]\n\n[[permissions.rules]]\neffect = \"allow\"\n\
                 action = \"execute\"\nresource = \"agent:helper\"\ntool = \"delegate\"\n";
    let mut tree = tree(config(3, 4, extra), script, PermissionMode::Ask).await;
    let run_id = start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    children_when(&tree.client, &tree.root, |listed| listed.first().is_some_and(running)).await;
    let asked = first_pending_approval(&tree.client, &tree.root, "the delegation's approval").await;
    assert_eq!((asked.session_id.as_str(), asked.operation.resource.as_str()), (tree.root.as_str(), "agent:other"));

    let cancelled = within("run.cancel", tree.client.call::<method::RunCancel>(RunIdParams { run_id })).await;
    assert!(cancelled.expect("run.cancel").cancelled);
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCancelled { .. }), "{:?}", kinds(&events));
    let statuses: Vec<ToolResultStatus> = tool_results(&events).iter().map(|result| result.status).collect();
    assert_eq!(statuses, [ToolResultStatus::Cancelled, ToolResultStatus::Cancelled]);
    assert!(pending_approvals(&tree.client, &tree.root).await.is_empty());
    let listed = children(&tree.client, &tree.root).await;
    assert_eq!(listed.len(), 1, "no child for the unapproved delegation: {listed:?}");
    assert_eq!(listed[0].status, SessionStatus::Cancelled);
}
