//! The session actor's side of producer messages: accepting a send (idempotent by owner and key, acknowledged
//! once durable), discarding, and delivering.
//!
//! Delivery rules (docs/runtime-semantics.md):
//! - `steer` messages enter the active run at its next boundary, after pending user steering
//!   (`producer_messages_claimed`, then one `user_input_submitted` per message, origin `engine:producer`).
//! - `queue` messages wait for the active run to end.
//! - When the session is idle and a message is pending, of either mode, the actor starts a run itself (origin
//!   `engine:producer`, the latest run's selection, else the creation selection) whose input is the pending
//!   messages, oldest first, as many as fit in `[limits] max_input_bytes` (at least one), and claims them for it;
//!   the rest wait for the next run. A boundary claims `steer` messages under the same bound.
//! - A session holds at most [`MAX_HELD_MESSAGES`] messages and [`MAX_HELD_BYTES`] bytes of bodies pending or
//!   claimed; a send beyond either is refused (`producer_backlog_full`) and nothing is written.
//! - A claimed message is consumed (`producer_message_consumed`) when the claiming run's next model turn commits,
//!   or when that run ends; a run that is interrupted (the daemon or session stopped) releases its messages
//!   (`producer_messages_released`), and so does every claim found when the session starts, so each message still
//!   reaches a run once more after a crash.

use actix::prelude::*;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::origin::Origin;
use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner};
use troupe_runtime::clock::new_id;
use troupe_runtime::producer_book::{
    BODY_SEPARATOR, FinishedHow, MAX_HELD_BYTES, MAX_HELD_MESSAGES, MessageStanding, oldest_within,
};

use super::SessionActor;
use crate::error::EngineError;
use crate::run_start::{EngineRunContext, PreparedRun, RunRequest, StartRun};

/// The session actor's producer state that is not in the projection.
#[derive(Default)]
pub struct ProducerLane {
    /// How to start a run nobody asked for; `None` only in tests that build actors by hand.
    pub run_context: Option<EngineRunContext>,
    /// A wake-up is being prepared; another is not scheduled meanwhile.
    wake_scheduled: bool,
}

impl ProducerLane {
    pub fn new(run_context: Option<EngineRunContext>) -> Self {
        ProducerLane { run_context, wake_scheduled: false }
    }

    /// The most one run's producer input may hold (`[limits] max_input_bytes`; unbounded in hand-built tests).
    fn max_input_bytes(&self) -> usize {
        self.run_context.as_ref().map_or(usize::MAX, |context| context.max_input_bytes)
    }
}

/// What a send was answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerReceipt {
    pub message_id: String,
    /// The `seq` of the message's `producer_message_accepted`.
    pub seq: u64,
    /// Whether this answered a retry of an earlier send (no new event).
    pub replayed: bool,
}

/// Sends a producer message into the session. Replies once `producer_message_accepted` is durable.
#[derive(Message)]
#[rtype(result = "Result<ProducerReceipt, EngineError>")]
pub struct SendProducerMessage {
    pub owner: ProducerOwner,
    pub mode: ProducerMessageMode,
    pub idempotency_key: String,
    pub body: String,
}

/// What a discard did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscardOutcome {
    /// The message was pending; `producer_message_discarded` is durable.
    Discarded,
    /// It had been discarded before (no new event).
    AlreadyDiscarded,
    /// A run already claimed or consumed it: too late to withdraw (no event).
    AlreadyDelivered,
}

/// Withdraws a pending message of `owner`. Idempotent, and independent of any registration.
#[derive(Message)]
#[rtype(result = "Result<DiscardOutcome, EngineError>")]
pub struct DiscardProducerMessage {
    pub owner: ProducerOwner,
    pub message_id: String,
}

/// The origin of an accepted message's event: the plugin for a plugin's messages, else the engine.
fn accepted_origin(owner: &ProducerOwner) -> Origin {
    match owner {
        ProducerOwner::Plugin { plugin } => Origin::plugin(plugin),
        _ => Origin::PRODUCER,
    }
}

impl SessionActor {
    fn accept_producer_message(
        &mut self,
        ctx: &mut Context<Self>,
        message: SendProducerMessage,
    ) -> Result<(u64, ProducerReceipt), EngineError> {
        let session_id = self.session_id.clone();
        let state = self.ready_state()?;
        if state.creation_lost {
            return Err(EngineError::SessionDamaged { session_id });
        }
        if let Some(receipt) = state.producers.receipt(&message.owner, &message.idempotency_key) {
            if !receipt.same_content(message.mode, &message.body) {
                return Err(EngineError::ProducerIdempotencyConflict {
                    session_id,
                    idempotency_key: message.idempotency_key,
                    message_id: receipt.message_id.clone(),
                });
            }
            // A retry: the original receipt, once the original is durable.
            let replayed = ProducerReceipt { message_id: receipt.message_id.clone(), seq: receipt.seq, replayed: true };
            return Ok((receipt.seq, replayed));
        }
        let (held, bytes) = (state.producers.len(), state.producers.held_bytes());
        if held >= MAX_HELD_MESSAGES || bytes.saturating_add(message.body.len()) > MAX_HELD_BYTES {
            return Err(EngineError::ProducerBacklogFull {
                session_id,
                messages: held,
                bytes,
                max_messages: MAX_HELD_MESSAGES,
                max_bytes: MAX_HELD_BYTES,
            });
        }
        let message_id = new_id();
        let payload = EventPayload::ProducerMessageAccepted {
            message_id: message_id.clone(),
            producer_owner: message.owner.clone(),
            mode: message.mode,
            idempotency_key: message.idempotency_key,
            body: message.body,
        };
        let seq = self.append(ctx, None, Some(accepted_origin(&message.owner)), payload)?;
        self.schedule_producer_wake(ctx);
        Ok((seq, ProducerReceipt { message_id, seq, replayed: false }))
    }

