//! Reading a session's events from JetStream, on any node, while its writer appends.
//!
//! Every read asks the stream's leader for the subject's next message from a stream sequence (`STREAM.MSG.GET`
//! with `next_by_subj`): the leader has every message a writer was acknowledged, so a reader sees an event as
//! soon as its append returned. Direct get would spread reads over the replicas, but a follower may lag behind an
//! acknowledged append, and an ordered consumer costs a consumer's creation per read, too much for the few
//! messages a range usually spans.
//!
//! A sparse index (event sequence → stream sequence of the message starting there, one entry per
//! [`INDEX_STRIDE_BYTES`] of payload or [`INDEX_STRIDE_MESSAGES`] messages), shared by a writer and its readers
//! and built from what they write and read, turns "events after `seq`" into a read from the nearest message
//! before it instead of from the subject's first message.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use troupe_runtime::event_log::LogEntry;

use super::format::{MessageSpan, events_of, span_of};
use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::names;

/// Bytes of payload after which the next message gets an index entry.
pub const INDEX_STRIDE_BYTES: usize = 64 * 1024;
/// Messages after which the next one gets an index entry.
pub const INDEX_STRIDE_MESSAGES: usize = 32;

/// Stream sequences of some of a session's messages, by the event sequence each starts with.
#[derive(Debug, Default)]
pub(super) struct Index {
    starts: BTreeMap<u64, u64>,
}

/// Payload and messages read in order since the last indexed message, to place the next entry.
#[derive(Clone, Copy, Debug)]
pub(super) struct Since {
    bytes: usize,
    messages: usize,
}

impl Since {
    /// At an indexed message.
    pub(super) const ENTRY: Since = Since { bytes: 0, messages: 0 };
    /// Before the subject's first message: it gets an entry.
    pub(super) const START: Since = Since { bytes: usize::MAX, messages: usize::MAX };
}

impl Index {
    /// Records `span`, read or written in order after the messages `since` counts.
    pub(super) fn note(&mut self, span: &MessageSpan, since: &mut Since) {
        if since.bytes >= INDEX_STRIDE_BYTES || since.messages >= INDEX_STRIDE_MESSAGES {
            self.starts.insert(span.first_seq, span.stream_seq);
            *since = Since::ENTRY;
        }
        since.bytes = since.bytes.saturating_add(span.len);
        since.messages = since.messages.saturating_add(1);
    }

    /// The indexed message nearest before event `seq`: (its first event, its stream sequence).
    fn floor(&self, seq: u64) -> Option<(u64, u64)> {
        self.starts.range(..=seq).next_back().map(|(first, stream_seq)| (*first, *stream_seq))
    }

    pub(super) fn len(&self) -> usize {
        self.starts.len()
    }
}

/// What a scan of the subject read.
pub(super) struct Scan {
    pub entries: Vec<LogEntry>,
    /// The last message read, and the index counters after it.
    pub last: Option<(MessageSpan, Since)>,
}

/// Reads any session's events from JetStream, on any node (not only the writer's). Cheap to clone; clones share
/// the index.
#[derive(Clone)]
pub struct LogReader {
    pub(super) cluster: Cluster,
    pub(super) session_id: Arc<str>,
    pub(super) subject: Arc<str>,
    pub(super) index: Arc<RwLock<Index>>,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("LogReader").field("session_id", &self.session_id).finish_non_exhaustive()
    }
}

impl LogReader {
    pub fn new(cluster: &Cluster, session_id: &str) -> LogReader {
        LogReader {
            cluster: cluster.clone(),
            session_id: Arc::from(session_id),
            subject: Arc::from(names::event_subject(session_id)),
            index: Arc::default(),
        }
    }

    /// The events with `after < seq <= through`, oldest first, at most `max_bytes` of event text but at least one
    /// event when there is one. Blocks the calling thread (not an async one).
    pub fn read_range(&self, after: u64, through: u64, max_bytes: usize) -> Result<Vec<LogEntry>, ClusterError> {
        if through <= after {
            return Ok(Vec::new());
        }
        Ok(self.cluster.block_on(self.scan(after, through, max_bytes))?.entries)
    }

    /// The session's last event, or `None` for an empty or unknown session.
    pub fn last(&self) -> Result<Option<LogEntry>, ClusterError> {
        self.cluster.block_on(async {
            let stream = self.stream().await?;
            let message = match stream.get_last_raw_message_by_subject(&self.subject).await {
                Ok(message) => message,
                Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
                Err(error) => return Err(read_failed(error)),
            };
            let span = span_of(&self.session_id, message.sequence, &message.headers, message.payload.len())?;
            Ok(events_of(&self.session_id, &span, &message.payload)?.pop())
        })
    }

