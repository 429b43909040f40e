//! The check of what the session index said (`troupe_runtime::session_index`): a clean stop wrote every session's
//! cache into one file, and the start indexed them from it without reading each session's folder. Each entry is then
//! checked against its log's length on a blocking thread while requests are answered, and a session whose log is not
//! what its entry describes (a backup put back while no daemon ran, an index a crash brought back) is read again
//! from its folder and indexed anew.
//!
//! Until the check ends, nothing that must be exact relies on the entries: unnamed artifacts are not collected (an
//! entry's list of named files might be older than its log), and runs left in flight by a log that says so are
//! interrupted once the check has read it. A session whose actor loads meanwhile reports what its log says, which
//! settles it (its metadata and named artifacts at once, its spent usage for the next rollup): the check's answer
//! for it is then older and is dropped.

use actix::prelude::*;
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::meta_cache;

use super::SessionSupervisor;
use super::index::{ScannedSession, scan_session};

/// The sessions whose log is not what their entry describes, read again from their folders. `unchecked` holds each
/// session taken from the index with the log length its entry describes.
pub(super) fn check_sessions(data_dir: &DataDir, unchecked: Vec<(String, u64)>) -> Vec<ScannedSession> {
    unchecked
        .into_iter()
        .filter_map(|(session_id, log_len)| {
            let session_dir = data_dir.session_dir(&session_id);
            if meta_cache::log_len(&session_dir) == Some(log_len) {
                return None;
            }
            tracing::info!(%session_id, "the session index was behind a session's log; reading the session again");
            scan_session(&session_dir, session_id)
        })
        .collect()
}

impl SessionSupervisor {
    /// Checks the sessions indexed from the session index against their logs, in the background.
    pub(super) fn check_index(&mut self, unchecked: Vec<(String, u64)>, ctx: &mut Context<Self>) {
        self.unchecked = unchecked.iter().map(|(session_id, _)| session_id.clone()).collect();
        let data_dir = self.data_dir.clone();
        let check = async move { tokio::task::spawn_blocking(move || check_sessions(&data_dir, unchecked)).await };
        ctx.spawn(check.into_actor(self).map(|checked, supervisor, ctx| supervisor.index_checked(checked, ctx)));
    }

    /// Indexes what the check read again, for the sessions nothing newer was heard of meanwhile, then lets the
    /// collection of unnamed artifacts start and interrupts the runs the logs say were in flight.
    fn index_checked(&mut self, checked: Result<Vec<ScannedSession>, tokio::task::JoinError>, ctx: &mut Context<Self>) {
        let unchecked = std::mem::take(&mut self.unchecked);
        let corrected = match checked {
            Ok(corrected) => corrected,
            Err(error) => {
                // The entries stay as the index said; the artifacts are not collected until a start knows them.
                tracing::error!(%error, "the check of the session index failed; unnamed artifacts are kept");
                return;
            }
        };
        let mut read_again = 0;
        for scanned in corrected {
            let session_id = &scanned.meta.session_id;
            // Deleted meanwhile, or its actor reported what its log says (newer than this).
            if !unchecked.contains(session_id)
                || !self.index.contains_key(session_id)
                || self.live.contains_key(session_id)
            {
                continue;
            }
            self.publish_to_directory(&scanned.meta);
            self.index_scanned_session(scanned);
            read_again += 1;
        }
        tracing::info!(checked = unchecked.len(), read_again, "the session index is checked against the logs");
        self.scan_complete(ctx);
        self.interrupt_runs_left_in_flight(ctx);
    }
}
