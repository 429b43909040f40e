//! Presence across the cluster ([`PresenceShare`]): each node keeps its subscribers of each session in the presence
//! bucket under `<session>.<node>` (an empty list deletes the key), and follows the whole bucket, handing the engine
//! every other node's lists. A node's lists count only while the node is live (its heartbeat in the node bucket,
//! [`crate::nodes`]): a node that died is reported as having left every session, and a node that starts again first
//! deletes the lists it left behind.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use troupe_protocol::types::presence::PresenceClient;
use troupe_runtime::presence_share::{PresenceShare, PresenceSink, RemotePresence};

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::kv::{Record, bounded, bucket, follow, scan};
use crate::{names, nodes};

/// How long a change waits for later ones of the same session before it is published.
const COALESCE: Duration = Duration::from_millis(50);
/// How long a failed publish or a broken watch waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// This node's side of the cluster's presence.
#[derive(Debug)]
pub struct NatsPresence {
    cluster: Cluster,
    /// The newest list of each session not published yet.
    pending: Arc<Mutex<HashMap<String, Vec<PresenceClient>>>>,
    wake: Arc<Notify>,
}

impl NatsPresence {
    /// Deletes the lists this node left in the bucket before it (re)started, then publishes its changes in the
    /// background.
    pub fn start(cluster: Cluster) -> NatsPresence {
        let pending: Arc<Mutex<HashMap<String, Vec<PresenceClient>>>> = Arc::default();
        let wake = Arc::new(Notify::new());
        cluster.handle().spawn(publish_loop(cluster.clone(), pending.clone(), wake.clone()));
        NatsPresence { cluster, pending, wake }
    }
}

impl PresenceShare for NatsPresence {
    fn node(&self) -> &str {
        self.cluster.node()
    }

    fn publish(&self, session_id: &str, clients: Vec<PresenceClient>) {
        if !names::is_subject_token(session_id) {
            return;
        }
        self.pending.lock().insert(session_id.to_owned(), clients);
        self.wake.notify_one();
    }

