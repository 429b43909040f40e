//! `session.diff` and `session.undo` (troupe extensions): a run's file changes shown and taken back, from the
//! records file tools keep (`troupe_runtime::changes`).
//!
//! The session actor orders an undo with its runs (`session_actor/undo.rs`): it marks the session busy, the files
//! are checked and put back here on a blocking thread, and the actor records `run_changes_undone` and frees the
//! session. The work runs in a task of its own, so a client that goes away mid-way does not leave the session
//! busy: the undo ends and frees it either way.

use troupe_protocol::RpcError;
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::types::changes::{SessionDiffParams, SessionDiffResult, SessionUndoParams, SessionUndoResult};
use troupe_runtime::changes::undo::{UndoError, diff_run, undo_run};
use troupe_runtime::clock::new_id;

use super::Engine;
use crate::error::{ChangesRefusal, EngineError};
use crate::session_actor::{BeginUndo, ChangesOfSession, EndUndo, UndoRecord};

impl Engine {
    pub(super) async fn diff_changes(&self, params: SessionDiffParams) -> Result<SessionDiffResult, RpcError> {
        let SessionDiffParams { session_id, run_id } = params;
        let context = self.ask_session(&session_id, || ChangesOfSession).await?;
        let store = self.services.changes.clone();
        let sandbox = self.services.sandbox.clone();
        let diffed = tokio::task::spawn_blocking(move || {
            diff_run(&store, &session_id, &context.cwd, &context.undone_runs, run_id.as_deref(), sandbox.protected())
                .map_err(|error| engine_error(&session_id, error))
        })
        .await
        .map_err(|error| EngineError::Internal { detail: format!("the diff failed: {error}") })?;
        Ok(diffed?)
    }

    pub(super) async fn undo_changes(&self, params: SessionUndoParams) -> Result<SessionUndoResult, RpcError> {
        let SessionUndoParams { session_id, run_id, force } = params;
        let undo_id = new_id();
        let context = self.ask_session(&session_id, || BeginUndo { undo_id: undo_id.clone() }).await?;
        let store = self.services.changes.clone();
        let sandbox = self.services.sandbox.clone();
        let router = self.router().clone();
        let work = async move {
            let blocking_session = session_id.clone();
            let undone = tokio::task::spawn_blocking(move || {
                undo_run(
                    &store,
                    &blocking_session,
                    &context.cwd,
                    &context.undone_runs,
                    run_id.as_deref(),
                    force,
                    sandbox.protected(),
                )
                .map_err(|error| engine_error(&blocking_session, error))
            })
            .await
            .unwrap_or_else(|error| Err(EngineError::Internal { detail: format!("the undo failed: {error}") }));
            let record = undone.as_ref().ok().map(|undone| UndoRecord {
                run_id: undone.run_id.clone(),
                files: undone.files.clone(),
                forced: force,
            });
            // Always sent, so the session is freed whatever happened.
            let seq = router.ask(&session_id, || EndUndo { undo_id: undo_id.clone(), undone: record.clone() }).await?;
            let undone = undone?;
            Ok::<_, EngineError>(SessionUndoResult {
                session_id,
                run_id: undone.run_id,
                files: undone.files,
                seq: seq.unwrap_or_default(),
            })
        };
        let joined = tokio::spawn(work).await;
        Ok(joined.map_err(|error| EngineError::Internal { detail: format!("the undo failed: {error}") })??)
    }
}

/// An undo's or a diff's refusal as the engine's error.
fn engine_error(session_id: &str, error: UndoError) -> EngineError {
    let session_id = session_id.to_owned();
    let detail = error.to_string();
    let (code, run_id, files) = match error {
        UndoError::NothingToUndo { run_id } => (ErrorCode::NothingToUndo, run_id, Vec::new()),
        UndoError::RunChangedNoFiles { run_id } | UndoError::OnlyShellChanges { run_id } => {
            (ErrorCode::RunChangedNoFiles, Some(run_id), Vec::new())
        }
        UndoError::Conflicts { run_id, files } => (ErrorCode::UndoConflict, Some(run_id), files),
        UndoError::Records(_) => return EngineError::Storage { session_id, detail },
        UndoError::Restore { .. } => return EngineError::Internal { detail },
    };
    EngineError::Changes(ChangesRefusal { session_id, code, run_id, files, detail })
}
