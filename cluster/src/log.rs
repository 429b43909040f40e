//! A session's event log in JetStream: the subject `troupe.events.<session id>` of the stream
//! [`crate::names::EVENT_STREAM`], written by one node at a time and read by any.
//!
//! Each appended batch is one message (several only when it exceeds the server's `max_payload`), which JetStream
//! stores whole or not at all: the payload is the events' stored JSON lines, the headers their first and last
//! sequence ([`format`]). A batch is published with `Nats-Expected-Last-Subject-Sequence` = the stream sequence of
//! the writer's previous message on the subject (0 for a new session: JetStream 2.9 accepts 0 when the subject has
//! no message, and refuses it once it has one), so two writers can never both append after the same event: the
//! second is refused and learns it is [fenced](ClusterError::Fenced). An append returns once JetStream acknowledged
//! it, that is once a quorum of the stream's replicas stored it ([`publish`]).
//!
//! The calls are synchronous, for the log writer threads and blocking tasks; they run on the cluster's runtime
//! through [`Cluster::block_on`] and must not be called on an async thread. An append can also be started and
//! finished apart ([`SessionLog::start_append`]): its messages go out from a task of that runtime meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, PoisonError};

use troupe_runtime::event_log::LogEntry;

use crate::connection::Cluster;
use crate::error::ClusterError;

mod format;
mod publish;
mod reader;

pub use publish::APPEND_DEADLINE;
use reader::Since;
pub use reader::{INDEX_STRIDE_BYTES, INDEX_STRIDE_MESSAGES, LogReader};

/// The writer of one session's log (the only one while the fence holds). After any failed append it refuses
/// every later one: what JetStream holds is then only known by reading it again ([`SessionLog::open`]).
#[derive(Debug)]
pub struct SessionLog {
    reader: LogReader,
    /// Unique to this writer, part of every message id it sends.
    writer_id: String,
    last_seq: u64,
    /// The stream sequence of the subject's last message, as this writer knows it: the fence of its next append.
    last_stream_seq: u64,
    since: Since,
    failed: Option<Failure>,
}

#[derive(Debug)]
enum Failure {
    Fenced,
    Other(String),
}

impl SessionLog {
    /// Appends `first` (seq 1) as the first event of the new session `session_id`. Refused, with nothing stored,
    /// when the session's subject already holds events.
    pub fn create(cluster: &Cluster, session_id: &str, first: &LogEntry) -> Result<SessionLog, ClusterError> {
        SessionLog::create_with(cluster, session_id, std::slice::from_ref(first))
    }

    /// Reads the whole subject and returns the writer positioned after it, with every event in order.
    pub fn open(cluster: &Cluster, session_id: &str) -> Result<(SessionLog, Vec<LogEntry>), ClusterError> {
        let mut log = SessionLog::fresh(cluster, session_id);
        let scan = cluster.block_on(log.reader.scan(0, u64::MAX, usize::MAX))?;
        if let Some((span, since)) = scan.last {
            log.last_seq = span.last_seq;
            log.last_stream_seq = span.stream_seq;
            log.since = since;
        }
        Ok((log, scan.entries))
    }

    /// Appends `batch` (consecutive sequences from `last_seq() + 1`); when it returns `Ok`, JetStream has every
    /// event of it. `Fenced` when another writer appended since this one last did (nothing of `batch` is stored
    /// then); `Unreachable` when NATS did not acknowledge within [`APPEND_DEADLINE`] (the batch may still land).
    pub fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), ClusterError> {
        self.start_append(batch).finish()
    }

    /// Starts appending `batch` as [`append_batch`](Self::append_batch) does, and returns at once: its messages are
    /// published by a task of the cluster's runtime while the caller does something else (the replicated store writes
    /// its local copy meanwhile); [`PendingAppend::finish`] waits for their acknowledgements, with the same outcome.
    pub fn start_append(&mut self, batch: &[LogEntry]) -> PendingAppend<'_> {
        if let Some(failure) = &self.failed {
            let refused = match failure {
                Failure::Fenced => ClusterError::Fenced { session_id: self.reader.session_id.to_string() },
                Failure::Other(failure) => ClusterError::JetStream {
                    what: "append to a session's log",
                    detail: format!(
                        "an earlier append failed ({failure}); the session must be opened again from JetStream"
                    ),
                },
            };
            return PendingAppend { log: self, task: Task::Refused(refused) };
        }
        if batch.is_empty() {
            return PendingAppend { log: self, task: Task::Nothing };
        }
        let cluster = self.reader.cluster.clone();
        let max_payload = match cluster.client().server_info().max_payload {
            0 => 1024 * 1024,
            max_payload => max_payload,
        };
        let messages = match format::pack(
            &self.reader.session_id,
            self.last_seq,
            batch,
            format::payload_budget(max_payload),
            max_payload,
        ) {
            Ok(messages) => messages,
            Err(error) => return PendingAppend { log: self, task: Task::Refused(error) },
        };
        let (reader, writer_id, expected) = (self.reader.clone(), self.writer_id.clone(), self.last_stream_seq);
        let task = cluster.handle().spawn(publish_all(reader, writer_id, expected, messages));
        PendingAppend { log: self, task: Task::Publishing(task) }
    }

    /// The sequence of the last event JetStream acknowledged to this writer (or held when it was opened).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn session_id(&self) -> &str {
        &self.reader.session_id
    }

    /// A reader of this session's events, sharing the writer's index.
    pub fn reader(&self) -> LogReader {
        self.reader.clone()
    }

    fn fresh(cluster: &Cluster, session_id: &str) -> SessionLog {
        SessionLog {
            reader: LogReader::new(cluster, session_id),
            writer_id: new_writer_id(cluster.node()),
            last_seq: 0,
            last_stream_seq: 0,
            since: Since::START,
            failed: None,
        }
    }

    /// Appends `events` (from seq 1) to the empty subject of `session_id`.
    fn create_with(cluster: &Cluster, session_id: &str, events: &[LogEntry]) -> Result<SessionLog, ClusterError> {
        let mut log = SessionLog::fresh(cluster, session_id);
        match log.append_batch(events) {
            Ok(()) => Ok(log),
            Err(ClusterError::Fenced { .. }) if log.last_seq == 0 => Err(ClusterError::JetStream {
                what: "create a session's log",
                detail: format!("session {session_id} already exists: its subject in NATS holds events"),
            }),
            Err(error) => Err(error),
        }
    }
}

