//! A replica of the session logs beyond this machine (the cluster's JetStream, `cluster/`), which every batch reaches
//! before anything of it is acknowledged or published.
//!
//! The file store stays what the engine serves from: replay, the projection snapshot, forks and the supervisor's
//! index read the local log as on a single node. In a cluster the replica is the authority: opening a session takes
//! it for this node (a lease) and first brings the local log in line with the replica (the events another node
//! appended, or a whole log this node never had), and each append goes to the replica, fenced so that a node that
//! lost the session appends nothing, while the local file takes its copy. [`ReplicatedStore`] puts the two together behind [`EventStore`], so the
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

    /// Starts appending `batch` as [`append_batch`](Self::append_batch) does and returns without waiting for the
    /// replica's answer, which [`ReplicaAppend::wait`] gives; the caller writes its local copy meanwhile. A replica
    /// that cannot do that appends at once (the default).
    fn start_batch(&mut self, batch: &[LogEntry]) -> Box<dyn ReplicaAppend + '_> {
        Box::new(Answered(self.append_batch(batch)))
    }
}

/// An append a replica is storing ([`ReplicaWriter::start_batch`]).
pub trait ReplicaAppend {
    /// Whether the replica refused the batch already, before sending anything (a lease known lost, an earlier
    /// failure): the local copy is then not written at all.
    fn refused(&self) -> bool;
    /// Blocks until the replica acknowledged the batch or refused it.
    fn wait(self: Box<Self>) -> Result<(), ReplicaError>;
}

/// An append whose answer is known already.
pub struct Answered(pub Result<(), ReplicaError>);

impl ReplicaAppend for Answered {
    fn refused(&self) -> bool {
        self.0.is_err()
    }

    fn wait(self: Box<Self>) -> Result<(), ReplicaError> {
        self.0
    }
}

/// A session's local file store behind its replica: an append is stored by the replica and by the file at the
/// same time (the local write and its `fdatasync` while the replica's acknowledgement is on its way), and is durable
/// (may be acknowledged) only when both are. A batch the replica refused is cut off the local log again, so that the
/// local log stays a prefix of the replica's; if that fails too (or the node dies between the two), the session's
/// next opening finds local events after the replica's last and cuts them off (`LogReplica::open`). Nothing of such
/// a batch was acknowledged, nor published: the session publishes a batch only when this store returns `Ok`.
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
        let len_before = self.local.len_bytes();
        let replicated = self.replica.start_batch(batch);
        if replicated.refused() {
            self.failed = true;
            return replicated.wait().map_err(RuntimeError::Replica);
        }
        let written = self.local.append_batch(batch);
        match (replicated.wait(), written) {
            (Ok(()), written) => {
                self.failed = written.is_err();
                written
            }
            (Err(refused), written) => {
                self.failed = true;
                if written.is_ok() {
                    match self.local.discard_from(len_before) {
                        Ok(true) => {}
                        Ok(false) => tracing::warn!(
                            "the local copy of a batch the replica refused stays; the session's next opening cuts it off"
                        ),
                        Err(error) => tracing::warn!(
                            %error,
                            "the local copy of a batch the replica refused could not be cut off; the session's next \
                             opening cuts it off"
                        ),
                    }
                }
                Err(RuntimeError::Replica(refused))
            }
        }
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
        /// One "byte" an event, so that a length is a count of events.
        fn len_bytes(&self) -> u64 {
            self.seqs.lock().unwrap().len() as u64
        }
        fn reader(&self) -> Arc<dyn EventReader> {
            Arc::new(NoReader)
        }
        fn discard_from(&mut self, len: u64) -> Result<bool, RuntimeError> {
            self.seqs.lock().unwrap().truncate(len as usize);
            Ok(true)
        }
    }

    /// A replica whose answer comes when it is waited for, as the cluster's does: it notes what the local store
    /// held at that moment, then takes the batch or refuses it.
    struct SlowReplica {
        local_seqs: Arc<Mutex<Vec<u64>>>,
        local_when_waited: Arc<Mutex<Vec<Vec<u64>>>>,
        refuse: Arc<Mutex<Option<ReplicaFailure>>>,
    }

    struct SlowAppend<'replica> {
        replica: &'replica SlowReplica,
    }

    impl ReplicaAppend for SlowAppend<'_> {
        fn refused(&self) -> bool {
            false
        }
        fn wait(self: Box<Self>) -> Result<(), ReplicaError> {
            let local = self.replica.local_seqs.lock().unwrap().clone();
            self.replica.local_when_waited.lock().unwrap().push(local);
            match self.replica.refuse.lock().unwrap().clone() {
                Some(failure) => Err(ReplicaError { failure, detail: "refused".into() }),
                None => Ok(()),
            }
        }
    }

    impl ReplicaWriter for SlowReplica {
        fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), ReplicaError> {
            self.start_batch(batch).wait()
        }
        fn start_batch(&mut self, _batch: &[LogEntry]) -> Box<dyn ReplicaAppend + '_> {
            Box::new(SlowAppend { replica: self })
        }
    }

    fn entry(seq: u64) -> LogEntry {
        LogEntry { seq, json: EventJson::from_json(format!("{{\"seq\":{seq}}}")).unwrap() }
    }

    #[test]
    fn a_refusal_known_at_once_stores_nothing_locally_ever_after() {
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

    #[test]
    fn the_local_copy_is_written_while_the_replica_answers_and_cut_off_when_it_refuses() {
        let local = MemoryStore::default();
        let local_seqs = local.seqs.clone();
        let local_when_waited = Arc::new(Mutex::new(Vec::new()));
        let refuse = Arc::new(Mutex::new(None));
        let replica = SlowReplica {
            local_seqs: local_seqs.clone(),
            local_when_waited: local_when_waited.clone(),
            refuse: refuse.clone(),
        };
        let mut store = ReplicatedStore::new(Box::new(replica), Box::new(local));

        store.append_batch(&[entry(1), entry(2)]).unwrap();
        // The local copy was durable before the replica's answer was waited for: the two overlap.
        assert_eq!(*local_when_waited.lock().unwrap(), vec![vec![1, 2]]);

        *refuse.lock().unwrap() = Some(ReplicaFailure::Unreachable);
        let refused = store.append_batch(&[entry(3), entry(4)]).unwrap_err();
        assert!(
            matches!(&refused, RuntimeError::Replica(ReplicaError { failure: ReplicaFailure::Unreachable, .. })),
            "{refused:?}"
        );
        assert_eq!(
            local_when_waited.lock().unwrap()[1],
            vec![1, 2, 3, 4],
            "written locally while the replica answered"
        );
        assert_eq!(*local_seqs.lock().unwrap(), vec![1, 2], "a refused batch is cut off the local log again");

        *refuse.lock().unwrap() = None;
        assert!(store.append_batch(&[entry(3)]).is_err(), "a store whose replica refused stays refused");
        assert_eq!(*local_seqs.lock().unwrap(), vec![1, 2]);
    }
}
