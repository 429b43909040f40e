//! The supervisor's index of every session on disk: built at start from a scan of the sessions directory (the
//! session index a clean stop wrote, checked afterwards in `index_check.rs`; else the `meta.json` caches, or the logs
//! where a cache is missing or stale; a scan that fails is retried), then kept current by the session actors' reports
//! (`SessionMetaChanged`). The scan also gives each session's spent usage (`usage_index`) and named artifacts
//! (`artifacts`).

use std::path::Path;
use std::time::Duration;

use actix::prelude::*;
use troupe_protocol::types::common::SessionMeta;
use troupe_runtime::artifact_names::NamedArtifacts;
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::event_log::{self, EventStore};
use troupe_runtime::fork::FORK_DIR_SUFFIX;
use troupe_runtime::meta_cache;
use troupe_runtime::session_index;
use troupe_runtime::session_state::SessionState;
use troupe_runtime::usage_book::UsageSummary;

use super::{SessionSupervisor, removal};
use crate::ports::supervisor::SessionMetaChanged;
use crate::session_actor::Opening;

/// What the scan found of one session.
pub(super) struct ScannedSession {
    pub(super) meta: SessionMeta,
    pub(super) usage: UsageSummary,
    /// The artifacts its log names; `None` when the log could not be read.
    pub(super) artifacts: Option<NamedArtifacts>,
    /// Taken from the session index a clean stop wrote (`session_index`), not yet checked against its log: the log's
    /// length its entry describes (`index_check.rs`).
    pub(super) unchecked_log_len: Option<u64>,
}

/// The first wait before the sessions directory is read again after it could not be read at start; doubled at each
/// failure up to [`RESCAN_MAX_DELAY`].
pub(super) const RESCAN_FIRST_DELAY: Duration = Duration::from_millis(250);
const RESCAN_MAX_DELAY: Duration = Duration::from_secs(10);

/// Reads every session's metadata, spent usage and named artifacts: the session index a clean stop left (taken, so
/// it is read once), else the session's cache when it matches the log's length, else the log itself (and then
/// refreshes the cache). Sessions whose log cannot be projected are logged and left out. An error when the sessions
/// directory exists but cannot be read (its permissions, an I/O error): then nothing is known yet.
pub(super) fn scan_sessions(data_dir: &DataDir) -> std::io::Result<Vec<ScannedSession>> {
    let mut indexed = session_index::take(data_dir);
    let entries = match std::fs::read_dir(data_dir.sessions_dir()) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut sessions = Vec::new();
    for entry in entries.flatten() {
        let session_dir = entry.path();
        let Some(session_id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // The entry's type as the folder lists it (no `stat`), then what it leads to (a link to a folder).
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) && !session_dir.is_dir() {
            continue;
        }
        if session_id.starts_with('.') {
            // A fork being copied (`.<id>.fork`) when the daemon stopped: never renamed into place, so it is not a
            // session. Removed so it does not accumulate.
            if session_id.ends_with(FORK_DIR_SUFFIX) {
                let _ = std::fs::remove_dir_all(&session_dir);
            }
            // A deletion a crash interrupted after its rename (`removal`): the session is already gone.
            if removal::is_deletion_staging(&session_id) {
                tracing::info!(path = %session_dir.display(), "removing a deleted session's leftover directory");
                let _ = std::fs::remove_dir_all(&session_dir);
            }
            continue;
        }
        if let Some(cached) = indexed.remove(&session_id) {
            sessions.push(ScannedSession {
                meta: cached.meta,
                usage: cached.usage,
                artifacts: Some(cached.artifacts),
                unchecked_log_len: Some(cached.log_len_bytes),
            });
            continue;
        }
        sessions.extend(scan_session(&session_dir, session_id));
    }
    Ok(sessions)
}

/// One session's metadata, spent usage and named artifacts, from its cache when it matches the log's length, else
/// from the log (refreshing the cache). `None` when the folder holds no log.
pub(super) fn scan_session(session_dir: &Path, session_id: String) -> Option<ScannedSession> {
    if let Some((cached, _)) = meta_cache::read_current(session_dir, &session_id) {
        let (meta, usage, artifacts) = (cached.meta, cached.usage, Some(cached.artifacts));
        return Some(ScannedSession { meta, usage, artifacts, unchecked_log_len: None });
    }
    // Streamed: the projection is built line by line, no event is kept.
    let mut projector = SessionState::projector();
    match event_log::open(session_dir, 0, |event| projector.apply(event)) {
        Ok(opened) => {
            let fallback_time = event_log::modified_rfc3339(session_dir);
            let mut state = projector.finish(&session_id, opened.skipped, &fallback_time);
            if let Err(error) = troupe_runtime::branch::settle_loaded(&mut state, &*opened.store.reader()) {
                tracing::warn!(%session_id, %error, "could not read a reverted session's visible events");
            }
            let (meta, usage) = (state.meta(), state.usage.summary().clone());
            let described = meta_cache::Described { meta: &meta, usage: &usage, artifacts: &state.artifacts };
            if let Err(error) = meta_cache::write(session_dir, described, opened.store.len_bytes()) {
                tracing::warn!(%session_id, %error, "could not write the metadata cache");
            }
            Some(ScannedSession { meta, usage, artifacts: Some(state.artifacts), unchecked_log_len: None })
        }
        Err(troupe_runtime::error::RuntimeError::SessionNotFound { .. }) => {
            tracing::warn!(%session_id, "skipping a session directory without an event log");
            None
        }
        Err(error) => {
            // The log is there but cannot be read now (permissions, a directory in its place, an I/O error).
            // The session stays indexed, its damage reported, so that requests reach it: each tries to load it
            // again and answers with the error until the file is repaired, with no restart needed.
            tracing::warn!(%session_id, %error, "a session's log cannot be opened; it stays listed");
            let fallback_time = event_log::modified_rfc3339(session_dir);
            let skipped = vec![troupe_protocol::types::common::SkippedEvent {
                seq: Some(1),
                line: None,
                reason: format!("the log could not be opened: {error}"),
            }];
            let meta = SessionState::projector().finish(&session_id, skipped, &fallback_time).meta();
            Some(ScannedSession { meta, usage: UsageSummary::default(), artifacts: None, unchecked_log_len: None })
        }
    }
}

