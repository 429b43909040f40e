//! The cluster as the runtime's [`LogReplica`]: a session's lease and its JetStream log, and the local log brought in
//! line with JetStream before the session is served from it.
//!
//! Opening a session on this node (`open`):
//! 1. take the session's lease (another live node's lease refuses, naming it);
//! 2. read the session's events from JetStream;
//! 3. make the local log hold exactly those: nothing local and nothing in JetStream is an unknown session; a local
//!    log JetStream does not hold yet (written before this node joined a cluster, or a fork's copy) is stored in
//!    JetStream first; events other nodes appended are added to the local log; a local log that holds JetStream's
//!    events and more after them (a batch's local copy is written while JetStream is asked, `ReplicatedStore`, and
//!    the node stopped before the answer) has the extra events cut off, into `cluster/diverged/<session>-<ms>.jsonl`;
//!    a local log that disagrees with JetStream's (this node lost the session while writing) is moved aside, into
//!    `<data dir>/cluster/diverged/`, and rebuilt from JetStream. Nothing in a diverged log was acknowledged by this
//!    node after it lost the lease: JetStream fenced those appends, and a batch is acknowledged only once JetStream
//!    took it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use troupe_protocol::types::events::{EventJson, EventPayload};
use troupe_runtime::event_log::{
    self, Answered, FileEventStore, FollowDeliver, FollowGuard, LogEntry, LogReplica, LogWriter, ReplicaAppend,
    ReplicaError, ReplicaFailure, ReplicaWriter,
};

use troupe_runtime::session_state::SessionState;

use crate::connection::Cluster;
use crate::directory;
use crate::error::ClusterError;
use crate::follow;
use crate::lease::{self, LeaseGuard};
use crate::log::{LogReader, PendingAppend, SessionLog};

/// Bytes read to find a session's first event (its `session_created`, with the cwd).
const WORKSPACE_PROBE_BYTES: usize = 64 * 1024;
/// How long taking a lease is tried again while NATS does not answer.
const LEASE_RETRY_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);
/// Events copied into a local log (or seeded into JetStream) per batch.
const COPY_BATCH: usize = 256;

/// Sessions whose readers (and their indexes) a node keeps for reads and follows of sessions it does not host.
const KEPT_READERS: usize = 256;

/// The cluster's replica of the session logs, one per node.
#[derive(Clone, Debug)]
pub struct JetStreamReplica {
    cluster: Cluster,
    /// Readers of the sessions read lately, so that paging through a long log reads from the index's nearest
    /// message instead of the subject's first; forgotten all at once past [`KEPT_READERS`].
    readers: Arc<Mutex<HashMap<String, LogReader>>>,
}

impl JetStreamReplica {
    pub fn new(cluster: Cluster) -> JetStreamReplica {
        JetStreamReplica { cluster, readers: Arc::default() }
    }

    fn reader(&self, session_id: &str) -> LogReader {
        let mut readers = self.readers.lock();
        if let Some(reader) = readers.get(session_id) {
            return reader.clone();
        }
        if readers.len() >= KEPT_READERS {
            readers.clear();
        }
        let reader = LogReader::new(&self.cluster, session_id);
        readers.insert(session_id.to_owned(), reader.clone());
        reader
    }

    /// The node's connection to the cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

/// A session's writer on this node: its lease and its JetStream log. Dropping it gives the lease up.
struct Hosted {
    lease: LeaseGuard,
    log: SessionLog,
}

impl ReplicaWriter for Hosted {
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), ReplicaError> {
        self.start_batch(batch).wait()
    }

    fn start_batch(&mut self, batch: &[LogEntry]) -> Box<dyn ReplicaAppend + '_> {
        // JetStream fences a writer that lost the session anyway; a lease known lost refuses before asking it.
        if !self.lease.is_held() {
            let session_id = self.log.session_id().to_owned();
            return Box::new(Answered(Err(replica_error(ClusterError::LeaseLost { session_id }))));
        }
        Box::new(self.log.start_append(batch))
    }
}

