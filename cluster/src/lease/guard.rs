//! A held lease: the guard the session's writer keeps, and the task on the cluster's runtime that renews the lease
//! until it is released, dropped or lost (see the parent module on clocks and deadlines).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use tokio::sync::watch;

use super::{LeaseRecord, Write, write};
use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::kv::{Record, bounded, entry, now_unix_ms};

/// This node's hold on a session's lease, renewed from a task on the cluster's runtime until released, dropped,
/// or lost. The session's actor writes only while [`LeaseGuard::is_held`], and stops when [`LeaseGuard::lost`]
/// resolves.
pub struct LeaseGuard {
    shared: Arc<Shared>,
    store: kv::Store,
    cluster: Cluster,
    renewals: tokio::task::JoinHandle<()>,
}

/// What the guard and its renewal task share.
struct Shared {
    session_id: String,
    lease: LeaseRecord,
    ttl: Duration,
    /// Cleared when the lease is lost, released or dropped.
    held: AtomicBool,
    /// The revision of the last write of this lease.
    revision: AtomicU64,
    /// `base` plus this many nanoseconds: when the lease stops being this node's unless renewed (one ttl after the
    /// last successful renewal was sent).
    base: Instant,
    deadline_nanos: AtomicU64,
    /// `true` while held; the guard's [`LeaseGuard::lost`] futures wait for `false`.
    held_watch: watch::Sender<bool>,
    /// A test's stand-in for a stalled process: renewals are skipped.
    suspended: AtomicBool,
}

impl Shared {
    fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.deadline_nanos.load(Ordering::Acquire))
    }

    fn renewed(&self, sent: Instant, revision: u64) {
        let nanos =
            u64::try_from((sent + self.ttl).saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.deadline_nanos.fetch_max(nanos, Ordering::AcqRel);
        self.revision.store(revision, Ordering::Release);
    }

    fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire) && Instant::now() < self.deadline()
    }

    fn lose(&self, why: &str) {
        if self.held.swap(false, Ordering::AcqRel) {
            tracing::warn!(session_id = %self.session_id, "this node lost its lease on the session: {why}");
        }
        self.held_watch.send_replace(false);
    }

    /// The lease is given up on purpose (released or dropped): no longer held, and nothing to warn about.
    fn end(&self) {
        self.held.store(false, Ordering::Release);
        self.held_watch.send_replace(false);
    }
}

impl LeaseGuard {
    pub(super) fn start(
        cluster: &Cluster,
        store: kv::Store,
        session_id: &str,
        lease: LeaseRecord,
        revision: u64,
        sent: Instant,
    ) -> LeaseGuard {
        let ttl = Duration::from_millis(lease.ttl_ms);
        let shared = Arc::new(Shared {
            session_id: session_id.to_owned(),
            lease,
            ttl,
            held: AtomicBool::new(true),
            revision: AtomicU64::new(revision),
            base: sent,
            deadline_nanos: AtomicU64::new(0),
            held_watch: watch::Sender::new(true),
            suspended: AtomicBool::new(false),
        });
        shared.renewed(sent, revision);
        let renewals = cluster.handle().spawn(renew(shared.clone(), store.clone()));
        LeaseGuard { shared, store, cluster: cluster.clone(), renewals }
    }

    pub fn session_id(&self) -> &str {
        &self.shared.session_id
    }

    /// This acquisition's random id, as stored in the lease.
    pub fn holder(&self) -> u64 {
        self.shared.lease.holder
    }

