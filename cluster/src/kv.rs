//! What the lease, directory and node modules share about JetStream key-value buckets: opening one, reading every
//! key's latest value in one pass, following a bucket's changes, and telling how long ago the server stored an
//! entry.
//!
//! `kv::Store::keys` followed by a `get` per key costs a round trip per key; a bucket with thousands of sessions is
//! read here instead through one ordered push consumer with `DeliverPolicy::LastPerSubject`, which streams every
//! key's latest message (delete markers included, so that a follower learns of removals).
//!
//! When a reader has seen the bucket's contents is not left to the server's pending count: nats-server 2.9 (Debian's)
//! can deliver a key rewritten while the consumer starts twice and count it as pending for good, and can end its
//! first pass without a key it counted. A reader waiting for zero never ended while the bucket was being written
//! (each write reset its per-message timeout), and one that trusted it missed keys. So the keys the bucket holds
//! are listed first (the stream's subjects, with its last sequence); the contents are seen once each was
//! delivered, and those the server skipped (it counts nothing pending, or delivers a message newer than the list)
//! are read one by one. Repeats delivered before then are dropped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
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

/// How long reading a whole bucket may take, however steadily its messages come.
const SCAN_WITHIN: Duration = Duration::from_secs(30);

/// The latest message of every key in `store`, removed keys included, in the order the server stored them (a key
/// rewritten during the read comes once, with its newest record); `ttl`-style judgements are the caller's.
pub(crate) async fn scan(cluster: &Cluster, store: &kv::Store) -> Result<Vec<Record>, ClusterError> {
    let read = async {
        let (pending, mut messages) = follow(cluster, store).await?;
        let mut records = Vec::with_capacity(usize::try_from(pending).unwrap_or(0));
        let mut left = pending;
        while left > 0 {
            let record = match tokio::time::timeout(REQUEST_TIMEOUT, messages.next()).await {
                Ok(Some(record)) => record?,
                Ok(None) => {
                    let detail = "the consumer ended".to_owned();
                    return Err(ClusterError::JetStream { what: "read a bucket", detail });
                }
                Err(_) => return Err(unreachable("read a bucket")),
            };
            left = record.1;
            records.push(record.0);
        }
        Ok(newest_of_each_key(records))
    };
    match tokio::time::timeout(SCAN_WITHIN, read).await {
        Ok(read) => read,
        Err(_) => Err(ClusterError::Unreachable {
            what: "read a bucket",
            detail: format!("its contents were not all read within {SCAN_WITHIN:?}"),
        }),
    }
}

/// `records` with one record per key, its newest, ordered by revision.
fn newest_of_each_key(records: Vec<Record>) -> Vec<Record> {
    let mut newest: HashMap<String, Record> = HashMap::with_capacity(records.len());
    for record in records {
        match newest.get(&record.key) {
            Some(kept) if kept.revision >= record.revision => {}
            _ => {
                newest.insert(record.key.clone(), record);
            }
        }
    }
    let mut records: Vec<Record> = newest.into_values().collect();
    records.sort_by_key(|record| record.revision);
    records
}

/// The subjects of `store`'s stream that `filter` matches and that hold a message now (the keys a reader of the
/// bucket's current contents waits for), and the stream's last sequence.
async fn subjects_now(store: &kv::Store, filter: &str) -> Result<(HashSet<String>, u64), ClusterError> {
    let mut listing = bounded("list a bucket's keys", store.stream.info_with_subjects(filter)).await?;
    let last_sequence = listing.info.state.last_sequence;
    let mut subjects = HashSet::new();
    loop {
        match tokio::time::timeout(REQUEST_TIMEOUT, listing.next()).await {
            Ok(Some(Ok((subject, _count)))) => {
                subjects.insert(subject);
            }
            Ok(Some(Err(error))) => {
                return Err(ClusterError::JetStream { what: "list a bucket's keys", detail: error.to_string() });
            }
            Ok(None) => return Ok((subjects, last_sequence)),
            Err(_) => return Err(unreachable("list a bucket's keys")),
        }
    }
}