    fn discard_producer_message(
        &mut self,
        ctx: &mut Context<Self>,
        message: DiscardProducerMessage,
    ) -> Result<(u64, DiscardOutcome), EngineError> {
        let state = self.ready_state()?;
        let not_found = || EngineError::ProducerMessageNotFound {
            session_id: state.session_id.clone(),
            message_id: message.message_id.clone(),
        };
        let (owner, outcome) = match state.producers.standing(&message.message_id) {
            MessageStanding::Pending(pending) => (&pending.owner, DiscardOutcome::Discarded),
            MessageStanding::Claimed(claimed) => (&claimed.owner, DiscardOutcome::AlreadyDelivered),
            MessageStanding::Finished(finished) => (
                &finished.owner,
                match finished.how {
                    FinishedHow::Discarded => DiscardOutcome::AlreadyDiscarded,
                    FinishedHow::Consumed => DiscardOutcome::AlreadyDelivered,
                },
            ),
            MessageStanding::Unknown => return Err(not_found()),
        };
        // Another owner's message is not this owner's to withdraw, nor to learn about.
        if *owner != message.owner {
            return Err(not_found());
        }
        if outcome != DiscardOutcome::Discarded {
            return Ok((0, outcome));
        }
        let payload = EventPayload::ProducerMessageDiscarded { message_id: message.message_id };
        let seq = self.append(ctx, None, Some(accepted_origin(&message.owner)), payload)?;
        Ok((seq, outcome))
    }

    /// At a steering boundary of `run_id`: claims the pending `steer` messages for it, oldest first, as many as fit
    /// in `max_input_bytes` (at least one; the rest wait for the next boundary), and submits each as an input.
    /// Returns the last event's `seq` and the bodies, oldest first; `None` when there is none.
    pub(super) fn claim_steer_messages(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: &str,
    ) -> Result<Option<(u64, Vec<String>)>, EngineError> {
        let Some(state) = self.state.as_ref() else { return Ok(None) };
        let steer: Vec<(String, String)> =
            oldest_within(state.producers.pending_of(ProducerMessageMode::Steer), self.producers.max_input_bytes())
                .into_iter()
                .map(|message| (message.message_id.clone(), message.body.clone()))
                .collect();
        if steer.is_empty() {
            return Ok(None);
        }
        let origin = Some(Origin::PRODUCER);
        let message_ids = steer.iter().map(|(id, _)| id.clone()).collect();
        let mut seq = self.append(
            ctx,
            Some(run_id.to_owned()),
            origin.clone(),
            EventPayload::ProducerMessagesClaimed { message_ids },
        )?;
        let mut bodies = Vec::with_capacity(steer.len());
        for (message_id, body) in steer {
            let payload =
                EventPayload::UserInputSubmitted { input_id: message_id, input: body.clone(), attachments: Vec::new() };
            seq = self.append(ctx, Some(run_id.to_owned()), origin.clone(), payload)?;
            bodies.push(body);
        }
        Ok(Some((seq, bodies)))
    }