    /// The revision of the lease's last write by this node.
    pub fn revision(&self) -> u64 {
        self.shared.revision.load(Ordering::Acquire)
    }

    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// Whether this node may still write the session: false from the moment a renewal finds the lease moved, or
    /// one ttl after the last successful renewal was sent (NATS unreachable: another node may have taken it).
    pub fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    /// Resolves once the lease is lost (or released); resolves at once if it already is.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut held = self.shared.held_watch.subscribe();
        async move {
            // An error means the sender is gone: the guard is, so the lease is too.
            let _ = held.wait_for(|held| !*held).await;
        }
    }

    /// Gives the lease up (hibernation, shutdown): deletes it at the revision this node last wrote, so that another
    /// node can take it at once. A lease already taken by another node is left to it.
    pub async fn release(self) -> Result<(), ClusterError> {
        self.renewals.abort();
        self.shared.end();
        let revision = self.revision();
        let deletion = self.store.delete_expect_revision(&self.shared.session_id, Some(revision));
        match tokio::time::timeout(crate::connection::REQUEST_TIMEOUT, deletion).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) if error.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(()),
            Ok(Err(error)) => {
                Err(ClusterError::JetStream { what: "release a session lease", detail: error.to_string() })
            }
            Err(_) => Err(crate::kv::unreachable("release a session lease")),
        }
    }

    /// Stops renewing, as a stalled process would, without giving the lease up (for tests of expiry).
    #[doc(hidden)]
    pub fn suspend_renewals(&self) {
        self.shared.suspended.store(true, Ordering::Release);
    }
}

impl Drop for LeaseGuard {
    /// Stops renewing and releases the lease without waiting for the answer (best effort: a lease left behind
    /// expires).
    fn drop(&mut self) {
        self.renewals.abort();
        let still_held = self.shared.is_held();
        self.shared.end();
        if still_held {
            let store = self.store.clone();
            let session_id = self.shared.session_id.clone();
            let revision = self.revision();
            self.cluster.handle().spawn(async move {
                let _ =
                    bounded("release a session lease", store.delete_expect_revision(&session_id, Some(revision))).await;
            });
        }
    }
}

/// Renews the lease every ttl/3 until it is lost; retries failed renewals every ttl/10 until the deadline.
async fn renew(shared: Arc<Shared>, store: kv::Store) {
    let interval = shared.ttl / 3;
    let retry = (shared.ttl / 10).max(Duration::from_millis(50));
    let mut next = Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next.min(shared.deadline()).into()).await;
        let deadline = shared.deadline();
        if Instant::now() >= deadline {
            shared.lose("no renewal succeeded within the ttl");
            return;
        }
        if shared.suspended.load(Ordering::Acquire) {
            next = Instant::now() + interval;
            continue;
        }
        let sent = Instant::now();
        let lease = LeaseRecord { renewed_unix_ms: now_unix_ms(), ..shared.lease.clone() };
        let renewal = write(&store, &shared.session_id, &lease, shared.revision.load(Ordering::Acquire));
        match tokio::time::timeout_at(deadline.into(), renewal).await {
            Err(_) => {
                shared.lose("no renewal succeeded within the ttl");
                return;
            }
            Ok(Ok(revision)) => {
                shared.renewed(sent, revision);
                next = sent + interval;
            }
            Ok(Err(Write::Moved)) => {
                match tokio::time::timeout_at(deadline.into(), entry(&store, &shared.session_id)).await {
                    // Our own earlier renewal, whose acknowledgement was lost: carry on from its revision.
                    Ok(Ok(Some(record))) if is_ours(&record, &shared.lease) => {
                        shared.revision.store(record.revision, Ordering::Release);
                        // Soon, not at once: a direct get may be served by a replica that lags a little.
                        next = Instant::now() + retry;
                    }
                    Ok(Ok(_)) => {
                        shared.lose("another node took it, or it was removed");
                        return;
                    }
                    Ok(Err(_)) | Err(_) => next = Instant::now() + retry,
                }
            }
            Ok(Err(Write::Failed(error))) => {
                tracing::debug!(session_id = %shared.session_id, "a lease renewal failed: {error}");
                next = Instant::now() + retry;
            }
        }
    }
}

fn is_ours(record: &Record, lease: &LeaseRecord) -> bool {
    !record.removed
        && serde_json::from_slice::<LeaseRecord>(&record.value)
            .is_ok_and(|stored| stored.node == lease.node && stored.holder == lease.holder)
}
