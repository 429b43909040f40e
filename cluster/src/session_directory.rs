//! The cluster's directory as the engine's [`SessionDirectory`]: this node's sessions are published in the
//! background, coalesced per session, and every node's entries are fed to the supervisor's index by a watch that
//! starts again by itself after NATS comes back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use troupe_protocol::types::common::SessionMeta;
use troupe_runtime::session_directory::{DirectoryChange, DirectoryEntry, DirectorySink, SessionDirectory};

use crate::connection::Cluster;
use crate::directory;

/// How long a change waits for later ones of the same session before it is published: a session committing many
/// batches a second publishes a few times a second, not once per batch.
const COALESCE: Duration = Duration::from_millis(200);
/// How long a failed publish or a broken watch waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// A change waiting to be published.
#[derive(Debug)]
enum Pending {
    Put(Box<SessionMeta>),
    Remove,
}

/// This node's view of the cluster's session directory.
#[derive(Debug)]
pub struct NatsDirectory {
    cluster: Cluster,
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    wake: Arc<Notify>,
}

impl NatsDirectory {
    /// Starts publishing this node's changes in the background.
    pub fn start(cluster: Cluster) -> NatsDirectory {
        let pending: Arc<Mutex<HashMap<String, Pending>>> = Arc::default();
        let wake = Arc::new(Notify::new());
        cluster.handle().spawn(publish_loop(cluster.clone(), pending.clone(), wake.clone()));
        NatsDirectory { cluster, pending, wake }
    }

    fn queue(&self, session_id: &str, change: Pending) {
        self.pending.lock().insert(session_id.to_owned(), change);
        self.wake.notify_one();
    }
}

async fn publish_loop(cluster: Cluster, pending: Arc<Mutex<HashMap<String, Pending>>>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        tokio::time::sleep(COALESCE).await;
        let batch: Vec<(String, Pending)> = pending.lock().drain().collect();
        for (session_id, change) in batch {
            let done = match &change {
                Pending::Put(meta) => directory::publish(&cluster, &session_id, cluster.node(), meta).await.map(drop),
                Pending::Remove => directory::remove(&cluster, &session_id).await,
            };
            if let Err(error) = done {
                tracing::warn!(%session_id, %error, "could not update the cluster's session directory; retrying");
                // Retried unless a newer change of the session came meanwhile.
                pending.lock().entry(session_id).or_insert(change);
                let wake = wake.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(RETRY).await;
                    wake.notify_one();
                });
            }
        }
    }
}

impl SessionDirectory for NatsDirectory {
    fn node(&self) -> &str {
        self.cluster.node()
    }

    fn publish(&self, meta: &SessionMeta) {
        self.queue(&meta.session_id, Pending::Put(Box::new(meta.clone())));
    }

    fn is_current(&self) -> bool {
        self.cluster.is_connected()
    }

    fn remove(&self, session_id: &str) {
        self.queue(session_id, Pending::Remove);
    }

