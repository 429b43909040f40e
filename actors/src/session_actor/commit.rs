//! The session's write path, from an accepted event to its acknowledgement: `append` gives it its `seq`,
//! encodes it once, applies it to the projection and queues it on the write lane (`write_lane`); at most one batch
//! is written at a time, on a log writer thread (`log_writers`), with one `write` and one `fdatasync`; a durable
//! batch is published (`commit`) to the tail, the live subscribers and the waiting requests, in that order. A
//! failed write poisons the lane and stops the actor.
//!
//! An event somebody waits for starts its batch at once (unless one is being written: it joins the next). A run's
//! events that nothing waits for (`write_lane::Start::Soon`: a model attempt started, a tool call started, its progress and
//! its result; not text deltas, which a watcher waits for) may wait up to `[limits] batch_linger_ms` (1 ms by
//! default) for company when no batch is being written: a tool turn's events and the next turn's durable commit
//! then share one `fdatasync` instead of four. The bound is how much later a subscriber may see them; a crash in
//! that window loses only events nobody was told were durable. A run about to wait on such an event (a tool call's
//! start, before its first output) asks for the batch at once (`WriteBatchNow`).

use actix::prelude::*;
use bytestring::ByteString;
use troupe_protocol::server::encode_event_notification;
use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent};
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::now_rfc3339;
use troupe_runtime::error::RuntimeError;
use troupe_runtime::event_log::{self, LogEntry};

use super::write_lane::{Durability, Start};
use super::{Phase, SessionActor};
use crate::error::EngineError;
use crate::log_writers::Written;

impl SessionActor {
    /// Accepts an event: assigns its `seq`, encodes it once, applies it, and queues it for a batch that starts now
    /// (or right after the one being written).
    pub(super) fn append(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: Option<String>,
        origin: Option<Origin>,
        payload: EventPayload,
    ) -> Result<u64, EngineError> {
        self.append_starting(ctx, run_id, origin, payload, Start::Now)
    }

    /// [`append`](Self::append), with when its batch starts: [`Start::Soon`] for a run's events that nothing waits
    /// to be durable.
    pub(super) fn append_starting(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: Option<String>,
        origin: Option<Origin>,
        payload: EventPayload,
        start: Start,
    ) -> Result<u64, EngineError> {
        let seq = self.lane.next_seq();
        if seq == 1 {
            // Only `session_created` may be sequence 1, and it is written when the log is created. A log with no
            // readable event at all (empty, or every line damaged) has nothing to anchor a sequence on: an event
            // numbered 1 here would be refused by the next load, after it was acknowledged.
            return Err(EngineError::SessionDamaged { session_id: self.session_id.clone() });
        }
        let event = StoredEvent {
            session_id: self.session_id.clone(),
            run_id,
            seq,
            timestamp: now_rfc3339(),
            origin: origin.map(|origin| origin.to_string()),
            payload,
        };
        let json = EventJson::encode(&event).map_err(|error| self.storage_error(format!("encoding: {error}")))?;
        let Some(state) = self.state.as_mut() else {
            return Err(EngineError::Unavailable {
                session_id: self.session_id.clone(),
                detail: "the session has no state".into(),
            });
        };
        self.lane.enqueue(LogEntry { seq, json }, start)?;
        state.apply(&event);
        if state.runs.active.is_none() {
            // A terminal event ended the run; its actor stops by itself.
            self.run_actor = None;
            self.stored_outputs.forget_all();
        }
        if let EventPayload::ToolCallStarted { tool_call_id, .. } = &event.payload
            && let Some(run_id) = &event.run_id
        {
            self.tool_output.start_call(tool_call_id, run_id);
        }
        if let EventPayload::ToolCallTerminated { tool_call_id, .. } = &event.payload {
            self.tool_output.finish_call(&self.session_id, tool_call_id, self.subscribers.live_mut());
            self.share_output(|| troupe_runtime::live_output_share::SharedOutput::Ended {
                tool_call_id: tool_call_id.clone(),
            });
            self.stored_outputs.forget(tool_call_id);
        }
        self.schedule_batch(ctx);
        self.follow_producer_messages(ctx, &event);
        Ok(seq)
    }