impl ReplicaAppend for PendingAppend<'_> {
    fn refused(&self) -> bool {
        PendingAppend::refused(self)
    }

    fn wait(self: Box<Self>) -> Result<(), ReplicaError> {
        self.finish().map_err(replica_error)
    }
}

impl JetStreamReplica {
    /// Refuses a session whose cwd is not a directory on this machine, naming the node that hosted it: that node
    /// must come back (or the workspace be made reachable here, as shared storage) before it can be written.
    fn check_workspace_here(&self, session_id: &str) -> Result<(), ReplicaError> {
        let reader = crate::log::LogReader::new(&self.cluster, session_id);
        let first = reader.read_range(0, 1, WORKSPACE_PROBE_BYTES).map_err(replica_error)?;
        let Some(created) = first.first().and_then(|entry| entry.json.decode().ok()) else {
            // Nothing to check (an unknown session): opening answers for it.
            return Ok(());
        };
        let EventPayload::SessionCreated { cwd, .. } = &created.payload else { return Ok(()) };
        if Path::new(cwd).is_dir() {
            return Ok(());
        }
        // The node that last hosted it, as the directory says (the lease is this node's now, until it is dropped).
        let entry = self.cluster.block_on(directory::get(&self.cluster, session_id)).ok().flatten();
        let node = entry.map_or_else(|| "unknown".to_owned(), |entry| entry.owner);
        Err(ReplicaError {
            failure: ReplicaFailure::HostedElsewhere { node: node.clone() },
            detail: format!(
                "session {session_id}'s workspace {cwd} is not on this machine; node {node} must come back to write it"
            ),
        })
    }
}

impl LogReplica for JetStreamReplica {
    fn create(&self, session_id: &str, first: &LogEntry) -> Result<Box<dyn ReplicaWriter>, ReplicaError> {
        let lease = acquire_lease(&self.cluster, session_id)?;
        let log = SessionLog::create(&self.cluster, session_id, first).map_err(replica_error)?;
        // Listed by every node before the creation is acknowledged: a node that dies a moment later leaves a session
        // the others know of and can take over, not one only its events know.
        let meta = first
            .json
            .decode()
            .ok()
            .and_then(|event| SessionState::created(&event).ok())
            .map(|state| state.meta())
            .ok_or_else(|| failed(format!("the first event of session {session_id} is not its session_created")))?;
        self.cluster
            .block_on(directory::publish(&self.cluster, session_id, self.cluster.node(), &meta))
            .map_err(replica_error)?;
        Ok(Box::new(Hosted { lease, log }))
    }

    fn open(&self, session_dir: &Path) -> Result<Box<dyn ReplicaWriter>, ReplicaError> {
        let session_id = session_id_of(session_dir)?;
        // The lease first: while another node hosts the session (the common case of a request sent on to it),
        // that refusal costs one read.
        let lease = acquire_lease(&self.cluster, &session_id)?;
        if !session_dir.exists() {
            // A session this node never hosted: it takes it only where the session's workspace is (dropping the
            // lease gives it back at once otherwise).
            self.check_workspace_here(&session_id)?;
        }
        let (log, replicated) = SessionLog::open(&self.cluster, &session_id).map_err(replica_error)?;
        let log = align_local(&self.cluster, &session_id, session_dir, log, &replicated)?;
        Ok(Box::new(Hosted { lease, log }))
    }

    fn remove(&self, session_id: &str) -> Result<(), ReplicaError> {
        crate::log::purge(&self.cluster, session_id).map_err(replica_error)
    }