    fn lease_remaining(
        &self,
        session_id: &str,
    ) -> futures::future::BoxFuture<'static, Result<Option<std::time::Duration>, String>> {
        let (cluster, session_id) = (self.cluster.clone(), session_id.to_owned());
        let read = self.cluster.handle().spawn(async move { crate::lease::holder(&cluster, &session_id).await });
        Box::pin(async move {
            match read.await {
                Ok(Ok(holder)) => Ok(holder.and_then(|lease| lease.expires_in)),
                Ok(Err(error)) => Err(format!("the session's lease cannot be read now: {error}")),
                Err(error) => Err(format!("the cluster's lease reader failed: {error}")),
            }
        })
    }

    fn lookup(&self, session_id: &str) -> futures::future::BoxFuture<'static, Result<Option<DirectoryEntry>, String>> {
        let (cluster, session_id) = (self.cluster.clone(), session_id.to_owned());
        let read = self.cluster.handle().spawn(async move { directory::get(&cluster, &session_id).await });
        Box::pin(async move {
            let entry = match read.await {
                Ok(Ok(entry)) => entry,
                Ok(Err(error)) => return Err(format!("the cluster's session directory cannot be read now: {error}")),
                Err(error) => return Err(format!("the cluster's directory reader failed: {error}")),
            };
            Ok(entry.and_then(session_of))
        })
    }

    fn live_nodes(&self) -> futures::future::BoxFuture<'static, Result<Vec<String>, String>> {
        let cluster = self.cluster.clone();
        let read = self.cluster.handle().spawn(async move { crate::nodes::live_nodes(&cluster).await });
        Box::pin(async move {
            match read.await {
                Ok(Ok(nodes)) => Ok(nodes.into_iter().map(|info| info.node).collect()),
                Ok(Err(error)) => Err(format!("the cluster's live nodes cannot be read now: {error}")),
                Err(error) => Err(format!("the cluster's node reader failed: {error}")),
            }
        })
    }

    fn watch(&self, sink: DirectorySink) {
        let cluster = self.cluster.clone();
        self.cluster.handle().spawn(async move {
            // A watch whose feed ended (NATS gone for long) is started again; it begins with the whole directory.
            loop {
                match directory::watch(&cluster).await {
                    Ok(mut changes) => {
                        while let Some(change) = changes.next().await {
                            match change {
                                Ok(change) => {
                                    if let Some(change) = change_of(change) {
                                        sink(change);
                                    }
                                }
                                Err(error) => tracing::debug!(%error, "the session directory's watch was interrupted"),
                            }
                        }
                    }
                    Err(error) => tracing::warn!(%error, "cannot watch the cluster's session directory; retrying"),
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }
}

/// What the engine's index takes from a change of the directory (nothing from an entry that does not read as a
/// session's metadata, which is logged).
fn change_of(change: directory::DirectoryChange) -> Option<DirectoryChange> {
    match change {
        directory::DirectoryChange::Put(entry) => {
            session_of(entry).map(|entry| DirectoryChange::Put { meta: Box::new(entry.meta), node: entry.node })
        }
        directory::DirectoryChange::Removed { session_id, .. } => Some(DirectoryChange::Removed { session_id }),
        directory::DirectoryChange::CaughtUp => Some(DirectoryChange::CaughtUp),
    }
}

/// A directory entry as a session this node may index and open, or `None` (logged): its value must read as a
/// session's metadata, name the same session as its key, and that id must be a plain token. The id becomes a
/// folder of the data dir (`sessions/<id>`), so an entry written by anything else with a path in it (`..`, `/`)
/// must never reach the engine.
fn session_of(entry: directory::DirectoryEntry) -> Option<DirectoryEntry> {
    let meta = match serde_json::from_value::<SessionMeta>(entry.meta) {
        Ok(meta) => meta,
        Err(error) => {
            tracing::warn!(session_id = %entry.session_id, %error, "skipping an unreadable directory entry");
            return None;
        }
    };
    if meta.session_id != entry.session_id || !crate::names::is_subject_token(&meta.session_id) {
        tracing::warn!(key = %entry.session_id, "skipping a directory entry that names another or no session");
        return None;
    }
    Some(DirectoryEntry { meta, node: entry.owner })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, session_id: &str) -> directory::DirectoryEntry {
        let meta = serde_json::json!({
            "session_id": session_id, "origin": {"type": "root"}, "cwd": "/srv/app", "title": null,
            "title_updated_seq": null,
            "creation_selection": {"agent": "default", "model": {"model": "local/echo", "variant": null}, "preset": null},
            "status": "idle", "last_event_seq": 1, "created_at": "2026-12-02T00:00:00Z",
            "last_activity_at": "2026-12-02T00:00:00Z", "skipped_events": []
        });
        directory::DirectoryEntry { session_id: key.to_owned(), owner: "a".to_owned(), meta, revision: 1 }
    }

    #[test]
    fn only_an_entry_naming_its_own_plain_session_id_reaches_the_engine() {
        let good = session_of(entry("01a2-b3", "01a2-b3")).expect("a plain id");
        assert_eq!((good.meta.session_id.as_str(), good.node.as_str()), ("01a2-b3", "a"));
        assert!(session_of(entry("..", "..")).is_none(), "a path in the id");
        assert!(session_of(entry("x/y", "x/y")).is_none(), "a path in the id");
        assert!(session_of(entry("01a2-b3", "01a2-b4")).is_none(), "a value naming another session");
        let mut unreadable = entry("01a2-b3", "01a2-b3");
        unreadable.meta = serde_json::json!({"title": 1});
        assert!(session_of(unreadable).is_none());
    }
}