    /// Starts the next batch now if the lane wants it now (or the linger is off), else within the linger, unless a
    /// batch is being written (its completion schedules the next) or one is due already. A batch started now takes
    /// the lingering events with it and cancels the timer.
    pub(super) fn schedule_batch(&mut self, ctx: &mut Context<Self>) {
        if self.lane.is_urgent() || self.limits.batch_linger.is_zero() {
            return self.write_next_batch(ctx);
        }
        if !self.lane.has_queued() || self.linger.is_some() || self.lane.store().is_none() {
            return;
        }
        self.linger = Some(ctx.run_later(self.limits.batch_linger, |actor, ctx| {
            actor.linger = None;
            actor.write_next_batch(ctx);
        }));
    }

    /// Runs `accept`, which appends events, without starting a batch before it returns; then the events go to the
    /// writer together, in one batch unless one is already in flight (they then join the next one, together). A
    /// run's last turn, its usage and its end become durable with one `fdatasync` this way.
    pub(super) fn append_together<T>(
        &mut self,
        ctx: &mut Context<Self>,
        accept: impl FnOnce(&mut Self, &mut Context<Self>) -> T,
    ) -> T {
        let held = self.lane.hold(true);
        let accepted = accept(self, ctx);
        self.lane.hold(held);
        self.write_next_batch(ctx);
        accepted
    }

    /// A receiver that resolves when `seq` is durable (at once if it already is).
    pub(super) fn when_durable(&mut self, seq: u64) -> Durability {
        self.lane.when_durable(seq)
    }

    /// Hands the queued events to a log writer thread (`log_writers`) unless a batch is already being written (then
    /// they go right after it).
    fn write_next_batch(&mut self, ctx: &mut Context<Self>) {
        // Nothing while a batch is in flight (its completion starts the next one), held, or nothing is queued.
        let Some((store, batch)) = self.lane.take_batch() else { return };
        if let Some(linger) = self.linger.take() {
            ctx.cancel_future(linger);
        }
        let write = crate::log_writers::write(store, batch);
        ctx.spawn(write.into_actor(self).map(|written, actor, ctx| match written {
            Ok(Written { store, batch, outcome: Ok(()) }) => {
                let durable = actor.lane.complete(store, batch);
                if durable.torn_tail_cut
                    && let Some(state) = actor.state.as_mut()
                {
                    // The append cut the torn tail off: it is no longer in the log, so stop reporting it.
                    state.skipped_events.retain(|skipped| skipped.reason != event_log::TORN_REASON);
                }
                actor.commit(ctx, durable.entries);
                actor.maybe_snapshot(ctx);
                actor.schedule_batch(ctx);
            }
            Ok(Written { outcome: Err(RuntimeError::Replica(error)), .. }) => {
                actor.poison(ctx, EngineError::replica(&actor.session_id, error))
            }
            Ok(Written { outcome: Err(error), .. }) => actor.poison(ctx, actor.storage_error(error)),
            // The store went with the job: nothing more can be written by this actor.
            Err(error) => actor.poison(ctx, actor.storage_error(error)),
        }));
    }

    /// Publishes a durable batch: to the tail, to live subscribers, then to waiting requests. (Replaying
    /// subscribers get these events from their pump.)
    pub(super) fn commit(&mut self, ctx: &mut Context<Self>, batch: Vec<LogEntry>) {
        let (Some(first), Some(last)) = (batch.first().map(|event| event.seq), batch.last().map(|event| event.seq))
        else {
            return;
        };
        // Before the events reach anyone: a client that holds an event, or was told its write is durable, reads
        // it back with `session.get`.
        self.report_meta(ctx);
        if self.subscribers.has_live() {
            // Each frame encoded once for every subscriber; each subscriber gets the batch's frames at once.
            let frames: Vec<(u64, ByteString)> = batch
                .iter()
                .map(|event| (event.seq, encode_event_notification(&self.session_id, &event.json)))
                .collect();
            self.subscribers.offer_committed(&frames);
        }
        for event in batch {
            self.tail.push(event);
        }
        self.report_goal();
        self.lane.release_waiters();
        self.report_usage(first, last);
        self.report_artifacts();
    }

    /// A write failed: nothing more may be written by this actor. Everything pending fails and the actor stops,
    /// so the next request reloads the session from what is actually on disk.
    pub(super) fn poison(&mut self, ctx: &mut Context<Self>, error: EngineError) {
        tracing::error!(session_id = %self.session_id, %error, "session log write failed; restarting the session");
        self.lane.poison(error.clone());
        self.phase = Phase::Failed(error);
        ctx.stop();
    }
}