    /// Follows an appended event: a committed model turn or the end of a run consumes what its run claimed; an
    /// interrupted run releases it; a session left idle with pending messages wakes. Called by `append` for every
    /// event; the events it appends itself need nothing more.
    pub(super) fn follow_producer_messages(&mut self, ctx: &mut Context<Self>, event: &StoredEvent) {
        let Some(run_id) = event.run_id.as_deref() else { return };
        let interrupted = match &event.payload {
            EventPayload::ModelTurnCommitted { .. }
            | EventPayload::RunCompleted { .. }
            | EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. } => false,
            EventPayload::RunInterrupted { .. } => true,
            _ => return,
        };
        let claimed: Vec<String> = match self.state.as_ref() {
            Some(state) => state.producers.claimed_by(run_id).map(|message| message.message_id.clone()).collect(),
            None => return,
        };
        let origin = Some(Origin::PRODUCER);
        let outcome = if claimed.is_empty() {
            Ok(0)
        } else if interrupted {
            let reason = "the run that claimed them was interrupted".to_owned();
            let payload = EventPayload::ProducerMessagesReleased { message_ids: claimed, reason };
            self.append(ctx, Some(run_id.to_owned()), origin, payload)
        } else {
            claimed.into_iter().try_fold(0, |_, message_id| {
                let payload = EventPayload::ProducerMessageConsumed { message_id };
                self.append(ctx, Some(run_id.to_owned()), origin.clone(), payload)
            })
        };
        if let Err(error) = outcome {
            tracing::error!(session_id = %self.session_id, %run_id, %error, "could not record producer delivery");
        }
        if !matches!(event.payload, EventPayload::ModelTurnCommitted { .. }) {
            self.schedule_producer_wake(ctx);
        }
    }

    /// When the session starts: claims left by a run that has no actor now (the daemon or the session stopped)
    /// are released, and pending messages wake the session.
    pub(super) fn recover_producer_messages(&mut self, ctx: &mut Context<Self>) {
        let Some(state) = self.state.as_ref() else { return };
        let active = state.runs.active_run_id().map(str::to_owned);
        let orphaned: Vec<String> = state
            .producers
            .claimed()
            .filter(|message| message.claimed_by != active)
            .map(|message| message.message_id.clone())
            .collect();
        if !orphaned.is_empty() {
            let reason = "the session restarted before the run that claimed them consumed them".to_owned();
            let payload = EventPayload::ProducerMessagesReleased { message_ids: orphaned, reason };
            if let Err(error) = self.append(ctx, None, Some(Origin::PRODUCER), payload) {
                tracing::error!(session_id = %self.session_id, %error, "could not release producer messages");
            }
        }
        self.schedule_producer_wake(ctx);
    }

    /// Starts preparing a run for pending messages when the session is idle. The preparation asks the runtime
    /// and the supervisor, so it runs as a future; the run starts only if the session is still idle then.
    pub(super) fn schedule_producer_wake(&mut self, ctx: &mut Context<Self>) {
        let Some(state) = self.state.as_ref() else { return };
        if self.producers.wake_scheduled || state.runs.active.is_some() || !state.producers.has_pending() {
            return;
        }
        let Some(run_context) = self.producers.run_context.clone() else { return };
        let selection = state.runs.latest_selection().unwrap_or(&state.creation_selection).clone();
        if state.creation_lost {
            return;
        }
        self.producers.wake_scheduled = true;
        let (supervisor, session_id) = (self.supervisor.clone(), self.session_id.clone());
        let prepare = async move { run_context.prepare(&supervisor, &session_id, selection).await };
        ctx.spawn(prepare.into_actor(self).map(|prepared, actor, ctx| {
            actor.producers.wake_scheduled = false;
            match prepared {
                Ok(prepared) => actor.wake_for_producers(ctx, prepared),
                Err(error) => tracing::warn!(
                    session_id = %actor.session_id, %error,
                    "producer messages are pending but no run could be prepared; they wait for the next run"
                ),
            }
        }));
    }

    /// Starts a run whose input is the oldest pending messages that fit in `max_input_bytes`, and claims them for
    /// it; the others stay pending and wake the next run when this one ends.
    fn wake_for_producers(&mut self, ctx: &mut Context<Self>, prepared: PreparedRun) {
        let Some(state) = self.state.as_ref() else { return };
        if state.runs.active.is_some() {
            // A run started meanwhile: steer messages enter it, queue messages wait for its end.
            return;
        }
        let pending: Vec<(String, String)> = oldest_within(state.producers.pending(), self.producers.max_input_bytes())
            .into_iter()
            .map(|message| (message.message_id.clone(), message.body.clone()))
            .collect();
        if pending.is_empty() {
            return;
        }
        let input = pending.iter().map(|(_, body)| body.as_str()).collect::<Vec<_>>().join(BODY_SEPARATOR);
        let runs = prepared.services.runs.clone();
        let start = StartRun { request: RunRequest::engine("producer", input), prepared };
        let started = self.start_run_as(ctx, start, Origin::PRODUCER).and_then(|(_, run_id)| {
            let message_ids = pending.into_iter().map(|(id, _)| id).collect();
            let payload = EventPayload::ProducerMessagesClaimed { message_ids };
            self.append(ctx, Some(run_id.clone()), Some(Origin::PRODUCER), payload)?;
            Ok(run_id)
        });
        match started {
            Ok(run_id) => runs.note_started(&run_id, &self.session_id),
            Err(error) => tracing::warn!(session_id = %self.session_id, %error, "could not wake for producer messages"),
        }
    }
}

impl Handler<SendProducerMessage> for SessionActor {
    type Result = ResponseFuture<Result<ProducerReceipt, EngineError>>;

    fn handle(&mut self, message: SendProducerMessage, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.accept_producer_message(ctx, message);
        self.durable_reply(accepted)
    }
}

impl Handler<DiscardProducerMessage> for SessionActor {
    type Result = ResponseFuture<Result<DiscardOutcome, EngineError>>;

    fn handle(&mut self, message: DiscardProducerMessage, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.discard_producer_message(ctx, message);
        self.durable_reply(accepted)
    }
}
