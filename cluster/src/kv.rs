//! What the lease, directory and node modules share about JetStream key-value buckets: opening one, reading every
//! key's latest value in one pass, following a bucket's changes, and telling how long ago the server stored an
//! entry.
//!
//! `kv::Store::keys` followed by a `get` per key costs a round trip per key; a bucket with thousands of sessions is
//! read here instead through one ordered push consumer with `DeliverPolicy::LastPerSubject`, which streams every
//! key's latest message (delete markers included, so that a follower learns of removals) and says up front how
//! many there are, so a reader knows when it has seen them all, even in an empty bucket.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use bytes::Bytes;
use futures::StreamExt;

use crate::connection::Cluster;
use crate::connection::REQUEST_TIMEOUT;
use crate::error::ClusterError;

/// The header in which JetStream key-value marks a removal (`DEL` or `PURGE`).
const OPERATION_HEADER: &str = "KV-Operation";

/// One key's latest message in a bucket.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub key: String,
    pub value: Bytes,
    pub revision: u64,
    /// When the server stored it, in milliseconds since the Unix epoch by the server's clock.
    pub stored_unix_ms: u64,
    /// The key was deleted or purged (the value is empty).
    pub removed: bool,
}

/// A bucket the connection provisioned, by name.
pub(crate) async fn bucket(cluster: &Cluster, name: &'static str) -> Result<kv::Store, ClusterError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, cluster.jetstream().get_key_value(name)).await {
        Ok(Ok(store)) => Ok(store),
        Ok(Err(error)) => {
            Err(ClusterError::JetStream { what: "open a key-value bucket", detail: format!("{name}: {error}") })
        }
        Err(_) => Err(unreachable("open a key-value bucket")),
    }
}

/// The error of a NATS call that did not answer within [`REQUEST_TIMEOUT`].
pub(crate) fn unreachable(what: &'static str) -> ClusterError {
    ClusterError::Unreachable { what, detail: format!("no answer within {REQUEST_TIMEOUT:?}") }
}

