//! The session actor's side of compaction.
//!
//! A manual compaction (`session.compact`) is one at a time and only in an idle session: while it runs, the actor
//! remembers its id and cancellation token ([`SessionActor::compaction_in_progress`]), so `run.start` (and
//! `session.revert`) answer `session_busy`, `run.cancel` on its id cancels it, and the actor does not hibernate.
//! The engine makes the summary request itself (`engine/compaction.rs`); the actor records `compaction_started`,
//! the usage, the checkpoint and `compaction_ended`.
//!
//! A run that compacts (`run_actor/compaction.rs`) records its events as run events; it asks here only for what
//! to summarize ([`CompactionSourceOfRun`]) and, after its checkpoint, for the history from it ([`RunHistory`]).

use actix::prelude::*;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::events::{CompactionOutcome, CompactionTrigger, EventPayload};
use troupe_protocol::types::origin::Origin;

use super::SessionActor;
use crate::compaction::CompactionSource;
use crate::error::EngineError;
use crate::ports::session::{CompactionSourceOfRun, RunHistory};

/// A manual compaction in progress.
pub struct ActiveCompaction {
    pub compaction_id: String,
    pub cancel: CancellationToken,
}

/// Begins a manual compaction: the session must be idle. Replies once `compaction_started` is durable (and, when
/// there is nothing to compact, `compaction_ended` with `skipped`).
#[derive(Message)]
#[rtype(result = "Result<ManualStart, EngineError>")]
pub struct BeginCompaction {
    pub compaction_id: String,
    pub focus: Option<String>,
    /// The model asked first.
    pub model: String,
    pub cancel: CancellationToken,
}

/// The reply to [`BeginCompaction`].
pub enum ManualStart {
    /// Nothing was compacted; the reason is recorded in `compaction_ended`.
    Skipped {
        reason: String,
    },
    Started(Box<CompactionSource>),
}

/// Records events of the manual compaction `compaction_id` (usage, the checkpoint) and then, when `outcome` is
/// set, its end, which frees the session. Replies once they are durable.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct RecordCompaction {
    pub compaction_id: String,
    pub events: Vec<EventPayload>,
    pub outcome: Option<(CompactionOutcome, Option<String>)>,
}

impl SessionActor {
    /// The id of the manual compaction in progress, if any: the session is busy while it runs.
    pub fn compaction_in_progress(&self) -> Option<&str> {
        self.jobs.compaction().map(|active| active.compaction_id.as_str())
    }

    /// Cancels the manual compaction `id`; `None` when no compaction of that id is in progress.
    pub(super) fn cancel_compaction(&self, id: &str) -> Option<bool> {
        self.jobs.cancel_compaction(id)
    }

    /// What a compaction of the whole history now would cover.
    fn compaction_source(&self) -> Option<CompactionSource> {
        let state = self.state.as_ref()?;
        let counts = state.transcript.compaction_counts()?;
        Some(CompactionSource { transcript: state.transcript.clone(), through_seq: self.lane.next_seq() - 1, counts })
    }

    fn begin_compaction(
        &mut self,
        ctx: &mut Context<Self>,
        message: BeginCompaction,
    ) -> Result<(u64, ManualStart), EngineError> {
        self.ready_state()?;
        let session_id = self.session_id.clone();
        let Some(state) = self.state.as_ref() else { return Err(EngineError::ShuttingDown) };
        if let Some(active) = state.runs.active_run_id() {
            return Err(EngineError::SessionBusy { session_id, active_run_id: active.to_owned() });
        }
        if state.creation_lost {
            return Err(EngineError::SessionDamaged { session_id });
        }
        if let Some(active) = self.jobs.busy() {
            return Err(EngineError::SessionBusy { session_id, active_run_id: active.to_owned() });
        }
        let source = self.compaction_source();
        let started = EventPayload::CompactionStarted {
            compaction_id: message.compaction_id.clone(),
            trigger: CompactionTrigger::Manual,
            focus: message.focus,
            model: message.model,
        };
        let seq = self.append(ctx, None, Some(Origin::COMPACTION), started)?;
        let Some(source) = source else {
            let reason = "nothing to compact: no history since the last checkpoint".to_owned();
            let ended = EventPayload::CompactionEnded {
                compaction_id: message.compaction_id,
                outcome: CompactionOutcome::Skipped,
                reason: Some(reason.clone()),
            };
            let seq = self.append(ctx, None, Some(Origin::COMPACTION), ended)?;
            return Ok((seq, ManualStart::Skipped { reason }));
        };
        self.jobs.begin_compaction(ActiveCompaction { compaction_id: message.compaction_id, cancel: message.cancel });
        Ok((seq, ManualStart::Started(Box::new(source))))
    }

    fn record_compaction(&mut self, ctx: &mut Context<Self>, message: RecordCompaction) -> Result<u64, EngineError> {
        self.ready_state()?;
        if self.compaction_in_progress() != Some(message.compaction_id.as_str()) {
            return Err(EngineError::RunNotActive { run_id: message.compaction_id });
        }
        let mut last = self.lane.next_seq() - 1;
        for payload in message.events {
            last = self.append(ctx, None, Some(Origin::COMPACTION), payload)?;
        }
        if let Some((outcome, reason)) = message.outcome {
            self.jobs.end_compaction();
            let ended = EventPayload::CompactionEnded { compaction_id: message.compaction_id, outcome, reason };
            last = self.append(ctx, None, Some(Origin::COMPACTION), ended)?;
            // Producer messages that arrived meanwhile could not start a run; now they can.
            self.schedule_producer_wake(ctx);
        }
        Ok(last)
    }
}

impl Handler<BeginCompaction> for SessionActor {
    type Result = ResponseFuture<Result<ManualStart, EngineError>>;

    fn handle(&mut self, message: BeginCompaction, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.begin_compaction(ctx, message);
        self.durable_reply(accepted)
    }
}

impl Handler<RecordCompaction> for SessionActor {
    type Result = ResponseFuture<Result<(), EngineError>>;

    fn handle(&mut self, message: RecordCompaction, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.record_compaction(ctx, message).map(|seq| (seq, ()));
        self.durable_reply(accepted)
    }
}

impl Handler<CompactionSourceOfRun> for SessionActor {
    type Result = Result<Option<CompactionSource>, EngineError>;

    fn handle(&mut self, message: CompactionSourceOfRun, _: &mut Context<Self>) -> Self::Result {
        self.require_active_run(&message.run_id)?;
        Ok(self.compaction_source())
    }
}

impl Handler<RunHistory> for SessionActor {
    type Result = Result<Vec<troupe_runtime::model::ChatMessage>, EngineError>;

    fn handle(&mut self, message: RunHistory, _: &mut Context<Self>) -> Self::Result {
        self.require_active_run(&message.run_id)?;
        Ok(self.ready_state()?.transcript.messages())
    }
}
