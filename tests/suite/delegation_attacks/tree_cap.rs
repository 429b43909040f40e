//! `[delegation] max_sessions_per_tree`: a tree's runs together create at most that many sessions besides the
//! root, at every depth; the call beyond it is a tool error the model reads, and the run goes on.

use serde_json::json;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;

use super::super::delegation::{children, config, delegate, tree};
use super::super::support::*;

#[tokio::test]
async fn a_tree_stops_growing_at_max_sessions_per_tree_counting_grandchildren() {
    // Turn one: three children, the first of which makes two grandchildren (five sessions besides the root).
    // Turn two: two more calls, both beyond the cap of five.
    let script = json!({
        "turns": [
            {"tool_calls": [delegate("helper", "task a"), delegate("helper", "task b"), delegate("helper", "task c")]},
            {"tool_calls": [delegate("helper", "task d"), delegate("helper", "task e")]},
            {"text": "parent done"}
        ],
        "by_input": {
            "task a": {"turns": [
                {"tool_calls": [delegate("helper", "grand 1"), delegate("helper", "grand 2")]},
                {"text": "a done"}
            ]},
            "task b": {"turns": [{"text": "b done"}]},
            "task c": {"turns": [{"text": "c done"}]},
            "task d": {"turns": [{"text": "d done"}]},
            "task e": {"turns": [{"text": "e done"}]},
            "grand 1": {"turns": [{"text": "g1 done"}]},
            "grand 2": {"turns": [{"text": "g2 done"}]}
        }
    });
    let mut tree = tree(config(3, 4, "max_sessions_per_tree = 5\n"), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    assert!(
        matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }),
        "the run goes on after the refusals: {:?}",
        events.last()
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 5, "{results:?}");
    let statuses: Vec<ToolResultStatus> = results.iter().map(|result| result.status).collect();
    assert_eq!(statuses[..3], [ToolResultStatus::Ok; 3], "{results:?}");
    for refused in &results[3..] {
        assert_eq!(refused.status, ToolResultStatus::Error, "{results:?}");
        assert!(
            refused.output.contains("max_sessions_per_tree") && refused.output.contains("5 sessions"),
            "the model is told which bound it met: {}",
            refused.output
        );
    }
    let listed = children(&tree.client, &tree.root).await;
    assert_eq!(listed.len(), 3, "no child was created past the cap: {listed:?}");
    let mut grandchildren = 0;
    for child in &listed {
        grandchildren += children(&tree.client, &child.session_id).await.len();
    }
    assert_eq!(grandchildren, 2, "the first child's two delegations count toward the tree's five");
}

/// Delegations started together, more than the cap: exactly the cap's number of children are made, and each
/// refusal counts the sessions as they are (a child being indexed while its creation ends is counted once).
#[tokio::test]
async fn a_burst_of_delegations_past_the_cap_makes_exactly_the_cap_and_counts_right() {
    let tasks: Vec<String> = (0..8).map(|index| format!("burst {index}")).collect();
    let mut by_input = serde_json::Map::new();
    for task in &tasks {
        by_input.insert(task.clone(), json!({"turns": [{"text": format!("{task} done")}]}));
    }
    let calls: Vec<_> = tasks.iter().map(|task| delegate("helper", task)).collect();
    let script = json!({"turns": [{"tool_calls": calls}, {"text": "parent done"}], "by_input": by_input});
    let mut tree = tree(config(3, 8, "max_sessions_per_tree = 5\n"), script, PermissionMode::Yolo).await;
    start_run(&tree.client, &tree.root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut tree.deliveries, is_terminal).await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 8, "{results:?}");
    let made = results.iter().filter(|result| result.status == ToolResultStatus::Ok).count();
    assert_eq!(made, 5, "{results:?}");
    for refused in results.iter().filter(|result| result.status != ToolResultStatus::Ok) {
        assert!(refused.output.contains("already has 5 sessions"), "{}", refused.output);
    }
    assert_eq!(children(&tree.client, &tree.root).await.len(), 5);
}