    fn watch(&self, sink: PresenceSink) {
        let cluster = self.cluster.clone();
        self.cluster.handle().spawn(async move {
            let mut view = View { me: cluster.node().to_owned(), ..View::default() };
            loop {
                if let Err(error) = follow_bucket(&cluster, &mut view, &sink).await {
                    tracing::debug!(%error, "the cluster's presence watch was interrupted; starting it again");
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }
}

/// The key of `node`'s list of `session_id`.
fn key(session_id: &str, node: &str) -> String {
    format!("{session_id}.{node}")
}

async fn publish_loop(cluster: Cluster, pending: Arc<Mutex<HashMap<String, Vec<PresenceClient>>>>, wake: Arc<Notify>) {
    while let Err(error) = forget_own(&cluster).await {
        tracing::warn!(%error, "could not clear this node's old presence lists; retrying");
        tokio::time::sleep(RETRY).await;
    }
    loop {
        if pending.lock().is_empty() {
            wake.notified().await;
        }
        tokio::time::sleep(COALESCE).await;
        let batch: Vec<(String, Vec<PresenceClient>)> = pending.lock().drain().collect();
        let mut failed = false;
        for (session_id, clients) in batch {
            if let Err(error) = publish(&cluster, &session_id, &clients).await {
                tracing::debug!(%session_id, %error, "could not publish a presence list; retrying");
                // Retried unless a newer list of the session came meanwhile.
                pending.lock().entry(session_id).or_insert(clients);
                failed = true;
            }
        }
        if failed {
            tokio::time::sleep(RETRY).await;
        }
    }
}

async fn publish(cluster: &Cluster, session_id: &str, clients: &[PresenceClient]) -> Result<(), ClusterError> {
    let store = bucket(cluster, names::PRESENCE_BUCKET).await?;
    let key = key(session_id, cluster.node());
    crate::kv::connected(cluster, "publish a presence list").await?;
    if clients.is_empty() {
        return bounded("remove a presence list", store.delete(&key)).await;
    }
    let value = serde_json::to_vec(clients)
        .map_err(|error| ClusterError::Corrupt { what: "a presence list", detail: error.to_string() })?;
    bounded("publish a presence list", store.put(&key, value.into())).await.map(drop)
}

/// Deletes every list of this node's in the bucket: they were its connections before it started.
async fn forget_own(cluster: &Cluster) -> Result<(), ClusterError> {
    let store = bucket(cluster, names::PRESENCE_BUCKET).await?;
    let suffix = format!(".{}", cluster.node());
    for record in scan(cluster, &store).await? {
        if !record.removed && record.key.ends_with(&suffix) {
            bounded("remove an old presence list", store.delete(&record.key)).await?;
        }
    }
    Ok(())
}

/// Follows the bucket and the live nodes, feeding `sink` each change of what is visible, until either fails.
async fn follow_bucket(cluster: &Cluster, view: &mut View, sink: &PresenceSink) -> Result<(), ClusterError> {
    let store = bucket(cluster, names::PRESENCE_BUCKET).await?;
    let (_, mut records) = follow(cluster, &store).await?;
    let mut liveness = tokio::time::interval(nodes::HEARTBEAT_INTERVAL);
    liveness.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            record = records.next() => match record {
                Some(Ok((record, _))) => view.apply_record(record, sink),
                Some(Err(error)) => return Err(error),
                None => {
                    return Err(ClusterError::JetStream { what: "follow presence", detail: "the reader ended".into() });
                }
            },
            _ = liveness.tick() => {
                let live = nodes::live_nodes(cluster).await?.into_iter().map(|info| info.node).collect();
                view.apply_live(live, sink);
            }
        }
    }
}

/// Every other node's lists as stored, and which nodes are live: what the engine was told is the stored lists of
/// live nodes.
#[derive(Default)]
struct View {
    me: String,
    /// By (session, node).
    lists: HashMap<(String, String), Vec<PresenceClient>>,
    live: HashSet<String>,
}

impl View {
    fn visible(&self, session_and_node: &(String, String)) -> Vec<PresenceClient> {
        if !self.live.contains(&session_and_node.1) {
            return Vec::new();
        }
        self.lists.get(session_and_node).cloned().unwrap_or_default()
    }

    fn apply_record(&mut self, record: Record, sink: &PresenceSink) {
        let Some((session_id, node)) = record.key.split_once('.') else {
            tracing::warn!(key = %record.key, "skipping a presence list with no node in its key");
            return;
        };
        if node == self.me {
            return;
        }
        let at = (session_id.to_owned(), node.to_owned());
        let before = self.visible(&at);
        let clients = if record.removed {
            Vec::new()
        } else {
            match serde_json::from_slice::<Vec<PresenceClient>>(&record.value) {
                Ok(clients) => clients,
                Err(error) => {
                    tracing::warn!(key = %record.key, %error, "skipping an unreadable presence list");
                    return;
                }
            }
        };
        if clients.is_empty() {
            self.lists.remove(&at);
        } else {
            self.lists.insert(at.clone(), clients);
        }
        self.tell_if_changed(at, before, sink);
    }

    fn apply_live(&mut self, live: HashSet<String>, sink: &PresenceSink) {
        let flipped: Vec<(String, String)> =
            self.lists.keys().filter(|(_, node)| self.live.contains(node) != live.contains(node)).cloned().collect();
        let before: Vec<Vec<PresenceClient>> = flipped.iter().map(|at| self.visible(at)).collect();
        self.live = live;
        for (at, before) in flipped.into_iter().zip(before) {
            self.tell_if_changed(at, before, sink);
        }
    }

    fn tell_if_changed(&self, at: (String, String), before: Vec<PresenceClient>, sink: &PresenceSink) {
        let now = self.visible(&at);
        if now != before {
            let (session_id, node) = at;
            sink(RemotePresence { session_id, node, clients: now });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: &str) -> PresenceClient {
        PresenceClient { connection_id: id.to_owned(), name: None, version: None, since: "2026-12-02T00:00:00Z".into() }
    }

    fn record(key: &str, clients: &[PresenceClient]) -> Record {
        Record {
            key: key.to_owned(),
            value: serde_json::to_vec(clients).unwrap().into(),
            revision: 1,
            stored_unix_ms: 0,
            removed: clients.is_empty(),
        }
    }

    fn collecting() -> (PresenceSink, Arc<Mutex<Vec<RemotePresence>>>) {
        let told: Arc<Mutex<Vec<RemotePresence>>> = Arc::default();
        let sink = {
            let told = told.clone();
            Box::new(move |change| told.lock().push(change)) as PresenceSink
        };
        (sink, told)
    }

    #[test]
    fn only_live_other_nodes_lists_are_told_and_a_dead_nodes_lists_are_withdrawn() {
        let (sink, told) = collecting();
        let mut view = View { me: "a".into(), ..View::default() };
        view.apply_record(record("s1.b", &[client("connection-1@b")]), &sink);
        view.apply_record(record("s1.a", &[client("connection-2@a")]), &sink);
        assert!(told.lock().is_empty(), "b is not known live yet; a is this node");
        view.apply_live(HashSet::from(["a".to_owned(), "b".to_owned()]), &sink);
        assert_eq!(
            told.lock().as_slice(),
            &[RemotePresence { session_id: "s1".into(), node: "b".into(), clients: vec![client("connection-1@b")] }]
        );
        view.apply_record(record("s1.b", &[client("connection-1@b")]), &sink);
        assert_eq!(told.lock().len(), 1, "an unchanged list is not told again");
        view.apply_live(HashSet::from(["a".to_owned()]), &sink);
        assert_eq!(told.lock().last().map(|change| change.clients.is_empty()), Some(true), "b died: it left");
        view.apply_live(HashSet::from(["a".to_owned(), "b".to_owned()]), &sink);
        view.apply_record(record("s1.b", &[]), &sink);
        let told = told.lock();
        assert_eq!(told.len(), 4, "b came back with its list, then emptied it: {told:?}");
        assert!(told[3].clients.is_empty());
        assert_eq!(view.lists.len(), 0, "an emptied list is forgotten");
    }
}
