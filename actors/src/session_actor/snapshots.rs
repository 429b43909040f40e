//! When a session writes its projection snapshot (`troupe_runtime::event_log::snapshot`), so that its next load
//! scans only the end of its log.
//!
//! A snapshot is taken on the actor (a clone of the state and of the log's sparse index: the state must be the
//! projection of exactly the durable lines, so it cannot be read later from another thread) and written on the
//! blocking pool, never on the actor's thread; nothing waits for it, and a failed write only leaves the older
//! snapshot (or none), which the next load notices and works around. It is taken:
//!
//! - while live, when the log has grown by `SNAPSHOT_EVERY_BYTES` since the last snapshot, at a commit or a
//!   periodic check that finds no event waiting for durability, and one write at a time;
//! - when the actor stops (hibernation, retirement), when the log grew by `SNAPSHOT_MIN_GROWTH_BYTES` since;
//! - by the load itself (on its blocking thread), when it scanned at least that much past the snapshot it found.
//!
//! A session whose log holds reverts takes no live snapshot: its live state is the settled branch, and a snapshot
//! holds the projection before settling. Its loads still write one (they have the unsettled projection).

use actix::prelude::*;
use troupe_runtime::event_log::snapshot::{SNAPSHOT_EVERY_BYTES, SNAPSHOT_MIN_GROWTH_BYTES};
use troupe_runtime::event_log::{EventStore, PendingSnapshot, ProjectedLog};

use super::SessionActor;

/// Writes `pending` on the blocking pool, if there is a runtime; logs a failure.
fn spawn_write(session_dir: std::path::PathBuf, pending: PendingSnapshot) -> Option<tokio::task::JoinHandle<()>> {
    let write = move || {
        let covered_len = pending.covered_len();
        match pending.write(&session_dir) {
            Ok(()) => tracing::debug!(path = %session_dir.display(), covered_len, "wrote a projection snapshot"),
            Err(error) => tracing::info!(%error, "could not write a projection snapshot"),
        }
    };
    // Without a runtime (the daemon is exiting) the snapshot is skipped: the next load scans a little more.
    tokio::runtime::Handle::try_current().ok().map(|runtime| runtime.spawn_blocking(write))
}

/// After a load (on its blocking thread, before the branch is settled): writes a snapshot of the projection when
/// the load scanned enough past the one it found. Returns the log length the newest snapshot covers.
pub(super) fn after_load(session_dir: &std::path::Path, projected: &ProjectedLog) -> u64 {
    let covered = projected.snapshot.covered_len();
    if projected.scanned_bytes < SNAPSHOT_MIN_GROWTH_BYTES {
        return covered;
    }
    match projected.opened.store.snapshot_of_projection(&projected.state) {
        Some(pending) => {
            let covered = pending.covered_len();
            spawn_write(session_dir.to_path_buf(), pending);
            covered
        }
        None => covered,
    }
}

impl SessionActor {
    /// Takes and writes a snapshot when the log has grown by `SNAPSHOT_EVERY_BYTES` since the last one and every
    /// accepted event is durable.
    pub(super) fn maybe_snapshot(&mut self, ctx: &mut Context<Self>) {
        if self.snapshots.is_writing() || self.lane.has_queued() {
            return;
        }
        let (Some(state), Some(store)) = (&self.state, self.lane.store()) else { return };
        if !self.snapshots.grown_by(store.len_bytes(), SNAPSHOT_EVERY_BYTES) {
            return;
        }
        let Some(pending) = store.snapshot_of_live(state) else { return };
        self.snapshots.covered(pending.covered_len());
        let Some(written) = spawn_write(self.session_dir.clone(), pending) else { return };
        self.snapshots.writing_started();
        ctx.spawn(written.into_actor(self).map(|_, actor, _| actor.snapshots.written()));
    }

    /// At the actor's stop: writes a snapshot when the log grew by `SNAPSHOT_MIN_GROWTH_BYTES` since the last one.
    pub(super) fn snapshot_at_stop(&mut self) {
        let (Some(state), Some(store)) = (&self.state, self.lane.store()) else { return };
        if self.lane.has_queued() || !self.snapshots.grown_by(store.len_bytes(), SNAPSHOT_MIN_GROWTH_BYTES) {
            return;
        }
        if let Some(pending) = store.snapshot_of_live(state) {
            self.snapshots.covered(pending.covered_len());
            spawn_write(self.session_dir.clone(), pending);
        }
    }
}
