//! `session.revert`, and the source's side of `session.fork` (the copy itself is `troupe_runtime::fork`, run by
//! the new session's actor as it opens).
//!
//! A revert never removes anything: it appends `session_reverted {through_seq}`, and the branch-derived parts of
//! the projection (`SessionState::adopt_branch`) are rebuilt from the events that are visible after it
//! (`troupe_runtime::branch`). The rebuild reads the visible events from the log on a blocking thread while the
//! actor goes on serving; it depends only on events at or before `through_seq` (and the reverts among them), so
//! whatever was appended meanwhile is simply hidden by the marker too. Only a run that started meanwhile stops
//! the revert (`session_busy`), checked again when the rebuilt branch is adopted.

use actix::prelude::*;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_runtime::branch::project_ranges;
use troupe_runtime::error::RuntimeError;
use troupe_runtime::event_log::ReplicaError;
use troupe_runtime::fork::{ForkError, ForkSource, copy_prefix};
use troupe_runtime::session_state::SessionState;

use super::SessionActor;
use super::durable::DurableWait;
use crate::error::EngineError;

/// Reverts the session to `through_seq` (idle sessions only). Replies with the metadata once the marker (and the
/// end of a run the visible events leave in flight) is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct Revert {
    pub through_seq: u64,
}

/// What a fork of this session through `through_seq` copies; replies once those events are durable. The source
/// may be running.
#[derive(Message)]
#[rtype(result = "Result<ForkSource, EngineError>")]
pub struct PrepareFork {
    pub through_seq: u64,
}

/// Why a session actor could not open its log.
pub(super) enum OpenError {
    Runtime(RuntimeError),
    Fork {
        source_session_id: String,
        error: ForkError,
    },
    /// The cluster's replica refused to give this node the session, or failed.
    Replica(ReplicaError),
    Other(String),
}

impl From<ReplicaError> for OpenError {
    fn from(error: ReplicaError) -> Self {
        OpenError::Replica(error)
    }
}

/// Copies a fork's prefix into `session_dir` (blocking).
pub(super) fn copy_fork(session_dir: &std::path::Path, source: &ForkSource) -> Result<(), OpenError> {
    copy_prefix(session_dir, source)
        .map_err(|error| OpenError::Fork { source_session_id: source.source_session_id.clone(), error })
}

impl SessionActor {
    pub(super) fn open_error(&self, error: OpenError) -> EngineError {
        match error {
            OpenError::Runtime(error) => self.storage_error(error),
            OpenError::Replica(error) => EngineError::replica(&self.session_id, error),
            OpenError::Other(detail) => self.storage_error(detail),
            OpenError::Fork { source_session_id, error } => match error {
                ForkError::NoUserMessage { through_seq } => {
                    EngineError::NoUserMessageInPrefix { session_id: source_session_id, through_seq }
                }
                ForkError::CreationLost => EngineError::SessionDamaged { session_id: source_session_id },
                other => self.storage_error(other),
            },
        }
    }

    /// The state, if `through_seq` names an event of this session (and, for a revert, no run is active).
    fn history_target(&mut self, through_seq: u64, must_be_idle: bool) -> Result<&SessionState, EngineError> {
        let session_id = self.session_id.clone();
        // A manual compaction or an undo in progress keeps the session busy as a run does.
        if must_be_idle && let Some(compaction_id) = self.jobs.busy() {
            return Err(EngineError::SessionBusy { session_id, active_run_id: compaction_id.to_owned() });
        }
        let state = self.ready_state()?;
        if state.creation_lost {
            return Err(EngineError::SessionDamaged { session_id });
        }
        if through_seq == 0 || through_seq > state.last_event_seq {
            return Err(EngineError::SeqOutOfRange { session_id, through_seq, last_seq: state.last_event_seq });
        }
        if must_be_idle && let Some(active_run_id) = state.runs.active_run_id() {
            return Err(EngineError::SessionBusy { session_id, active_run_id: active_run_id.to_owned() });
        }
        Ok(state)
    }

    /// Adopts the rebuilt branch and appends the marker; returns the last seq appended.
    fn commit_revert(
        &mut self,
        ctx: &mut Context<Self>,
        through_seq: u64,
        branch: SessionState,
    ) -> Result<u64, EngineError> {
        self.history_target(through_seq, true)?;
        let state = self.state.as_mut().ok_or(EngineError::ShuttingDown)?;
        state.adopt_branch(branch);
        let in_flight = state.runs.active_run_id().map(str::to_owned);
        let mut last = self.append(ctx, None, Some(Origin::User), EventPayload::SessionReverted { through_seq })?;
        if let Some(run_id) = in_flight {
            // The target lies inside a run: the visible events leave it in flight, but it has no actor.
            self.close_dangling_run(
                ctx,
                run_id,
                "the session was reverted to a point inside this run; it does not go on",
            );
            last = self.lane.next_seq() - 1;
        }
        Ok(last)
    }
}

impl Handler<Revert> for SessionActor {
    type Result = ResponseActFuture<Self, Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: Revert, _: &mut Context<Self>) -> Self::Result {
        let through_seq = message.through_seq;
        let prepared = self
            .history_target(through_seq, true)
            .map(|state| (state.visibility.visible_after(through_seq), state.created_at.clone()));
        let prepared = prepared.and_then(|(ranges, created_at)| {
            let reader = self.reader.clone().ok_or(EngineError::ShuttingDown)?;
            Ok((ranges, created_at, reader, self.when_durable(through_seq)))
        });
        let session_id = self.session_id.clone();
        let rebuild = async move {
            let (ranges, created_at, reader, durable) = prepared?;
            let stopped =
                || EngineError::Unavailable { session_id: session_id.clone(), detail: "the session stopped".into() };
            durable.await.map_err(|_| stopped())??;
            let id = session_id.clone();
            tokio::task::spawn_blocking(move || project_ranges(&*reader, &ranges, &id, &created_at))
                .await
                .map_err(|error| EngineError::Storage { session_id: session_id.clone(), detail: error.to_string() })?
                .map_err(|error| EngineError::Storage { session_id: session_id.clone(), detail: error.to_string() })
        };
        Box::pin(rebuild.into_actor(self).then(move |branch, actor, ctx| {
            let last = branch.and_then(|branch| actor.commit_revert(ctx, through_seq, branch));
            let durable = last.map(|seq| actor.when_durable(seq));
            let meta = actor.state.as_ref().map(SessionState::meta);
            let session_id = actor.session_id.clone();
            async move {
                DurableWait::of(durable?).wait(&session_id).await?;
                meta.ok_or(EngineError::ShuttingDown)
            }
            .into_actor(actor)
        }))
    }
}

impl Handler<PrepareFork> for SessionActor {
    type Result = ResponseFuture<Result<ForkSource, EngineError>>;

    fn handle(&mut self, message: PrepareFork, _: &mut Context<Self>) -> Self::Result {
        let through_seq = message.through_seq;
        let visible = self.history_target(through_seq, false).map(|state| state.visibility.visible_after(through_seq));
        let prepared = visible.and_then(|visible| {
            let reader = self.reader.clone().ok_or(EngineError::ShuttingDown)?;
            Ok((visible, reader, self.when_durable(through_seq)))
        });
        let session_id = self.session_id.clone();
        Box::pin(async move {
            let (visible, reader, durable) = prepared?;
            durable.await.map_err(|_| EngineError::Unavailable {
                session_id: session_id.clone(),
                detail: "the session stopped".into(),
            })??;
            Ok(ForkSource { source_session_id: session_id, through_seq, visible, reader })
        })
    }
}