impl SessionSupervisor {
    /// Indexes what a scan of the sessions directory found. A scan that could not read the directory is tried again
    /// after `retry_in`, then less and less often, until one succeeds: otherwise every session on disk would stay
    /// unknown (unlisted, `session_not_found`) until the next restart, although the directory became readable.
    pub(super) fn index_scanned(
        &mut self,
        scanned: Result<std::io::Result<Vec<ScannedSession>>, tokio::task::JoinError>,
        ctx: &mut Context<Self>,
        retry_in: Duration,
    ) {
        let error = match scanned {
            Ok(Ok(sessions)) => {
                let mut unchecked = Vec::new();
                for scanned in sessions {
                    // A session created or changed since the scan began is known better already.
                    if !self.index.contains_key(&scanned.meta.session_id) {
                        if let Some(log_len) = scanned.unchecked_log_len {
                            unchecked.push((scanned.meta.session_id.clone(), log_len));
                        }
                        self.index_scanned_session(scanned);
                    }
                }
                if unchecked.is_empty() {
                    self.scan_complete(ctx);
                } else {
                    // What the session index said is checked against the logs while requests are answered.
                    self.check_index(unchecked, ctx);
                }
                return;
            }
            Ok(Err(error)) => error.to_string(),
            Err(error) => format!("the scanning thread failed: {error}"),
        };
        tracing::error!(
            %error, retry_in_ms = retry_in.as_millis() as u64,
            "cannot read the sessions directory; its sessions are unknown until it can be read"
        );
        ctx.run_later(retry_in, move |supervisor, ctx| {
            let data_dir = supervisor.data_dir.clone();
            let scan = async move { tokio::task::spawn_blocking(move || scan_sessions(&data_dir)).await };
            ctx.spawn(scan.into_actor(supervisor).map(move |scanned, supervisor, ctx| {
                let known = supervisor.index.len();
                supervisor.index_scanned(scanned, ctx, (retry_in * 2).min(RESCAN_MAX_DELAY));
                if supervisor.index.len() > known {
                    tracing::info!(sessions = supervisor.index.len(), "session index built");
                    supervisor.interrupt_runs_left_in_flight(ctx);
                }
            }));
        });
    }

    /// Indexes one session the scan found (or its check read again): its metadata, spent usage and named artifacts.
    pub(super) fn index_scanned_session(&mut self, scanned: ScannedSession) {
        let ScannedSession { meta, usage, artifacts, unchecked_log_len: _ } = scanned;
        self.usage.set(&meta.session_id, usage);
        if let Some(artifacts) = artifacts {
            self.artifacts.set(&meta.session_id, std::sync::Arc::new(artifacts));
        }
        self.index_meta(meta);
    }

    /// Every session's artifacts are known as their logs name them: collecting the unnamed may start (once
    /// installed).
    pub(super) fn scan_complete(&mut self, ctx: &mut Context<Self>) {
        self.artifacts.mark_scanned();
        self.schedule_artifact_collection(Duration::ZERO, ctx);
    }

    /// Runs that were in flight when the daemon stopped get `run_interrupted` now: opening their sessions loads
    /// the logs, and a session that finds an active run without an actor records the interruption.
    pub(super) fn interrupt_runs_left_in_flight(&mut self, ctx: &mut Context<Self>) {
        let running: Vec<String> = self
            .index
            .values()
            .filter(|meta| meta.status == troupe_protocol::types::common::SessionStatus::Running)
            .map(|meta| meta.session_id.clone())
            .collect();
        for session_id in running {
            if self.live.contains_key(&session_id) {
                // Its actor is up already (a later scan found nothing new about it): it closed the run when it loaded.
                continue;
            }
            tracing::info!(%session_id, "interrupting a run left in flight");
            self.start_actor(&session_id, Opening::Load, ctx);
        }
    }

    /// Indexes `meta`. A session without a node is this node's: in a cluster it is named so (`node`), whichever path
    /// indexed it (created, reported, scanned from disk).
    pub(super) fn index_meta(&mut self, mut meta: SessionMeta) {
        if meta.node.is_none() {
            meta.node = self.own_node();
        }
        if !self.index.contains_key(&meta.session_id)
            && let Some(parent) = meta.origin.parent_session_id()
        {
            self.children.entry(parent.to_owned()).or_default().push(meta.session_id.clone());
        }
        self.view.set(&meta);
        self.index.insert(meta.session_id.clone(), meta);
    }
}

impl Handler<SessionMetaChanged> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionMetaChanged, _: &mut Context<Self>) {
        // A deleted session's last reports may still be queued here (`removal`: its actor reported while it was
        // loaded or sealed for the deletion); they must not bring it back. Any other session that reports is
        // indexed or live (a new one is live before its first report).
        let session_id = &message.meta.session_id;
        if !self.index.contains_key(session_id) && !self.live.contains_key(session_id) {
            return;
        }
        // Its actor read its log: what the session index said of it needs no check any more.
        self.unchecked.remove(session_id);
        self.publish_to_directory(&message.meta);
        // `index_meta` names this node as the session's host.
        self.index_meta(message.meta);
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