/// An append on its way to JetStream ([`SessionLog::start_append`]); it holds the writer until it is finished.
#[must_use = "an append's outcome is known only once it is finished"]
pub struct PendingAppend<'log> {
    log: &'log mut SessionLog,
    task: Task,
}

enum Task {
    /// An empty batch: nothing to send.
    Nothing,
    /// Refused before anything was sent.
    Refused(ClusterError),
    Publishing(tokio::task::JoinHandle<Published>),
}

/// What the publishing task did: the messages JetStream stored, in order, and how it ended.
struct Published {
    stored: Vec<format::MessageSpan>,
    outcome: Result<(), ClusterError>,
}

impl PendingAppend<'_> {
    /// Whether the append was refused before anything was sent (the writer had failed already, or the batch does
    /// not continue the log).
    pub fn refused(&self) -> bool {
        matches!(self.task, Task::Refused(_))
    }

    /// Waits until JetStream acknowledged every message of the batch, or refused one (blocking: not on an async
    /// thread). The writer then knows where the subject ends; after a failure it refuses every later append.
    pub fn finish(self) -> Result<(), ClusterError> {
        let PendingAppend { log, task } = self;
        let published = match task {
            Task::Nothing => return Ok(()),
            Task::Refused(error) => Published { stored: Vec::new(), outcome: Err(error) },
            Task::Publishing(task) => log.reader.cluster.block_on(task).unwrap_or_else(|error| Published {
                stored: Vec::new(),
                outcome: Err(ClusterError::JetStream {
                    what: "append to a session's log",
                    detail: format!("the publishing task failed: {error}"),
                }),
            }),
        };
        for span in &published.stored {
            log.reader.index.write().unwrap_or_else(PoisonError::into_inner).note(span, &mut log.since);
            log.last_seq = span.last_seq;
            log.last_stream_seq = span.stream_seq;
        }
        if let Err(error) = &published.outcome {
            log.failed = Some(match error {
                ClusterError::Fenced { .. } => Failure::Fenced,
                other => Failure::Other(other.to_string()),
            });
        }
        published.outcome
    }
}

/// Publishes `messages` in order, each fenced on the stream sequence of the one before (`expected` for the first).
async fn publish_all(
    reader: LogReader,
    writer_id: String,
    mut expected: u64,
    messages: Vec<format::Outgoing>,
) -> Published {
    let mut stored = Vec::with_capacity(messages.len());
    let stream = match reader.stream().await {
        Ok(stream) => stream,
        Err(error) => return Published { stored, outcome: Err(error) },
    };
    for message in &messages {
        let msg_id = format!("{}:{}:{writer_id}", reader.session_id, message.first_seq);
        let out = publish::build(message, &msg_id, expected);
        match publish::fenced(&reader.cluster, &stream, &reader.session_id, &reader.subject, out, &msg_id).await {
            Ok(stream_seq) => {
                stored.push(format::MessageSpan {
                    stream_seq,
                    first_seq: message.first_seq,
                    last_seq: message.last_seq,
                    len: message.payload.len(),
                });
                expected = stream_seq;
            }
            Err(error) => return Published { stored, outcome: Err(error) },
        }
    }
    Published { stored, outcome: Ok(()) }
}

/// Removes every event of `session_id` (the session is deleted): purges its subject.
pub fn purge(cluster: &Cluster, session_id: &str) -> Result<(), ClusterError> {
    let reader = LogReader::new(cluster, session_id);
    cluster.block_on(async {
        let stream = reader.stream().await?;
        stream.purge().filter(&*reader.subject).await.map(|_| ()).map_err(|error| ClusterError::JetStream {
            what: "purge a session's log",
            detail: format!("session {session_id}: {error}"),
        })
    })
}

/// A writer id no other writer has had: the node, this process's start and a count.
fn new_writer_id(node: &str) -> String {
    static STARTED: OnceLock<u128> = OnceLock::new();
    static WRITERS: AtomicU64 = AtomicU64::new(0);
    let started = STARTED.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|since| since.as_nanos()).unwrap_or(0)
    });
    format!("{node}.{}.{started}.{}", std::process::id(), WRITERS.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests;
