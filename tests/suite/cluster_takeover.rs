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
    // The default lease (10 s) outlives a dead node's heartbeat (about 6.5 s): b knows a is dead a few seconds
    // before a's leases can be taken.
    let lease = "lease_ttl_secs = 10\n";
    let mut a = cluster.configured_node("a", lease);
    // b's log says each time it opens a session it cannot take (its lease still held by the dead node).
    let b = super::cluster::serve_configured_node(
        &cluster.nats.url(),
        "b",
        &dirs.join("b"),
        &format!("takeover = \"at_once\"\n{lease}"),
    )
    .rust_log("warn,troupe_actors::session_supervisor::takeover=debug")
    .log(DaemonLog::Lines)
    .spawn();

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
    // While a's lease ran out, b read it rather than open the session once a second to be refused.
    // The line is logged once the session answers after its load; the test reads the log through a thread.
    let took_over = |log: &[String]| log.iter().filter(|line| line.contains("took over a dead node's session")).count();
    eventually("b's log says it took the session over", || took_over(&b.log_lines()) > 0).await;
    let log = b.log_lines();
    assert_eq!(took_over(&log), 1, "{log:#?}");
    assert!(!log.iter().any(|line| line.contains("not taken over")), "opened while a's lease was held: {log:#?}");
}
