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

enum Pending {
    Put(Box<SessionMeta>),
    Remove,
}

/// This node's view of the cluster's session directory.
#[derive(Debug)]
pub struct NatsDirectory {
    cluster: Cluster,
    pending: Arc<Mutex<HashMap<String, PendingSlot>>>,
    wake: Arc<Notify>,
}

/// A change waiting to be published (kept behind a type so the map's Debug needs nothing of `SessionMeta`).
struct PendingSlot(Pending);

impl std::fmt::Debug for PendingSlot {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self.0 {
            Pending::Put(_) => "Put",
            Pending::Remove => "Remove",
        })
    }
}

impl NatsDirectory {
    /// Starts publishing this node's changes in the background.
    pub fn start(cluster: Cluster) -> NatsDirectory {
        let pending: Arc<Mutex<HashMap<String, PendingSlot>>> = Arc::default();
        let wake = Arc::new(Notify::new());
        cluster.handle().spawn(publish_loop(cluster.clone(), pending.clone(), wake.clone()));
        NatsDirectory { cluster, pending, wake }
    }

    fn queue(&self, session_id: &str, change: Pending) {
        self.pending.lock().insert(session_id.to_owned(), PendingSlot(change));
        self.wake.notify_one();
    }
}

async fn publish_loop(cluster: Cluster, pending: Arc<Mutex<HashMap<String, PendingSlot>>>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        tokio::time::sleep(COALESCE).await;
        let batch: Vec<(String, PendingSlot)> = pending.lock().drain().collect();
        for (session_id, PendingSlot(change)) in batch {
            let done = match &change {
                Pending::Put(meta) => directory::publish(&cluster, &session_id, cluster.node(), meta).await.map(drop),
                Pending::Remove => directory::remove(&cluster, &session_id).await,
            };
            if let Err(error) = done {
                tracing::warn!(%session_id, %error, "could not update the cluster's session directory; retrying");
                // Retried unless a newer change of the session came meanwhile.
                pending.lock().entry(session_id).or_insert(PendingSlot(change));
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

    fn remove(&self, session_id: &str) {
        self.queue(session_id, Pending::Remove);
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
            // An entry that does not read as a session's metadata is no session this node can open.
            Ok(entry.and_then(|entry| {
                let meta = serde_json::from_value::<SessionMeta>(entry.meta).ok()?;
                Some(DirectoryEntry { meta, node: entry.owner })
            }))
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
        directory::DirectoryChange::Put(entry) => match serde_json::from_value::<SessionMeta>(entry.meta) {
            Ok(meta) => Some(DirectoryChange::Put { meta: Box::new(meta), node: entry.owner }),
            Err(error) => {
                tracing::warn!(session_id = %entry.session_id, %error, "skipping an unreadable directory entry");
                None
            }
        },
        directory::DirectoryChange::Removed { session_id, .. } => Some(DirectoryChange::Removed { session_id }),
        directory::DirectoryChange::CaughtUp => Some(DirectoryChange::CaughtUp),
    }
}