    fn read_range(
        &self,
        session_id: &str,
        after: u64,
        through: u64,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, ReplicaError> {
        self.reader(session_id).read_range(after, through, max_bytes).map_err(replica_error)
    }

    fn last_seq(&self, session_id: &str) -> Result<u64, ReplicaError> {
        Ok(self.reader(session_id).last().map_err(replica_error)?.map_or(0, |entry| entry.seq))
    }

    fn follow(&self, session_id: &str, after: u64, deliver: FollowDeliver) -> Result<FollowGuard, ReplicaError> {
        if !crate::names::is_subject_token(session_id) {
            return Err(failed(format!("{session_id:?} is not a session id")));
        }
        Ok(follow::follow(self.reader(session_id), after, deliver))
    }
}

/// Makes the local log in `session_dir` hold exactly `replicated` (JetStream's events), or seeds JetStream from the
/// local log when JetStream holds none. Returns the JetStream writer positioned after the last event.
fn align_local(
    cluster: &Cluster,
    session_id: &str,
    session_dir: &Path,
    log: SessionLog,
    replicated: &[LogEntry],
) -> Result<SessionLog, ReplicaError> {
    let local = match event_log::load(session_dir) {
        Ok(loaded) => Some(Local {
            whole: loaded.skipped.is_empty() && !event_log::EventStore::has_torn_tail(&loaded.store),
            events: loaded
                .events
                .into_iter()
                .map(|event| LogEntry { seq: event.event.seq, json: event.json })
                .collect(),
            store: loaded.store,
        }),
        Err(troupe_runtime::error::RuntimeError::SessionNotFound { .. }) => None,
        Err(error) => return Err(failed(format!("read the local log of session {session_id}: {error}"))),
    };
    match (local, replicated.is_empty()) {
        (None, true) => Err(failed(format!("session {session_id} is neither in JetStream nor on this node"))),
        (Some(local), true) => {
            // A log from before the cluster, or a fork's copy: JetStream takes it whole before anything is served.
            let Some((first, rest)) = local.events.split_first() else {
                return Err(failed(format!("the local log of session {session_id} holds no event")));
            };
            let mut log = SessionLog::create(cluster, session_id, first).map_err(replica_error)?;
            for batch in rest.chunks(COPY_BATCH) {
                log.append_batch(batch).map_err(replica_error)?;
            }
            Ok(log)
        }
        (None, false) => {
            write_local(session_dir, replicated)?;
            Ok(log)
        }
        (Some(mut local), false) => {
            let agree = local
                .events
                .iter()
                .zip(replicated)
                .all(|(ours, theirs)| ours.seq == theirs.seq && ours.json.as_str() == theirs.json.as_str());
            let held = local.events.len();
            if agree && held <= replicated.len() {
                for batch in replicated[held..].chunks(COPY_BATCH) {
                    event_log::EventStore::append_batch(&mut local.store, batch)
                        .map_err(|error| failed(error.to_string()))?;
                }
            } else if agree && local.whole {
                // JetStream's events, then some it never took: a batch whose local copy was written while JetStream
                // was asked, when the node stopped before the answer (or the cut after a refusal failed). None of
                // them was acknowledged or published by this node; they are cut off (and kept aside), and the
                // session's other files stay.
                let kept = cut_local(session_dir, local.store, replicated.len())?;
                tracing::warn!(
                    session_id,
                    cut = held - replicated.len(),
                    kept = %kept.display(),
                    "the local log held events JetStream does not; they were cut off and kept aside"
                );
            } else {
                drop(local);
                let kept = move_aside(session_dir)?;
                tracing::warn!(
                    session_id, kept = %kept.display(),
                    "the local log disagreed with JetStream's; it was moved aside and rebuilt from JetStream"
                );
                write_local(session_dir, replicated)?;
            }
            Ok(log)
        }
    }
}

/// The local log as [`align_local`] found it.
struct Local {
    events: Vec<LogEntry>,
    store: FileEventStore,
    /// No line skipped and no torn tail: every line that is not blank is one of `events`, in order.
    whole: bool,
}

/// Cuts the session's local log (opened as `store`, every line that is not blank an event) after its first `keep`
/// events; the lines cut off are kept first in `<data dir>/cluster/diverged/<session>-<ms>.jsonl` (JetStream is the
/// authority, but the cut lines may be the only copy left of events a JetStream of one replica lost with its
/// machine). Returns that file.
fn cut_local(session_dir: &Path, mut store: FileEventStore, keep: usize) -> Result<PathBuf, ReplicaError> {
    use std::io::Write;
    let path = event_log::log_path(session_dir);
    let bytes = std::fs::read(&path).map_err(|error| failed(format!("read {}: {error}", path.display())))?;
    // Where the `keep`-th event's line ends, counting lines as the loader does (a blank line holds no event).
    let mut events = 0;
    let mut len = 0;
    for line in bytes.split_inclusive(|&byte| byte == b'\n') {
        if events == keep {
            break;
        }
        len += line.len();
        if !line.trim_ascii().is_empty() {
            events += 1;
        }
    }
    if events < keep {
        return Err(failed(format!("{} holds fewer than {keep} events", path.display())));
    }
    let (folder, name) = diverged_name(session_dir)?;
    let kept = folder.join(format!("{name}.jsonl"));
    let mut file =
        std::fs::File::create(&kept).map_err(|error| failed(format!("create {}: {error}", kept.display())))?;
    file.write_all(&bytes[len..])
        .and_then(|()| file.sync_all())
        .map_err(|error| failed(format!("write {}: {error}", kept.display())))?;
    event_log::EventStore::discard_from(&mut store, len as u64).map_err(|error| failed(error.to_string()))?;
    Ok(kept)
}

/// Creates the session's directory and its local log holding `events`.
fn write_local(session_dir: &Path, events: &[LogEntry]) -> Result<(), ReplicaError> {
    let Some((first, rest)) = events.split_first() else { return Ok(()) };
    let mut writer = LogWriter::create(session_dir, &first.json).map_err(|error| failed(error.to_string()))?;
    for batch in rest.chunks(COPY_BATCH) {
        let texts: Vec<EventJson> = batch.iter().map(|entry| entry.json.clone()).collect();
        writer.append_batch(&texts).map_err(|error| failed(error.to_string()))?;
    }
    Ok(())
}

/// Moves a diverged session directory out of the sessions folder, into `<data dir>/cluster/diverged/`.
fn move_aside(session_dir: &Path) -> Result<PathBuf, ReplicaError> {
    let (folder, name) = diverged_name(session_dir)?;
    let kept = folder.join(name);
    std::fs::rename(session_dir, &kept)
        .map_err(|error| failed(format!("move {} aside: {error}", session_dir.display())))?;
    Ok(kept)
}

/// `<data dir>/cluster/diverged/` (created), and `<session>-<ms>`, the name of what is kept there of a session.
fn diverged_name(session_dir: &Path) -> Result<(PathBuf, String), ReplicaError> {
    let data_dir = session_dir.parent().and_then(Path::parent).unwrap_or(session_dir);
    let folder = data_dir.join("cluster").join("diverged");
    std::fs::create_dir_all(&folder).map_err(|error| failed(format!("create {}: {error}", folder.display())))?;
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis());
    let name = session_dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    Ok((folder, format!("{name}-{millis}")))
}

