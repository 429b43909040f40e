//! The session actor's side of `session.undo` and `session.diff` (troupe extensions; `engine/changes.rs` does the
//! file work on blocking threads).
//!
//! An undo is a write of the session, ordered with its runs: [`BeginUndo`] refuses while a run, a compaction or
//! another undo is active and otherwise marks the session busy (so `run.start`, `session.revert` and
//! `session.compact` answer `session_busy` until it ends), and gives the engine the cwd and the runs already
//! undone; [`EndUndo`] frees the session and, when files were put back, appends `run_changes_undone`, which every
//! subscriber sees and which keeps a second undo of the same run from repeating it. The reply waits until that
//! event is durable.

use std::collections::BTreeSet;
use std::path::PathBuf;

use actix::prelude::*;
use troupe_protocol::types::changes::UndoneFile;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;

use super::SessionActor;
use crate::error::EngineError;

/// What the engine needs to plan an undo or a diff.
pub struct ChangesContext {
    /// The session's cwd, against which recorded paths are checked again.
    pub cwd: PathBuf,
    /// The runs whose changes were undone already.
    pub undone_runs: BTreeSet<String>,
}

/// Begins an undo: the session must be idle; it stays busy until [`EndUndo`].
#[derive(Message)]
#[rtype(result = "Result<ChangesContext, EngineError>")]
pub struct BeginUndo {
    pub undo_id: String,
}

/// Ends the undo `undo_id`; with `undone`, records what it did. Replies with the event's `seq` once durable.
#[derive(Message)]
#[rtype(result = "Result<Option<u64>, EngineError>")]
pub struct EndUndo {
    pub undo_id: String,
    pub undone: Option<UndoRecord>,
}

/// What an undo put back.
#[derive(Clone)]
pub struct UndoRecord {
    pub run_id: String,
    pub files: Vec<UndoneFile>,
    pub forced: bool,
}

/// The cwd and undone runs, for `session.diff` (nothing is marked busy).
#[derive(Message)]
#[rtype(result = "Result<ChangesContext, EngineError>")]
pub struct ChangesOfSession;

impl SessionActor {
    fn changes_context(&mut self) -> Result<ChangesContext, EngineError> {
        let session_id = self.session_id.clone();
        let state = self.ready_state()?;
        if state.creation_lost {
            return Err(EngineError::SessionDamaged { session_id });
        }
        Ok(ChangesContext { cwd: PathBuf::from(&state.cwd), undone_runs: state.undone_runs.clone() })
    }

    fn begin_undo(&mut self, message: BeginUndo) -> Result<ChangesContext, EngineError> {
        let context = self.changes_context()?;
        let session_id = self.session_id.clone();
        let active = self.state.as_ref().and_then(|state| state.runs.active_run_id().map(str::to_owned));
        if let Some(active_run_id) = active.or_else(|| self.jobs.busy().map(str::to_owned)) {
            return Err(EngineError::SessionBusy { session_id, active_run_id });
        }
        self.jobs.begin_undo(message.undo_id);
        Ok(context)
    }

    fn end_undo(&mut self, ctx: &mut Context<Self>, message: EndUndo) -> Result<Option<u64>, EngineError> {
        if self.jobs.undo() != Some(message.undo_id.as_str()) {
            return Err(EngineError::RunNotActive { run_id: message.undo_id });
        }
        self.jobs.end_undo();
        // Producer messages that arrived meanwhile could not start a run; now they can.
        self.schedule_producer_wake(ctx);
        self.ready_state()?;
        let Some(undone) = message.undone else {
            return Ok(None);
        };
        let payload =
            EventPayload::RunChangesUndone { undone_run_id: undone.run_id, files: undone.files, forced: undone.forced };
        self.append(ctx, None, Some(Origin::User), payload).map(Some)
    }
}

impl Handler<BeginUndo> for SessionActor {
    type Result = Result<ChangesContext, EngineError>;

    fn handle(&mut self, message: BeginUndo, _: &mut Context<Self>) -> Self::Result {
        self.begin_undo(message)
    }
}

impl Handler<EndUndo> for SessionActor {
    type Result = ResponseFuture<Result<Option<u64>, EngineError>>;

    fn handle(&mut self, message: EndUndo, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.end_undo(ctx, message);
        match accepted {
            Ok(Some(seq)) => self.durable_reply(Ok((seq, Some(seq)))),
            other => Box::pin(async move { other }),
        }
    }
}

impl Handler<ChangesOfSession> for SessionActor {
    type Result = Result<ChangesContext, EngineError>;

    fn handle(&mut self, _: ChangesOfSession, _: &mut Context<Self>) -> Self::Result {
        self.changes_context()
    }
}
