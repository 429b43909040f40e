//! Node liveness against a real nats-server: registered nodes are live while they heartbeat, a deregistered one is
//! gone at once, and one whose heartbeats stopped goes stale after three of its intervals.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::time::Duration;

use troupe_cluster::nodes::{self, NodeInfo};
use troupe_cluster::{Cluster, ClusterSettings, names};
use troupe_test_support::NatsServer;
use troupe_test_support::wait::{eventually_some, within};

fn node(url: &str, name: &str) -> Cluster {
    Cluster::connect(ClusterSettings::plain(url, name)).expect("connect to nats-server")
}

fn names_of(nodes: &[NodeInfo]) -> Vec<&str> {
    nodes.iter().map(|info| info.node.as_str()).collect()
}

#[test]
fn nodes_are_live_while_they_heartbeat() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    a.block_on(async {
        let interval = Duration::from_millis(200);
        let _a = within("a registers", nodes::register_every(&a, "1.2.3", interval)).await.expect("register");
        let registered_b = within("b registers", nodes::register_every(&b, "1.2.3", interval)).await.expect("register");
        let live = within("the live nodes", nodes::live_nodes(&b)).await.expect("live nodes");
        assert_eq!(names_of(&live), vec!["a", "b"]);
        assert_eq!((live[0].version.as_str(), live[0].interval_ms), ("1.2.3", 200));

        // Many intervals later, the heartbeats have kept both live.
        tokio::time::sleep(interval * 8).await;
        assert!(within("is a live", nodes::is_live(&b, "a")).await.expect("is_live"));
        let live = within("the live nodes", nodes::live_nodes(&a)).await.expect("live nodes");
        assert_eq!(names_of(&live), vec!["a", "b"]);
        assert!(live[0].heartbeat_unix_ms > live[0].started_unix_ms, "a's record was renewed");

        within("b deregisters", registered_b.deregister()).await.expect("deregister");
        assert!(!within("is b live", nodes::is_live(&a, "b")).await.expect("is_live"));
        assert!(!within("is c live", nodes::is_live(&a, "c")).await.expect("is_live"));
        assert_eq!(names_of(&within("the live nodes", nodes::live_nodes(&a)).await.expect("live nodes")), vec!["a"]);
    });
}

#[test]
fn a_node_whose_heartbeats_stopped_goes_stale() {
    let server = NatsServer::start();
    let a = node(&server.url(), "a");
    a.block_on(async {
        // Node c's last heartbeat, as a node that died right after it would have left it.
        let store = within("the node bucket", a.jetstream().get_key_value(names::NODE_BUCKET)).await.expect("bucket");
        let record = serde_json::json!({
            "node": "c", "started_unix_ms": 1, "heartbeat_unix_ms": 2, "version": "1.2.3", "interval_ms": 100
        });
        within("c's record", store.put("c", record.to_string().into())).await.expect("put");
        assert!(within("is c live", nodes::is_live(&a, "c")).await.expect("is_live"));
        // Three intervals plus the clock margin: well under two seconds.
        eventually_some("c to go stale", Duration::from_secs(2), async || {
            (!nodes::is_live(&a, "c").await.expect("is_live")).then_some(())
        })
        .await;
        assert!(within("the live nodes", nodes::live_nodes(&a)).await.expect("live nodes").is_empty());
    });
}

/// nats-server 2.9 can count a key rewritten while a `LastPerSubject` reader starts as still pending after its
/// newest value was delivered: a scan that waited for the count to reach zero never ended while another node kept
/// heartbeating (each heartbeat reset its per-message timeout), and every node's liveness stopped being judged.
#[test]
fn the_live_nodes_are_read_to_the_end_while_the_nodes_heartbeat_fast() {
    let server = NatsServer::start();
    let (a, b, c) = (node(&server.url(), "a"), node(&server.url(), "b"), node(&server.url(), "c"));
    a.block_on(async {
        let interval = Duration::from_millis(2);
        let _a = within("a registers", nodes::register_every(&a, "1.2.3", interval)).await.expect("register");
        let _b = within("b registers", nodes::register_every(&b, "1.2.3", interval)).await.expect("register");
        for round in 0..200 {
            let live = tokio::time::timeout(Duration::from_secs(8), nodes::live_nodes(&c))
                .await
                .unwrap_or_else(|_| panic!("reading the live nodes did not end (round {round})"))
                .expect("live nodes");
            assert_eq!(names_of(&live), vec!["a", "b"], "round {round}");
        }
    });
}