    /// Where a follower of the events after `after` starts reading the subject: the stream sequence of the message
    /// holding event `after + 1`, or, when there is none yet, the one after the subject's last message (1 for an
    /// empty subject).
    pub(crate) async fn follow_start(&self, after: u64) -> Result<u64, ClusterError> {
        let scan = self.scan(after, after + 1, 1).await?;
        Ok(match (scan.entries.is_empty(), scan.last) {
            (false, Some((span, _))) => span.stream_seq,
            (true, Some((span, _))) => span.stream_seq + 1,
            (_, None) => 1,
        })
    }

    /// A message of this session's subject read as its events: (first seq, last seq, the events).
    pub(crate) fn decode(
        &self,
        stream_seq: u64,
        headers: &async_nats::HeaderMap,
        payload: &[u8],
    ) -> Result<(u64, u64, Vec<LogEntry>), ClusterError> {
        let span = span_of(&self.session_id, stream_seq, headers, payload.len())?;
        Ok((span.first_seq, span.last_seq, events_of(&self.session_id, &span, payload)?))
    }

    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }

    pub(crate) fn subject(&self) -> &str {
        &self.subject
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Entries in the shared index (for tests of its sparseness).
    pub fn index_entries(&self) -> usize {
        self.index.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub(crate) async fn stream(&self) -> Result<Stream<()>, ClusterError> {
        if !names::is_subject_token(&self.session_id) {
            return Err(ClusterError::JetStream {
                what: "use a session's log",
                detail: format!("{:?} is not a session id (letters, digits, '-' and '_' only)", self.session_id),
            });
        }
        self.cluster
            .jetstream()
            .get_stream_no_info(names::EVENT_STREAM)
            .await
            .map_err(|error| ClusterError::JetStream { what: "open the event stream", detail: error.to_string() })
    }

    /// Reads the events `after < seq <= through` (within `max_bytes`, at least one), from the indexed message
    /// nearest before them, and the last message it read.
    pub(super) async fn scan(&self, after: u64, through: u64, max_bytes: usize) -> Result<Scan, ClusterError> {
        let stream = self.stream().await?;
        let mut start = self.index.read().unwrap_or_else(PoisonError::into_inner).floor(after + 1);
        let (mut expected_first, mut from, mut since) = match start {
            Some((first_seq, stream_seq)) => (first_seq, stream_seq, Since::ENTRY),
            None => (1, 1, Since::START),
        };
        let mut scan = Scan { entries: Vec::new(), last: None };
        let mut bytes = 0usize;
        loop {
            let message = match stream.get_first_raw_message_by_subject(&*self.subject, from).await {
                Ok(message) => message,
                Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(scan),
                Err(error) => return Err(read_failed(error)),
            };
            let span = span_of(&self.session_id, message.sequence, &message.headers, message.payload.len())?;
            if span.first_seq != expected_first && scan.last.is_none() && start.is_some() {
                // The index predates a purge of the subject (a session deleted and made again under its id): it
                // no longer describes the subject, which is read from its start instead.
                self.index.write().unwrap_or_else(PoisonError::into_inner).starts.clear();
                (expected_first, from, since, start) = (1, 1, Since::START, None);
                continue;
            }
            if span.first_seq != expected_first {
                return Err(ClusterError::Corrupt {
                    what: "a session's log",
                    detail: format!(
                        "session {}: stream message {} starts at event {} where event {expected_first} was next",
                        self.session_id, span.stream_seq, span.first_seq
                    ),
                });
            }
            self.index.write().unwrap_or_else(PoisonError::into_inner).note(&span, &mut since);
            scan.last = Some((span, since));
            expected_first = span.last_seq + 1;
            from = span.stream_seq + 1;
            if span.last_seq <= after {
                continue;
            }
            for entry in events_of(&self.session_id, &span, &message.payload)? {
                if entry.seq <= after {
                    continue;
                }
                if entry.seq > through || (!scan.entries.is_empty() && bytes + entry.len() > max_bytes) {
                    return Ok(scan);
                }
                bytes += entry.len();
                scan.entries.push(entry);
            }
            if span.last_seq >= through {
                return Ok(scan);
            }
        }
    }
}

fn read_failed(error: async_nats::jetstream::stream::LastRawMessageError) -> ClusterError {
    match error.kind() {
        LastRawMessageErrorKind::JetStream(error) => {
            ClusterError::JetStream { what: "read a session's log", detail: error.to_string() }
        }
        _ => ClusterError::Unreachable { what: "read a session's log", detail: error.to_string() },
    }
}
