//! The session directory: every session of the cluster, with its metadata and the node that owns it, in
//! [`names::DIRECTORY_BUCKET`] under the session id. The owning node publishes a session's metadata as the engine
//! does; every node lists it (`session.list` answers for the whole cluster) or follows it with [`watch`] to keep a
//! live index.
//!
//! Listing reads every key's latest value through one consumer (see [`crate::kv`]), not a request per key, so a
//! directory of thousands of sessions is read in one pass.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::kv::{Record, bounded, bucket, entry, follow, scan};
use crate::names;

/// How many changes a [`DirectoryWatch`] buffers before its reader task waits for the reader.
const WATCH_BUFFER: usize = 1024;
/// The pause after a failed read of the directory before the next (the consumer recreates itself meanwhile).
const WATCH_RETRY: Duration = Duration::from_millis(200);

/// A directory value as stored: JSON in the bucket.
#[derive(Serialize, Deserialize)]
struct Listing {
    owner: String,
    meta: serde_json::Value,
}

/// One session in the directory.
#[derive(Clone, Debug, PartialEq)]
pub struct DirectoryEntry {
    pub session_id: String,
    /// The node that hosts the session.
    pub owner: String,
    /// The session's metadata as the engine publishes it.
    pub meta: serde_json::Value,
    pub revision: u64,
}

/// A change of the directory, as [`watch`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum DirectoryChange {
    /// A session was published (first, or again with new metadata or a new owner).
    Put(DirectoryEntry),
    Removed {
        session_id: String,
        revision: u64,
    },
    /// Every session that was in the directory when the watch began has been reported; what follows is new.
    CaughtUp,
}

/// Publishes (or republishes) `session_id` as owned by `owner` with `meta` (the session's metadata, stored as
/// JSON). Returns the revision written.
pub async fn publish(
    cluster: &Cluster,
    session_id: &str,
    owner: &str,
    meta: &impl Serialize,
) -> Result<u64, ClusterError> {
    let store = directory(cluster, session_id).await?;
    let corrupt =
        |error: serde_json::Error| ClusterError::Corrupt { what: "a session's metadata", detail: error.to_string() };
    let meta = serde_json::to_value(meta).map_err(corrupt)?;
    let value = serde_json::to_vec(&Listing { owner: owner.to_owned(), meta })
        .map_err(|error| ClusterError::Corrupt { what: "a session's directory entry", detail: error.to_string() })?;
    crate::kv::connected(cluster, "publish a session to the directory").await?;
    bounded("publish a session to the directory", store.put(session_id, value.into())).await
}

/// Removes `session_id` from the directory (the session was deleted). Removing an absent session does nothing.
pub async fn remove(cluster: &Cluster, session_id: &str) -> Result<(), ClusterError> {
    let store = directory(cluster, session_id).await?;
    crate::kv::connected(cluster, "remove a session from the directory").await?;
    bounded("remove a session from the directory", store.delete(session_id)).await
}

/// `session_id`'s directory entry, `None` when the directory has no such session.
pub async fn get(cluster: &Cluster, session_id: &str) -> Result<Option<DirectoryEntry>, ClusterError> {
    let store = directory(cluster, session_id).await?;
    match entry(&store, session_id).await? {
        Some(record) if !record.removed => Ok(Some(parse(record)?)),
        _ => Ok(None),
    }
}

/// Every session in the directory, in the order the server stored their last changes (an entry that does not
/// read is skipped, and logged).
pub async fn list(cluster: &Cluster) -> Result<Vec<DirectoryEntry>, ClusterError> {
    let store = bucket(cluster, names::DIRECTORY_BUCKET).await?;
    let records = scan(cluster, &store).await?;
    Ok(records
        .into_iter()
        .filter(|record| !record.removed)
        .filter_map(|record| {
            // One unreadable entry must not hide every other session.
            parse(record).map_err(|error| tracing::warn!("the session directory skips an entry: {error}")).ok()
        })
        .collect())
}

/// Follows the directory: every session in it now (then [`DirectoryChange::CaughtUp`]), then every change as it
/// happens, until the watch is dropped. Read on any runtime, or from a plain thread with
/// [`DirectoryWatch::blocking_recv`].
pub async fn watch(cluster: &Cluster) -> Result<DirectoryWatch, ClusterError> {
    let store = bucket(cluster, names::DIRECTORY_BUCKET).await?;
    let (pending, mut records) = follow(cluster, &store).await?;
    let (sender, receiver) = mpsc::channel(WATCH_BUFFER);
    let reader = cluster.handle().spawn(async move {
        let mut caught_up = pending == 0;
        if caught_up && sender.send(Ok(DirectoryChange::CaughtUp)).await.is_err() {
            return;
        }
        while let Some(record) = records.next().await {
            let (change, left) = match record {
                Ok((record, left)) => (change_of(record), left),
                Err(error) => {
                    if sender.send(Err(error)).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(WATCH_RETRY).await;
                    continue;
                }
            };
            if sender.send(change).await.is_err() {
                return;
            }
            if !caught_up && left == 0 {
                caught_up = true;
                if sender.send(Ok(DirectoryChange::CaughtUp)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(DirectoryWatch { receiver, reader })
}

/// The directory's changes, fed by a task on the cluster's runtime; dropping it ends the task.
pub struct DirectoryWatch {
    receiver: mpsc::Receiver<Result<DirectoryChange, ClusterError>>,
    reader: tokio::task::JoinHandle<()>,
}

impl DirectoryWatch {
    /// The next change; `None` if the watch ended (the cluster's runtime is gone).
    pub async fn recv(&mut self) -> Option<Result<DirectoryChange, ClusterError>> {
        self.receiver.recv().await
    }

    /// [`DirectoryWatch::recv`] for a plain thread; it must not be called on an async thread.
    pub fn blocking_recv(&mut self) -> Option<Result<DirectoryChange, ClusterError>> {
        self.receiver.blocking_recv()
    }

    /// The next change if one is waiting.
    pub fn try_recv(&mut self) -> Option<Result<DirectoryChange, ClusterError>> {
        self.receiver.try_recv().ok()
    }
}

impl futures::Stream for DirectoryWatch {
    type Item = Result<DirectoryChange, ClusterError>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receiver.poll_recv(context)
    }
}

impl Drop for DirectoryWatch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn change_of(record: Record) -> Result<DirectoryChange, ClusterError> {
    if record.removed {
        return Ok(DirectoryChange::Removed { session_id: record.key, revision: record.revision });
    }
    parse(record).map(DirectoryChange::Put)
}

fn parse(record: Record) -> Result<DirectoryEntry, ClusterError> {
    let listing: Listing = serde_json::from_slice(&record.value).map_err(|error| ClusterError::Corrupt {
        what: "a session's directory entry",
        detail: format!("{}: {error}", record.key),
    })?;
    Ok(DirectoryEntry { session_id: record.key, owner: listing.owner, meta: listing.meta, revision: record.revision })
}

async fn directory(cluster: &Cluster, session_id: &str) -> Result<async_nats::jetstream::kv::Store, ClusterError> {
    if !names::is_subject_token(session_id) {
        return Err(ClusterError::Settings(format!("{session_id:?} cannot be a session id in NATS")));
    }
    bucket(cluster, names::DIRECTORY_BUCKET).await
}
