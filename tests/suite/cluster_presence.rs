//! Presence across a cluster, through real `troupe serve --cluster … --node …` processes on a real nats-server:
//! `session.presence` on any node lists every connection that follows the session, on whichever node it is
//! attached (this node's first, then each other node's), with ids that name their node; a watcher hears of a
//! subscriber coming or going on another node; and when a node dies, its connections leave every list.

use serde_json::{Value, json};
use troupe_test_support::ChildDaemon;

use super::cluster::Loopback;
use super::cluster_follow::listed_on;
use super::support::*;

/// A raw socket to `node`, handshaken as `name`.
async fn connect(node: &ChildDaemon, name: &str) -> RawSocket {
    let mut socket = RawSocket::connect(&node.url, &node.token).await;
    let reply = socket.call(0, "handshake", json!({"protocol_version": 20, "client_info": {"name": name}})).await;
    assert_eq!(reply["result"]["protocol_version"], 20, "{reply}");
    socket
}

async fn subscribe(socket: &mut RawSocket, session_id: &str) {
    let reply = socket.call(1, "events.subscribe", json!({"session_id": session_id})).await;
    assert!(reply["result"]["last_seq"].is_u64(), "{reply}");
}

/// The names and connection ids of a presence list, in its order.
fn listed(clients: &Value) -> Vec<(String, String)> {
    clients
        .as_array()
        .expect("clients")
        .iter()
        .map(|client| {
            (
                client["name"].as_str().unwrap_or("").to_owned(),
                client["connection_id"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn names(list: &[(String, String)]) -> Vec<&str> {
    list.iter().map(|(name, _)| name.as_str()).collect()
}

/// Calls `session.presence` (which starts or renews the watch) until its list names exactly `expected`, in order
/// (another node's subscribers arrive a moment after they subscribed); returns the last result.
async fn presence_until(socket: &mut RawSocket, session_id: &str, expected: &[&str]) -> Value {
    let mut id = 100;
    let mut last = Value::Null;
    let found = tokio::time::timeout(WAIT, async {
        loop {
            id += 1;
            let reply = socket.call(id, "session.presence", json!({"session_id": session_id})).await;
            last = reply["result"].clone();
            if names(&listed(&last["clients"])) == expected {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "session.presence never listed {expected:?}; last: {last}");
    last
}

/// `session.presence_changed` notifications until one lists exactly `expected`.
async fn change_until(socket: &mut RawSocket, expected: &[&str]) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(WAIT, async {
        loop {
            let frame = socket.recv().await;
            if frame["method"] == "session.presence_changed" {
                let list = listed(&frame["params"]["clients"]);
                if names(&list) == expected {
                    return list;
                }
                seen.push(list);
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no presence change listed {expected:?}; changes seen: {seen:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_lists_every_nodes_subscribers_and_forgets_a_dead_nodes() {
    let cluster = Loopback::start();
    let project = &cluster.project;
    let mut a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, _) = a.client().await;
    let session_id = create_session_in(&client_a, project).await.session_id;
    let (client_b, _) = b.client().await;
    listed_on(&client_b, &session_id, "a").await;

    let mut alpha = connect(&a, "alpha").await;
    subscribe(&mut alpha, &session_id).await;
    let mut watcher_b = connect(&b, "watcher on b").await;
    let first = presence_until(&mut watcher_b, &session_id, &["alpha"]).await;
    let [(_, alpha_id)] = listed(&first["clients"]).try_into().expect("one client");
    assert!(alpha_id.ends_with("@a"), "a connection of node a says so: {alpha_id}");
    assert!(first["you"].as_str().expect("you").ends_with("@b"), "{first}");

    // A subscriber on b (following a's session from JetStream): b's own connections come first.
    let mut beta = connect(&b, "beta").await;
    subscribe(&mut beta, &session_id).await;
    change_until(&mut watcher_b, &["beta", "alpha"]).await;
    let mut watcher_a = connect(&a, "watcher on a").await;
    let on_a = presence_until(&mut watcher_a, &session_id, &["alpha", "beta"]).await;
    assert!(listed(&on_a["clients"])[1].1.ends_with("@b"), "{on_a}");

    // alpha leaves: both watchers hear it.
    drop(alpha);
    change_until(&mut watcher_b, &["beta"]).await;
    change_until(&mut watcher_a, &["beta"]).await;

    // gamma follows on a, then a dies: its connections leave b's list once its heartbeat is stale.
    let mut gamma = connect(&a, "gamma").await;
    subscribe(&mut gamma, &session_id).await;
    change_until(&mut watcher_b, &["beta", "gamma"]).await;
    a.kill();
    change_until(&mut watcher_b, &["beta"]).await;
}
