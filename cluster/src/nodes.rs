//! Node liveness: each node registers itself in [`names::NODE_BUCKET`] under its name and renews the record by
//! heartbeat from a task on the cluster's runtime; a node is live while its last heartbeat, as the server
//! timestamped it, is less than [`LIVE_FOR`] heartbeat intervals old (plus the clock margin the leases use: see
//! [`crate::lease`] on clocks). Presence and routing ask it which nodes can answer.

use std::time::Duration;

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::kv::{Record, age, bounded, bucket, duration_ms, entry, now_unix_ms, scan};
use crate::lease::CLOCK_MARGIN;
use crate::names;

/// How often a node renews its record.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// How many heartbeat intervals a node's record stays live without one.
pub const LIVE_FOR: u32 = 3;

/// A node's record, as stored (JSON) and as read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node: String,
    pub started_unix_ms: u64,
    /// The node's own wall clock at its last heartbeat (liveness is judged by the server's timestamp).
    pub heartbeat_unix_ms: u64,
    /// The troupe version the node runs.
    pub version: String,
    /// The node's heartbeat interval, by which readers judge it.
    pub interval_ms: u64,
}

impl NodeInfo {
    /// Whether `record` (this node's record as read) is recent enough for the node to count as live.
    fn live_in(&self, record: &Record) -> bool {
        age(record) < Duration::from_millis(self.interval_ms) * LIVE_FOR + CLOCK_MARGIN
    }
}

/// Registers this node with [`HEARTBEAT_INTERVAL`]; see [`register_every`].
pub async fn register(cluster: &Cluster, version: &str) -> Result<NodeRegistration, ClusterError> {
    register_every(cluster, version, HEARTBEAT_INTERVAL).await
}

/// Writes this node's record now, then renews it every `interval` until the registration is dropped.
pub async fn register_every(
    cluster: &Cluster,
    version: &str,
    interval: Duration,
) -> Result<NodeRegistration, ClusterError> {
    let store = nodes(cluster, cluster.node()).await?;
    let now = now_unix_ms();
    let info = NodeInfo {
        node: cluster.node().to_owned(),
        started_unix_ms: now,
        heartbeat_unix_ms: now,
        version: version.to_owned(),
        interval_ms: duration_ms(interval),
    };
    put(&store, &info).await?;
    let heartbeats = cluster.handle().spawn({
        let store = store.clone();
        async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let info = NodeInfo { heartbeat_unix_ms: now_unix_ms(), ..info.clone() };
                if let Err(error) = put(&store, &info).await {
                    tracing::debug!("this node's heartbeat failed: {error}");
                }
            }
        }
    });
    Ok(NodeRegistration { cluster: cluster.clone(), store, heartbeats })
}

/// This node's registration: heartbeats until dropped.
pub struct NodeRegistration {
    cluster: Cluster,
    store: kv::Store,
    heartbeats: tokio::task::JoinHandle<()>,
}

impl NodeRegistration {
    /// Stops the heartbeats and removes the node's record (an orderly shutdown), so that other nodes know at once.
    pub async fn deregister(self) -> Result<(), ClusterError> {
        self.heartbeats.abort();
        bounded("remove this node's record", self.store.delete(self.cluster.node())).await
    }
}

impl Drop for NodeRegistration {
    /// Stops the heartbeats and removes the record without waiting (best effort: a record left behind goes stale).
    fn drop(&mut self) {
        if self.heartbeats.is_finished() {
            return;
        }
        self.heartbeats.abort();
        let store = self.store.clone();
        let node = self.cluster.node().to_owned();
        self.cluster.handle().spawn(async move {
            let _ = bounded("remove this node's record", store.delete(node)).await;
        });
    }
}

/// Every node whose record is live, by name.
pub async fn live_nodes(cluster: &Cluster) -> Result<Vec<NodeInfo>, ClusterError> {
    let store = bucket(cluster, names::NODE_BUCKET).await?;
    let mut live: Vec<NodeInfo> = scan(cluster, &store)
        .await?
        .iter()
        .filter_map(|record| parse(record).filter(|info| info.live_in(record)))
        .collect();
    live.sort_by(|left, right| left.node.cmp(&right.node));
    Ok(live)
}

/// Whether `node`'s record is live.
pub async fn is_live(cluster: &Cluster, node: &str) -> Result<bool, ClusterError> {
    let store = nodes(cluster, node).await?;
    Ok(entry(&store, node).await?.is_some_and(|record| parse(&record).is_some_and(|info| info.live_in(&record))))
}

async fn put(store: &kv::Store, info: &NodeInfo) -> Result<u64, ClusterError> {
    let value = serde_json::to_vec(info)
        .map_err(|error| ClusterError::Corrupt { what: "a node's record", detail: error.to_string() })?;
    bounded("write this node's record", store.put(&info.node, value.into())).await
}

/// The node record in `record`; `None` when removed or unreadable (logged: such a node counts as gone).
fn parse(record: &Record) -> Option<NodeInfo> {
    if record.removed {
        return None;
    }
    serde_json::from_slice(&record.value)
        .map_err(|error| tracing::warn!("node record {} does not read: {error}", record.key))
        .ok()
}

async fn nodes(cluster: &Cluster, node: &str) -> Result<kv::Store, ClusterError> {
    if !names::is_subject_token(node) {
        return Err(ClusterError::Settings(format!("{node:?} cannot be a node name in NATS")));
    }
    bucket(cluster, names::NODE_BUCKET).await
}

/// How this node stands in its cluster, for `daemon.status`: whether it is connected to NATS now, and the live
/// nodes (none when NATS could not be asked).
pub async fn status(cluster: &Cluster) -> troupe_protocol::types::daemon::ClusterStatus {
    let live_nodes = match live_nodes(cluster).await {
        Ok(nodes) => nodes.into_iter().map(|node| node.node).collect(),
        Err(error) => {
            tracing::debug!(%error, "could not read the live nodes for daemon.status");
            Vec::new()
        }
    };
    troupe_protocol::types::daemon::ClusterStatus {
        node: cluster.node().to_owned(),
        nats_connected: cluster.is_connected(),
        live_nodes,
    }
}
