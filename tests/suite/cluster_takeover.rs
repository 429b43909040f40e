//! `[cluster] takeover = "at_once"`, through real `troupe serve --cluster` processes: when the node hosting a session
//! dies mid-run, a node configured so takes the session over by itself once the lease expires, with no client
//! request: a follower sees the run end `run_interrupted`, once, and the session is listed on the new node.

use serde_json::json;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::session::PermissionMode;

use super::cluster::Loopback;
use super::cluster_follow::listed_on;
use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_takes_over_at_once_interrupts_a_dead_nodes_run_without_being_asked() {
    let cluster = Loopback::start();
    let (dirs, project) = (cluster.dirs.path(), &cluster.project);
    let mut a = cluster.node("a");
    let b = cluster.configured_node("b", "takeover = \"at_once\"\n");

    let (client_a, mut deliveries_a) = a.client().await;
    let script = json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 60"}}]}]});
    connect_script(&client_a, dirs, script).await;
    let session_id = create_session_in(&client_a, project).await.session_id;
    set_mode(&client_a, &session_id, PermissionMode::Yolo).await;
    within("subscribe on a", client_a.subscribe(&session_id, None)).await.expect("subscribe on a");
    let running = start_run(&client_a, &session_id, selection_of("default", "local/scripted"), "sleep").await;
    events_until(&mut deliveries_a, |event| {
        event.run_id.as_deref() == Some(&running) && matches!(event.payload, EventPayload::ToolCallStarted { .. })
    })
    .await;

    // A follower on b, and no request for the session from anyone after a dies.
    let (follower, mut followed) = b.client().await;
    listed_on(&follower, &session_id, "a").await;
    within("subscribe on b", follower.subscribe(&session_id, None)).await.expect("subscribe on b");
    a.kill();
    let seen = events_until(&mut followed, |event| {
        event.run_id.as_deref() == Some(&running) && matches!(event.payload, EventPayload::RunInterrupted { .. })
    })
    .await;
    let interrupted: Vec<&StoredEvent> =
        seen.iter().filter(|event| matches!(event.payload, EventPayload::RunInterrupted { .. })).collect();
    assert_eq!(interrupted.len(), 1, "interrupted once");
    listed_on(&follower, &session_id, "b").await;
}
