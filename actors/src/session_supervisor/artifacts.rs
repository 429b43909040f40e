//! The supervisor's artifact index and the collection of artifacts no session names.
//!
//! Every session's named artifacts (`troupe_runtime::artifact_names`) are known here, without a log in memory:
//! from the start's scan (each `meta.json`, or the log streamed where the cache is missing or stale), then from the
//! session actors, which report their set when they start and whenever a durable batch named another file
//! (`SessionArtifactsChanged`). A deletion drops the deleted sessions' sets.
//!
//! Collection (mark and sweep) runs once the index is built at start, and after deletions, debounced: the union
//! of every set is the mark, and the sweep (`troupe_runtime::artifact_collection`, on a blocking thread) removes
//! the unnamed files older than the grace period (`[limits] artifact_grace_secs`), which protects a file stored for
//! an event not appended (or not reported) yet. It is skipped while any session's set is unknown: a live session
//! that has not reported yet (it is still loading, or being forked) postpones it; a session whose log could not
//! be read leaves it off until that session loads. It is installed only on a single node
//! (`InstallArtifactCollection`): on a cluster node, artifacts are the node's own files while sessions move between
//! nodes, so no node can tell that a file is named by none.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use troupe_runtime::artifact_collection::{Collected, collect_unnamed};
use troupe_runtime::artifact_names::NamedArtifacts;

use super::SessionSupervisor;
use crate::ports::supervisor::SessionArtifactsChanged;

/// How long after a deletion the collection runs, so that a burst of deletions costs one sweep.
const AFTER_DELETION: Duration = Duration::from_secs(1);

/// How long a collection that found a live session without a report waits before it looks again.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Turns collection on (a single node), with the grace period of unnamed files.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstallArtifactCollection {
    pub grace: Duration,
}

/// Every session's named artifacts, and the collection's state.
#[derive(Default)]
pub(super) struct ArtifactIndex {
    by_session: HashMap<String, Arc<NamedArtifacts>>,
    /// The grace period of unnamed files; `None` while collection is off (before it is installed, and on a cluster
    /// node).
    grace: Option<Duration>,
    /// The index was built from a scan of the sessions directory: until then, no set is known and nothing may go.
    scanned: bool,
    /// A collection is scheduled, or a sweep is running.
    scheduled: bool,
    running: bool,
    /// Something asked for a collection while a sweep ran: another follows it.
    again: bool,
}

impl ArtifactIndex {
    pub(super) fn set(&mut self, session_id: &str, artifacts: Arc<NamedArtifacts>) {
        self.by_session.insert(session_id.to_owned(), artifacts);
    }

    pub(super) fn forget(&mut self, session_id: &str) {
        self.by_session.remove(session_id);
    }

    /// The index now holds what the start's scan found.
    pub(super) fn mark_scanned(&mut self) {
        self.scanned = true;
    }
}

impl SessionSupervisor {
    /// Asks for a collection in `delay`, unless one is already scheduled or collection is off.
    pub(super) fn schedule_artifact_collection(&mut self, delay: Duration, ctx: &mut Context<Self>) {
        let artifacts = &mut self.artifacts;
        if artifacts.grace.is_none() || !artifacts.scanned {
            return;
        }
        if artifacts.running {
            artifacts.again = true;
            return;
        }
        if artifacts.scheduled {
            return;
        }
        artifacts.scheduled = true;
        ctx.run_later(delay, |supervisor, ctx| {
            supervisor.artifacts.scheduled = false;
            supervisor.collect_artifacts(ctx);
        });
    }

    /// Marks (the union of every session's set) and starts the sweep on a blocking thread.
    fn collect_artifacts(&mut self, ctx: &mut Context<Self>) {
        let Some(grace) = self.artifacts.grace else { return };
        // A cluster's directory installed after all: sessions of this node may live on elsewhere.
        if self.directory.is_some() {
            self.artifacts.grace = None;
            return;
        }
        let by_session = &self.artifacts.by_session;
        if self.live.iter().any(|live| !by_session.contains_key(live.key())) {
            self.schedule_artifact_collection(RETRY_AFTER, ctx);
            return;
        }
        if let Some(session_id) = self.index.keys().find(|session_id| !by_session.contains_key(*session_id)) {
            tracing::warn!(
                %session_id,
                "artifacts are not collected: the files this session names are unknown until its log can be read"
            );
            return;
        }
        let named: Vec<Arc<NamedArtifacts>> = by_session.values().cloned().collect();
        let data_dir = self.data_dir.root().to_path_buf();
        self.artifacts.running = true;
        let sweep = async move {
            tokio::task::spawn_blocking(move || {
                let names: HashSet<&str> = named.iter().flat_map(|set| set.file_names()).collect();
                collect_unnamed(&data_dir, |name| names.contains(name), grace, SystemTime::now())
            })
            .await
        };
        ctx.spawn(sweep.into_actor(self).map(|swept, supervisor, ctx| {
            supervisor.artifacts.running = false;
            match swept {
                Ok(Ok(Collected { removed: 0, kept_young, .. })) => {
                    tracing::debug!(kept_young, "no artifact to collect")
                }
                Ok(Ok(Collected { removed, removed_bytes, kept_young })) => {
                    tracing::info!(removed, removed_bytes, kept_young, "removed artifacts no session names")
                }
                Ok(Err(error)) => tracing::warn!(%error, "could not list the artifacts to collect"),
                Err(error) => tracing::warn!(%error, "the artifact collection's thread failed"),
            }
            if std::mem::take(&mut supervisor.artifacts.again) {
                supervisor.schedule_artifact_collection(AFTER_DELETION, ctx);
            }
        }));
    }

    /// Sessions were deleted: their files are collected soon, with those of any deletion that follows.
    pub(super) fn collect_after_deletion(&mut self, ctx: &mut Context<Self>) {
        self.schedule_artifact_collection(AFTER_DELETION, ctx);
    }
}

impl Handler<InstallArtifactCollection> for SessionSupervisor {
    type Result = ();

    /// Handled after the start's scan (the supervisor waits for it before any message): the first collection runs
    /// now, unless the scan failed, in which case the rescan that succeeds starts it.
    fn handle(&mut self, message: InstallArtifactCollection, ctx: &mut Context<Self>) {
        self.artifacts.grace = Some(message.grace);
        self.schedule_artifact_collection(Duration::ZERO, ctx);
    }
}

impl Handler<SessionArtifactsChanged> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionArtifactsChanged, _: &mut Context<Self>) {
        // A deleted session's last report may still be queued here: it must not come back.
        let session_id = &message.session_id;
        if self.index.contains_key(session_id) || self.live.contains_key(session_id) {
            self.artifacts.set(session_id, message.artifacts);
        }
    }
}