/// Waits up to [`REQUEST_TIMEOUT`] for the client to be connected, before a write is sent: what is published while
/// it is disconnected, the client keeps and sends when it reconnects, so a write refused meanwhile would still land
/// later (a directory entry over a newer one, a provider change its client was told is not stored).
pub(crate) async fn connected(cluster: &Cluster, what: &'static str) -> Result<(), ClusterError> {
    let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
    while !cluster.is_connected() {
        if tokio::time::Instant::now() >= deadline {
            let detail = format!("not connected to NATS for {REQUEST_TIMEOUT:?}; nothing was sent");
            return Err(ClusterError::Unreachable { what, detail });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Ok(())
}

/// Awaits one NATS call for at most [`REQUEST_TIMEOUT`], naming `what` in either failure.
pub(crate) async fn bounded<T, E: std::fmt::Display>(
    what: &'static str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(ClusterError::JetStream { what, detail: error.to_string() }),
        Err(_) => Err(unreachable(what)),
    }
}

/// The latest entry of `key` as a [`Record`], `None` when the key was never written. Read from the bucket's stream
/// leader, not with a direct get, which any replica may answer: one that has not applied the latest write yet (after
/// a server of the cluster went down, say) would answer an older entry, or none at all.
pub(crate) async fn entry(store: &kv::Store, key: &str) -> Result<Option<Record>, ClusterError> {
    let subject = format!("{}{key}", store.prefix);
    let read = bounded("read a key-value entry", async {
        match store.stream.get_last_raw_message_by_subject(&subject).await {
            Ok(message) => Ok(Some(message)),
            Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(error) => Err(error),
        }
    })
    .await?;
    Ok(read.map(|message| Record {
        removed: message
            .headers
            .get(OPERATION_HEADER)
            .is_some_and(|operation| matches!(operation.as_str(), "DEL" | "PURGE")),
        stored_unix_ms: unix_ms_of_nanos(message.time.unix_timestamp_nanos()),
        key: key.to_owned(),
        value: message.payload,
        revision: message.sequence,
    }))
}

/// The latest message of every key in `store`, removed keys included; `ttl`-style judgements are the caller's.
pub(crate) async fn scan(cluster: &Cluster, store: &kv::Store) -> Result<Vec<Record>, ClusterError> {
    let (pending, mut messages) = follow(cluster, store).await?;
    let mut records = Vec::with_capacity(usize::try_from(pending).unwrap_or(0));
    let mut left = pending;
    while left > 0 {
        let record = match tokio::time::timeout(REQUEST_TIMEOUT, messages.next()).await {
            Ok(Some(record)) => record?,
            Ok(None) => {
                return Err(ClusterError::JetStream { what: "read a bucket", detail: "the consumer ended".to_owned() });
            }
            Err(_) => return Err(unreachable("read a bucket")),
        };
        left = record.1;
        records.push(record.0);
    }
    Ok(records)
}

/// A stream of a bucket's records and, with each, how many more of the bucket's current contents follow it.
pub(crate) type Follow = futures::stream::BoxStream<'static, Result<(Record, u64), ClusterError>>;

/// Every key's latest record, then every change as it happens. Also returns how many records the current contents
/// are (0: the bucket is empty, and whatever comes is a change).
pub(crate) async fn follow(cluster: &Cluster, store: &kv::Store) -> Result<(u64, Follow), ClusterError> {
    follow_keys(cluster, store, ">").await
}

/// [`follow`] of the keys `keys` matches (a key with NATS wildcards: `scope.*`, `a.>`), not the whole bucket.
pub(crate) async fn follow_keys(
    cluster: &Cluster,
    store: &kv::Store,
    keys: &str,
) -> Result<(u64, Follow), ClusterError> {
    let config = push::OrderedConfig {
        deliver_subject: cluster.client().new_inbox(),
        description: Some("troupe bucket reader".to_owned()),
        filter_subject: format!("{}{keys}", store.prefix),
        replay_policy: ReplayPolicy::Instant,
        deliver_policy: DeliverPolicy::LastPerSubject,
        ..Default::default()
    };
    let consumer = bounded("create a bucket reader", store.stream.create_consumer(config)).await?;
    let pending = consumer.cached_info().num_pending;
    let messages = bounded("subscribe a bucket reader", consumer.messages()).await?;
    let prefix = store.prefix.clone();
    let records = messages.map(move |message| {
        let message =
            message.map_err(|error| ClusterError::JetStream { what: "read a bucket", detail: error.to_string() })?;
        let info = message.info().map_err(|error| ClusterError::Corrupt {
            what: "a bucket message's metadata",
            detail: error.to_string(),
        })?;
        let removed = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(OPERATION_HEADER))
            .is_some_and(|operation| matches!(operation.as_str(), "DEL" | "PURGE"));
        let record = Record {
            key: message.subject.as_str().strip_prefix(prefix.as_str()).unwrap_or(message.subject.as_str()).to_owned(),
            value: message.payload.clone(),
            revision: info.stream_sequence,
            stored_unix_ms: unix_ms_of_nanos(info.published.unix_timestamp_nanos()),
            removed,
        };
        Ok((record, info.pending))
    });
    Ok((pending, records.boxed()))
}

/// The local wall clock, in milliseconds since the Unix epoch.
pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(duration_ms).unwrap_or(0)
}

/// How long ago, by the local wall clock, the server stored a record (zero if the server's clock is ahead).
pub(crate) fn age(record: &Record) -> Duration {
    Duration::from_millis(now_unix_ms().saturating_sub(record.stored_unix_ms))
}

pub(crate) fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn unix_ms_of_nanos(nanos: i128) -> u64 {
    u64::try_from(nanos / 1_000_000).unwrap_or(0)
}
