//! Session leases: one writer per session, cluster-wide. The node that hosts a session's workspace holds its lease,
//! a record in [`names::LEASE_BUCKET`] under the session id, and renews it every third of its ttl by
//! compare-and-set at the revision it last wrote; another node takes the lease only once it has expired.
//!
//! The lease is how nodes agree on who should write; it is not what keeps two writers apart. The session log is
//! appended with the expected last subject sequence, so a node that still believes it holds a lease it lost
//! appends nothing (it is fenced). A wrong judgement of expiry therefore costs availability (a lease taken too
//! early makes the old holder stop; one taken too late delays a takeover), never the log.
//!
//! **Expiry across machines' clocks.** A lease record carries its holder's ttl. Another node judges it expired when
//! the *server's* timestamp of the entry (assigned by the stream leader when it stored the last renewal) plus the
//! ttl plus [`CLOCK_MARGIN`] is behind its own wall clock. Only two clocks meet there, the server's and the reader's
//! (the holder's never counts: `renewed_unix_ms` is for people), and a live holder's entry is never older than
//! about ttl/3 plus a round trip, so a reader whose clock runs ahead of the server's takes a live lease only if it
//! is ahead by more than about two thirds of the ttl plus the margin. Its failure modes:
//! - a reader's clock ahead by that much: it takes live leases; each old holder notices at its next renewal (the
//!   revision moved) and stops, and the log fences anything in between;
//! - a reader's clock behind the server's: it sees expired leases late, by its lag. [`acquire_waiting`] bounds
//!   that: a revision it has watched stay unchanged for the ttl plus the margin by its own monotonic clock is
//!   expired whatever the clocks say, since a live holder would have renewed it three times;
//! - servers of a NATS cluster whose clocks disagree: the timestamp comes from whichever is the stream leader, so
//!   a leader change mid-lease shifts an entry's apparent age by their difference; same cases as above.
//!
//! The holder itself uses only its monotonic clock: it counts the lease as its own until one ttl after it *sent*
//! its last successful renewal, earlier than the server stored it, so it stops before anyone else may take over
//! (the margin covers the rest). [`LeaseGuard::is_held`] checks that deadline on every call, so even a renewal
//! task starved of the runtime cannot make it answer true too long.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::kv::{Record, age, bucket, duration_ms, entry, now_unix_ms};
use crate::names;

mod guard;
pub use guard::LeaseGuard;

/// Slack given to clock differences between the server that timestamps a lease and the node that judges it.
pub const CLOCK_MARGIN: Duration = Duration::from_millis(500);
/// How often [`acquire_waiting`] looks at a lease it waits for (a released lease is taken within this).
const WAIT_POLL: Duration = Duration::from_millis(200);
/// How many times an acquisition re-reads a lease that changed under it before giving up.
const ATTEMPTS: usize = 4;

/// A lease as stored: JSON in the bucket.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct LeaseRecord {
    pub node: String,
    /// Random per acquisition: tells two acquisitions by the same node apart (a restarted node).
    pub holder: u64,
    pub ttl_ms: u64,
    /// The holder's wall clock at its last renewal, for people; expiry is judged by the server's timestamp.
    pub renewed_unix_ms: u64,
}

/// Who holds a session's lease, as another node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    pub node: String,
    pub holder: u64,
    pub revision: u64,
    pub ttl: Duration,
    /// How long until this node would take the lease over unless it is renewed; `None`: it has expired.
    pub expires_in: Option<Duration>,
}

impl LeaseInfo {
    pub fn is_expired(&self) -> bool {
        self.expires_in.is_none()
    }

    fn of(record: &Record) -> Result<Option<LeaseInfo>, ClusterError> {
        if record.removed {
            return Ok(None);
        }
        let lease: LeaseRecord = serde_json::from_slice(&record.value).map_err(|error| ClusterError::Corrupt {
            what: "a session lease",
            detail: format!("{}: {error}", record.key),
        })?;
        let ttl = Duration::from_millis(lease.ttl_ms);
        let expires_in = (ttl + CLOCK_MARGIN).checked_sub(age(record)).filter(|left| !left.is_zero());
        Ok(Some(LeaseInfo { node: lease.node, holder: lease.holder, revision: record.revision, ttl, expires_in }))
    }

    fn held_error(self, session_id: &str) -> ClusterError {
        ClusterError::LeaseHeld {
            session_id: session_id.to_owned(),
            node: self.node,
            remaining: self.expires_in.unwrap_or_default(),
        }
    }
}

/// Who holds `session_id`'s lease now, for routing a request to it; `None` when nobody does (never held, or
/// released).
pub async fn holder(cluster: &Cluster, session_id: &str) -> Result<Option<LeaseInfo>, ClusterError> {
    let store = leases(cluster, session_id).await?;
    match entry(&store, session_id).await? {
        Some(record) => LeaseInfo::of(&record),
        None => Ok(None),
    }
}

/// Takes `session_id`'s lease for this node: when nobody holds it, when this node holds it (a restart of this
/// node, or a second acquisition here: the earlier guard then loses it), or when it has expired. Fails with
/// [`ClusterError::LeaseHeld`] naming the node when a live other node holds it.
pub async fn acquire(cluster: &Cluster, session_id: &str) -> Result<LeaseGuard, ClusterError> {
    let store = leases(cluster, session_id).await?;
    try_acquire(cluster, &store, session_id, None).await?.map_err(|info| info.held_error(session_id))
}

