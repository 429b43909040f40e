//! A replica of the session logs beyond this machine (the cluster's JetStream, `cluster/`), which every batch reaches
//! before the local file does and before anything is acknowledged.
//!
//! The file store stays what the engine serves from: replay, the projection snapshot, forks and the supervisor's
//! index read the local log as on a single node. In a cluster the replica is the authority: opening a session takes
//! it for this node (a lease) and first brings the local log in line with the replica (the events another node
//! appended, or a whole log this node never had), and each append goes to the replica first, fenced so that a node
//! that lost the session appends nothing. [`ReplicatedStore`] puts the two together behind [`EventStore`], so the
//! session actor is the same on one node and in a cluster.

use std::path::Path;
use std::sync::Arc;

use super::snapshot::PendingSnapshot;
use super::store::{EventReader, EventStore, LogEntry};
use crate::error::RuntimeError;
use crate::session_state::SessionState;

/// Why a replica refused: the engine answers clients differently for each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaFailure {
    /// The replica cannot be reached; nothing was stored.
    Unreachable,
    /// Another node hosts the session (it holds its lease).
    HostedElsewhere { node: String },
    /// This node was the session's writer and is no longer: another node appended or took the lease.
    Fenced,
    /// Anything else (a refusal, damaged data).
    Failed,
}

/// A replica's refusal, with words for the log and for `data.detail`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct ReplicaError {
    pub failure: ReplicaFailure,
    pub detail: String,
}

/// Where session logs are replicated (one per daemon).
pub trait LogReplica: Send + Sync + std::fmt::Debug + 'static {
    /// Takes the new session `session_id` for this node and stores its first event (`session_created`). Fails when
    /// the replica already holds the session.
    fn create(&self, session_id: &str, first: &LogEntry) -> Result<Box<dyn ReplicaWriter>, ReplicaError>;

    /// Takes the session in `session_dir` for this node and makes its local log hold exactly the replica's events:
    /// the ones appended elsewhere are added, a log the replica does not hold yet (made before the node joined a
    /// cluster, or copied by a fork) is stored in the replica first. Creates `session_dir` for a session this node
    /// never had. Blocking.
    fn open(&self, session_dir: &Path) -> Result<Box<dyn ReplicaWriter>, ReplicaError>;

    /// Removes a deleted session's events from the replica. Blocking.
    fn remove(&self, session_id: &str) -> Result<(), ReplicaError>;

    /// Session `session_id`'s events with `after < seq <= through`, oldest first, at most `max_bytes` of event text
    /// but at least one event when there is one, read from the replica: any node can read any session, whoever
    /// hosts it. Blocking.
    fn read_range(
        &self,
        session_id: &str,
        after: u64,
        through: u64,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, ReplicaError>;

    /// The seq of the session's last event in the replica (0 when it holds none). Blocking.
    fn last_seq(&self, session_id: &str) -> Result<u64, ReplicaError>;

    /// Follows session `session_id` from any node: `deliver` is given every event after `after` the replica stores,
    /// in order, none twice, in batches, on a thread of the replica's own (it must not block). It ends when
    /// `deliver` answers [`FollowControl::Stop`], after it is given an error (the events cannot go on in order: the
    /// follower starts again from its last event), or when the returned guard is dropped. Does not block.
    fn follow(&self, session_id: &str, after: u64, deliver: FollowDeliver) -> Result<FollowGuard, ReplicaError>;
}

/// What a follower's `deliver` says after each batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowControl {
    Continue,
    Stop,
}

/// Where a follow delivers: the next events in order, or why it ended.
pub type FollowDeliver = Box<dyn FnMut(Result<Vec<LogEntry>, ReplicaError>) -> FollowControl + Send>;

/// A running follow ([`LogReplica::follow`]); dropping it stops the follow.
pub type FollowGuard = Box<dyn Send>;

/// The one writer of a session's replicated log, held by the node that hosts the session. Dropping it gives the
/// session up (its lease).
pub trait ReplicaWriter: Send + 'static {
    /// Appends `batch` (consecutive sequences after the last). `Ok` once the replica acknowledged it (in a cluster:
    /// a quorum of servers stored it). After an error it refuses everything.
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), ReplicaError>;
}

/// A session's local file store behind its replica: an append is stored by the replica, then by the file, and
/// is durable (may be acknowledged) only when both are.
pub struct ReplicatedStore {
    replica: Box<dyn ReplicaWriter>,
    local: Box<dyn EventStore>,
    /// Set by any failure: from then on the two may disagree, and the session must be opened again (which brings
    /// the local log in line with the replica).
    failed: bool,
}

