//! The session side of `session.archive` and `session.delete` (troupe extensions).
//!
//! Archiving is one durable event, `session_archived {archived}`, so it survives restarts like every other fact
//! and reaches the supervisor's index through the usual metadata report (and `meta.json`, so the start's scan
//! does not read the log for it).
//!
//! Deleting is driven by the supervisor (`session_supervisor/removal.rs`) in two steps per session of the tree:
//! [`Seal`] refuses if the session is at work (an active run, a compaction, an active goal) and otherwise makes
//! the actor answer every later request with `session_not_found` (its phase becomes failed with that error) and
//! waits until everything it accepted is durable; then either [`Unseal`] (another session of the tree was busy:
//! the deletion is abandoned) or [`Retire`] (the tree's directories are about to go): live subscribers get their
//! one `gap` notice, so their clients resubscribe and learn that the session is gone, and the actor stops without
//! writing its metadata cache.

use actix::prelude::*;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;

use super::durable::DurableWait;
use super::{Phase, SessionActor};
use crate::error::{EngineError, TreeBusyReason};

/// Archives the session or brings it back. Replies with the metadata once the event is durable; a request that
/// changes nothing writes nothing.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct SetArchived {
    pub archived: bool,
}

/// First step of a deletion: refuse if busy, else stop serving and make everything accepted durable.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct Seal {
    /// The root of the tree being deleted, named in a refusal.
    pub root_session_id: String,
}

/// The deletion was abandoned: serve again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Unseal;

/// The deletion goes ahead: end the subscriptions and stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Retire;

impl SessionActor {
    fn busy_reason(&self) -> Option<TreeBusyReason> {
        if let Some(compaction) = self.jobs.compaction() {
            return Some(TreeBusyReason::Compaction { compaction_id: compaction.compaction_id.clone() });
        }
        if let Some(undo_id) = self.jobs.undo() {
            return Some(TreeBusyReason::Compaction { compaction_id: undo_id.to_owned() });
        }
        let state = self.state.as_ref()?;
        if let Some(run_id) = state.runs.active_run_id() {
            return Some(TreeBusyReason::Run { run_id: run_id.to_owned() });
        }
        state.goals.active().map(|goal| TreeBusyReason::Goal { goal_id: goal.goal_id.clone() })
    }

    fn is_sealed(&self) -> bool {
        matches!(&self.phase, Phase::Failed(EngineError::SessionNotFound { session_id }) if *session_id == self.session_id)
    }
}

impl Handler<SetArchived> for SessionActor {
    type Result = ResponseFuture<Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: SetArchived, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.ready_state().map(|state| state.archived).and_then(|archived| {
            if archived == message.archived {
                return Ok(None);
            }
            let payload = EventPayload::SessionArchived { archived: message.archived };
            self.append(ctx, None, Some(Origin::User), payload).map(Some)
        });
        let durable = accepted.map(|seq| seq.map(|seq| self.when_durable(seq)));
        let meta = self.state.as_ref().map(|state| state.meta());
        let session_id = self.session_id.clone();
        Box::pin(async move {
            if let Some(durable) = durable? {
                DurableWait::of(durable).wait(&session_id).await?;
            }
            meta.ok_or(EngineError::ShuttingDown)
        })
    }
}

impl Handler<Seal> for SessionActor {
    type Result = ResponseFuture<Result<(), EngineError>>;

    fn handle(&mut self, message: Seal, _: &mut Context<Self>) -> Self::Result {
        if !matches!(self.phase, Phase::Ready) {
            // A session that failed to open (or whose writes failed) accepts nothing and has nothing to wait for:
            // it can go as it is.
            return Box::pin(async { Ok(()) });
        }
        if let Some(reason) = self.busy_reason() {
            let error = EngineError::TreeBusy {
                session_id: message.root_session_id,
                busy_session_id: self.session_id.clone(),
                reason,
            };
            return Box::pin(async move { Err(error) });
        }
        self.phase = Phase::Failed(EngineError::SessionNotFound { session_id: self.session_id.clone() });
        let last_accepted = self.lane.next_seq().saturating_sub(1);
        let durable = self.when_durable(last_accepted);
        Box::pin(async move { durable.await.unwrap_or(Ok(())) })
    }
}

impl Handler<Unseal> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Unseal, _: &mut Context<Self>) {
        if self.is_sealed() && self.state.is_some() {
            self.phase = Phase::Ready;
        }
    }
}

impl Handler<Retire> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Context<Self>) {
        self.end_subscriptions();
        // No metadata cache is written for a session whose directory is going away.
        self.state = None;
        self.phase = Phase::Failed(EngineError::SessionNotFound { session_id: self.session_id.clone() });
        ctx.stop();
    }
}