/// [`acquire`] for a synchronous caller (not on an async thread): runs it on the cluster's runtime.
pub fn acquire_blocking(cluster: &Cluster, session_id: &str) -> Result<LeaseGuard, ClusterError> {
    cluster.block_on(acquire(cluster, session_id))
}

/// [`acquire`], waiting up to `max_wait` for a lease held by another node to be released or to expire (a client
/// writes to a session whose node died). Besides the server's timestamp, a lease whose revision this call saw stay
/// the same for its ttl plus [`CLOCK_MARGIN`] counts as expired, whatever the clocks say.
pub async fn acquire_waiting(
    cluster: &Cluster,
    session_id: &str,
    max_wait: Duration,
) -> Result<LeaseGuard, ClusterError> {
    let deadline = Instant::now() + max_wait;
    let store = leases(cluster, session_id).await?;
    // The revision last seen, since when, and its ttl.
    let mut watched: Option<(u64, Instant, Duration)> = None;
    loop {
        let stale =
            watched.filter(|(_, since, ttl)| since.elapsed() >= *ttl + CLOCK_MARGIN).map(|(revision, _, _)| revision);
        let info = match try_acquire(cluster, &store, session_id, stale).await? {
            Ok(guard) => return Ok(guard),
            Err(info) => info,
        };
        if watched.is_none_or(|(revision, _, _)| revision != info.revision) {
            watched = Some((info.revision, Instant::now(), info.ttl));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(info.held_error(session_id));
        }
        let pause = WAIT_POLL.min(deadline - now).min(info.expires_in.unwrap_or(WAIT_POLL));
        tokio::time::sleep(pause).await;
    }
}

/// Reads the lease and takes it by compare-and-set at the revision read, when it may; `Ok(Err(info))` when a live
/// other node holds it. `stale` is a revision the caller knows to be expired.
async fn try_acquire(
    cluster: &Cluster,
    store: &kv::Store,
    session_id: &str,
    stale: Option<u64>,
) -> Result<Result<LeaseGuard, LeaseInfo>, ClusterError> {
    let ttl = cluster.settings().lease_ttl;
    let mut last_seen = None;
    for _ in 0..ATTEMPTS {
        let current = entry(store, session_id).await?;
        let expected = match &current {
            None => 0,
            Some(record) => match LeaseInfo::of(record)? {
                None => record.revision,
                Some(info) if info.node == cluster.node() || info.is_expired() || stale == Some(info.revision) => {
                    record.revision
                }
                Some(info) => return Ok(Err(info)),
            },
        };
        let lease = LeaseRecord {
            node: cluster.node().to_owned(),
            holder: random_holder(),
            ttl_ms: duration_ms(ttl),
            renewed_unix_ms: now_unix_ms(),
        };
        let sent = Instant::now();
        match write(store, session_id, &lease, expected).await {
            Ok(revision) => {
                return Ok(Ok(LeaseGuard::start(cluster, store.clone(), session_id, lease, revision, sent)));
            }
            // Another node wrote in between: look again.
            Err(Write::Moved) => last_seen = current.map(|record| record.revision),
            Err(Write::Failed(error)) => return Err(error),
        }
    }
    Err(ClusterError::JetStream {
        what: "take a session lease",
        detail: format!(
            "session {session_id}'s lease changed {ATTEMPTS} times while this node tried to take it (last at revision \
             {last_seen:?})"
        ),
    })
}

async fn leases(cluster: &Cluster, session_id: &str) -> Result<kv::Store, ClusterError> {
    if !names::is_subject_token(session_id) {
        return Err(ClusterError::Settings(format!("{session_id:?} cannot be a session id in NATS")));
    }
    bucket(cluster, names::LEASE_BUCKET).await
}

pub(crate) enum Write {
    /// The key's revision is not the one expected.
    Moved,
    Failed(ClusterError),
}

/// Writes `lease` if the key's last revision is `expected` (0: the key has no message).
pub(crate) async fn write(
    store: &kv::Store,
    session_id: &str,
    lease: &LeaseRecord,
    expected: u64,
) -> Result<u64, Write> {
    let value = serde_json::to_vec(lease)
        .map_err(|error| Write::Failed(ClusterError::Corrupt { what: "a session lease", detail: error.to_string() }))?;
    match tokio::time::timeout(crate::connection::REQUEST_TIMEOUT, store.update(session_id, value.into(), expected))
        .await
    {
        Ok(Ok(revision)) => Ok(revision),
        Ok(Err(error)) if error.kind() == kv::UpdateErrorKind::WrongLastRevision => Err(Write::Moved),
        Ok(Err(error)) => {
            Err(Write::Failed(ClusterError::JetStream { what: "write a session lease", detail: error.to_string() }))
        }
        Err(_) => Err(Write::Failed(crate::kv::unreachable("write a session lease"))),
    }
}

/// Acquisitions by this process so far, mixed into each holder id.
static ACQUISITIONS: AtomicU64 = AtomicU64::new(0);

fn random_holder() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(now_unix_ms());
    hasher.write_u32(std::process::id());
    hasher.write_u64(ACQUISITIONS.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}