impl ReplicatedStore {
    pub fn new(replica: Box<dyn ReplicaWriter>, local: Box<dyn EventStore>) -> ReplicatedStore {
        ReplicatedStore { replica, local, failed: false }
    }
}

impl EventStore for ReplicatedStore {
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), RuntimeError> {
        if self.failed {
            return Err(RuntimeError::Replica(ReplicaError {
                failure: ReplicaFailure::Failed,
                detail: "an earlier append failed; the session must be opened again".to_owned(),
            }));
        }
        if let Err(error) = self.replica.append_batch(batch) {
            self.failed = true;
            return Err(RuntimeError::Replica(error));
        }
        let written = self.local.append_batch(batch);
        self.failed = written.is_err();
        written
    }

    fn last_seq(&self) -> u64 {
        self.local.last_seq()
    }

    fn len_bytes(&self) -> u64 {
        self.local.len_bytes()
    }

    fn reader(&self) -> Arc<dyn EventReader> {
        self.local.reader()
    }

    fn has_torn_tail(&self) -> bool {
        self.local.has_torn_tail()
    }

    fn snapshot_of_live(&self, state: &SessionState) -> Option<PendingSnapshot> {
        self.local.snapshot_of_live(state)
    }

    fn observe(&mut self, metrics: crate::metrics::Metrics) {
        self.local.observe(metrics)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use troupe_protocol::types::events::EventJson;

    use super::*;

    /// Records what reached it, and refuses once `refuse` is set.
    struct FakeReplica {
        seen: Arc<Mutex<Vec<u64>>>,
        refuse: Arc<Mutex<Option<ReplicaFailure>>>,
    }

    impl ReplicaWriter for FakeReplica {
        fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), ReplicaError> {
            if let Some(failure) = self.refuse.lock().unwrap().clone() {
                return Err(ReplicaError { failure, detail: "refused".into() });
            }
            self.seen.lock().unwrap().extend(batch.iter().map(|entry| entry.seq));
            Ok(())
        }
    }

    /// A local store that keeps the sequences it was given.
    #[derive(Default)]
    struct MemoryStore {
        seqs: Arc<Mutex<Vec<u64>>>,
    }

    struct NoReader;
    impl EventReader for NoReader {
        fn read_range(&self, _: u64, _: u64, _: usize) -> Result<Vec<LogEntry>, RuntimeError> {
            Ok(Vec::new())
        }
    }

    impl EventStore for MemoryStore {
        fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), RuntimeError> {
            self.seqs.lock().unwrap().extend(batch.iter().map(|entry| entry.seq));
            Ok(())
        }
        fn last_seq(&self) -> u64 {
            self.seqs.lock().unwrap().last().copied().unwrap_or(0)
        }
        fn len_bytes(&self) -> u64 {
            0
        }
        fn reader(&self) -> Arc<dyn EventReader> {
            Arc::new(NoReader)
        }
    }

    fn entry(seq: u64) -> LogEntry {
        LogEntry { seq, json: EventJson::from_json(format!("{{\"seq\":{seq}}}")).unwrap() }
    }

    #[test]
    fn a_batch_reaches_the_replica_first_and_a_refusal_stores_nothing_locally_ever_after() {
        let replicated = Arc::new(Mutex::new(Vec::new()));
        let refuse = Arc::new(Mutex::new(None));
        let local = MemoryStore::default();
        let local_seqs = local.seqs.clone();
        let replica = FakeReplica { seen: replicated.clone(), refuse: refuse.clone() };
        let mut store = ReplicatedStore::new(Box::new(replica), Box::new(local));

        store.append_batch(&[entry(1), entry(2)]).unwrap();
        assert_eq!(*replicated.lock().unwrap(), vec![1, 2]);
        assert_eq!(*local_seqs.lock().unwrap(), vec![1, 2]);
        assert_eq!(store.last_seq(), 2);

        *refuse.lock().unwrap() = Some(ReplicaFailure::Fenced);
        let refused = store.append_batch(&[entry(3)]).unwrap_err();
        assert!(
            matches!(&refused, RuntimeError::Replica(ReplicaError { failure: ReplicaFailure::Fenced, .. })),
            "{refused:?}"
        );
        assert_eq!(*local_seqs.lock().unwrap(), vec![1, 2], "a fenced batch must not reach the local log");

        // Even once the replica would take it again, the store stays refused: the session must be reopened.
        *refuse.lock().unwrap() = None;
        assert!(store.append_batch(&[entry(3)]).is_err());
        assert_eq!(*replicated.lock().unwrap(), vec![1, 2]);
        assert_eq!(*local_seqs.lock().unwrap(), vec![1, 2]);
    }
}