/// A stream of a bucket's records and, with each, how many more of the bucket's current contents follow it (0 from
/// the record with which the reader has seen them all, and with every record after it).
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
    let filter_subject = format!("{}{keys}", store.prefix);
    // Listed before the reader starts: each of these keys' latest record, or a newer one, is delivered (or, where
    // the server skips one, read by itself).
    let (unseen, last_sequence) = subjects_now(store, &filter_subject).await?;
    let config = push::OrderedConfig {
        deliver_subject: cluster.client().new_inbox(),
        description: Some("troupe bucket reader".to_owned()),
        filter_subject,
        replay_policy: ReplayPolicy::Instant,
        deliver_policy: DeliverPolicy::LastPerSubject,
        ..Default::default()
    };
    let consumer = bounded("create a bucket reader", store.stream.create_consumer(config)).await?;
    let nothing_pending = consumer.cached_info().num_pending == 0;
    let messages = bounded("subscribe a bucket reader", consumer.messages()).await?;
    let mut reader = BucketReader {
        store: store.clone(),
        messages: messages.boxed(),
        unseen,
        last_sequence,
        newest: HashMap::new(),
        filled: VecDeque::new(),
    };
    if nothing_pending {
        reader.unseen.clear();
    }
    let pending = reader.left();
    let records = futures::stream::unfold(reader, |mut reader| async move {
        let next = reader.next().await?;
        Some((next, reader))
    });
    Ok((pending, records.boxed()))
}

type OrderedMessages = futures::stream::BoxStream<'static, Result<jetstream::Message, push::OrderedError>>;

/// The state of a [`follow_keys`] stream: what of the bucket's contents at its start has not been seen yet.
struct BucketReader {
    store: kv::Store,
    messages: OrderedMessages,
    /// Subjects listed at the start and not delivered yet.
    unseen: HashSet<String>,
    /// The stream's last sequence when they were listed: a message past it is not of the first pass.
    last_sequence: u64,
    /// Until the contents are seen: the newest revision delivered of each subject, to drop what the server delivers
    /// twice or older than it delivered already.
    newest: HashMap<String, u64>,
    /// Records of unseen keys read by themselves after the server said nothing more was pending.
    filled: VecDeque<Record>,
}

impl BucketReader {
    /// How many records of the contents at the start are still to come.
    fn left(&self) -> u64 {
        u64::try_from(self.unseen.len() + self.filled.len()).unwrap_or(u64::MAX)
    }

    async fn next(&mut self) -> Option<Result<(Record, u64), ClusterError>> {
        loop {
            if let Some(record) = self.filled.pop_front() {
                return Some(Ok((record, self.left())));
            }
            let message = match self.messages.next().await? {
                Ok(message) => message,
                Err(error) => {
                    return Some(Err(ClusterError::JetStream { what: "read a bucket", detail: error.to_string() }));
                }
            };
            let (record, pending) = match record_of(&self.store.prefix, &message) {
                Ok(read) => read,
                Err(error) => return Some(Err(error)),
            };
            let subject = message.subject.as_str();
            let repeated = self.newest.get(subject).is_some_and(|&newest| newest >= record.revision);
            if !repeated && !self.unseen.is_empty() {
                self.unseen.remove(subject);
                self.newest.insert(subject.to_owned(), record.revision);
            }
            if (pending == 0 || record.revision > self.last_sequence) && !self.unseen.is_empty() {
                // nats-server 2.9 may end its first pass without some keys it counted (see the module's
                // documentation): they are read one by one.
                if let Err(error) = self.fill().await {
                    return Some(Err(error));
                }
            }
            if self.unseen.is_empty() && self.filled.is_empty() {
                self.newest = HashMap::new();
            }
            if repeated {
                continue;
            }
            return Some(Ok((record, self.left())));
        }
    }

    /// Reads each unseen key's latest record by itself (a key removed since is not waited for).
    async fn fill(&mut self) -> Result<(), ClusterError> {
        let mut subjects: Vec<String> = self.unseen.drain().collect();
        subjects.sort();
        for subject in subjects {
            let key = subject.strip_prefix(self.store.prefix.as_str()).unwrap_or(&subject);
            if let Some(record) = entry(&self.store, key).await? {
                self.filled.push_back(record);
            }
        }
        Ok(())
    }
}

/// A bucket message as a [`Record`], with how many messages the server counts as pending after it.
fn record_of(prefix: &str, message: &jetstream::Message) -> Result<(Record, u64), ClusterError> {
    let info = message
        .info()
        .map_err(|error| ClusterError::Corrupt { what: "a bucket message's metadata", detail: error.to_string() })?;
    let removed = message
        .headers
        .as_ref()
        .and_then(|headers| headers.get(OPERATION_HEADER))
        .is_some_and(|operation| matches!(operation.as_str(), "DEL" | "PURGE"));
    let subject = message.subject.as_str();
    let record = Record {
        key: subject.strip_prefix(prefix).unwrap_or(subject).to_owned(),
        value: message.payload.clone(),
        revision: info.stream_sequence,
        stored_unix_ms: unix_ms_of_nanos(info.published.unix_timestamp_nanos()),
        removed,
    };
    Ok((record, info.pending))
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