/// Takes `session_id`'s lease, trying again for a few seconds while NATS cannot answer or JetStream refuses for now
/// (a server of the cluster went down and its buckets elect new leaders); another node's lease refuses at once.
fn acquire_lease(cluster: &Cluster, session_id: &str) -> Result<LeaseGuard, ReplicaError> {
    let deadline = std::time::Instant::now() + LEASE_RETRY_WITHIN;
    loop {
        match lease::acquire_blocking(cluster, session_id) {
            Err(error @ (ClusterError::Unreachable { .. } | ClusterError::JetStream { .. }))
                if std::time::Instant::now() < deadline =>
            {
                tracing::debug!(session_id, %error, "taking a lease: NATS did not answer; trying again");
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            taken => return taken.map_err(replica_error),
        }
    }
}

fn session_id_of(session_dir: &Path) -> Result<String, ReplicaError> {
    session_dir
        .file_name()
        .and_then(|name| name.to_str())
        .filter(|name| crate::names::is_subject_token(name))
        .map(str::to_owned)
        .ok_or_else(|| failed(format!("{} names no session", session_dir.display())))
}

fn failed(detail: String) -> ReplicaError {
    ReplicaError { failure: ReplicaFailure::Failed, detail }
}

/// The runtime's kind of a cluster failure, for the engine's typed answer.
pub fn replica_error(error: ClusterError) -> ReplicaError {
    error.into_replica_error()
}
