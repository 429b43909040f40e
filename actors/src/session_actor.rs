//! `SessionActor`: one per live session, the **single writer** of that session's log.
//!
//! It owns the session's projection ([`SessionState`]), its committed events (shared, encoded once), the log
//! writer, and the list of subscribers. The engine sends it requests; the supervisor starts it (creating or
//! loading the log), is told about metadata changes, and is told when it stops.
//!
//! # Write path (group commit)
//!
//! An accepted operation gets its `seq`, is encoded once, applied to the projection and queued. At most one batch
//! is being written at a time: the writer moves to one of the engine's log writer threads (`log_writers`), which
//! writes every queued line with one `write` and one `fdatasync`, and comes back. Operations accepted meanwhile
//! form the next batch, so under load many appends share one fsync. Only when a batch is durable are its events
//! published to subscribers and its requests acknowledged. A failed write poisons the actor: it fails everything
//! pending and stops; the next request starts a fresh actor from the log.
//!
//! # Memory
//!
//! The actor keeps its projection and a bounded tail of recent events ([`SessionLimits::tail_bytes`]); older
//! events stay on disk and are read through the store's reader when a subscriber replays them (`replay`).
//!
//! # Hibernation
//!
//! With no subscribers, no pending write and no request for `hibernate_after`, the actor stops itself; its
//! metadata stays in the supervisor's index and the next request loads the log again.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use troupe_protocol::server::{EventSink, encode_event_notification};
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::events::{EventJson, EventPayload, EventsSubscribeResult, StoredEvent};
use troupe_protocol::types::session::TitleChange;
use troupe_runtime::clock::now_rfc3339;
use troupe_runtime::event_log::{self, EventReader, EventStore, FileEventStore, LogEntry, LogWriter};
use troupe_runtime::meta_cache;
use troupe_runtime::metrics::SnapshotOutcome;
use troupe_runtime::session_state::{SessionState, normalize_title};

use crate::error::EngineError;
use crate::log_writers::Written;
use crate::run_actor::RunActor;
use crate::session_supervisor::{SessionMetaChanged, SessionStopped, SessionSupervisor};

mod admin;
mod approvals;
mod compaction;
mod goals;
mod history;
mod named_output;
mod plugin_events;
mod producers;
mod replay;
mod runs;
mod snapshots;
mod stored_outputs;
mod title;
mod tool_output;
mod turn_end;
mod usage;
mod write_lane;

pub use admin::{Retire, Seal, SetArchived, Unseal};
pub use approvals::{
    ApprovalErrorKind, ApprovalOutcome, CancelPendingApprovals, CommitTreeGrant, CountPendingApprovals, GetTreeGrants,
    ListSessionApprovals, RequestApproval, RespondToApproval,
};

pub use compaction::{
    ActiveCompaction, BeginCompaction, COMPACTION_ORIGIN, CompactionSourceOfRun, ManualStart, RecordCompaction,
    RunHistory,
};
pub use goals::{
    ChangeGoalLifecycle, GetGoal, GoalErrorKind, GoalRunPlan, GoalRunTarget, PrepareGoalRun, SetGoal, StartGoalRun,
    UpdateGoalChecklist,
};
pub use history::{PrepareFork, Revert};
pub use named_output::SubscribeToolOutput;
pub use plugin_events::EmitPluginEvent;
pub use producers::{
    DiscardOutcome, DiscardProducerMessage, PRODUCER_ORIGIN, ProducerLane, ProducerReceipt, SendProducerMessage,
};
use replay::EventTail;
pub use replay::SessionLimits;
pub use runs::{
    AppendRunEvent, AppendTrackedRunEvent, CancelActiveRun, NextRunSelection, PromotePendingInputs, RecallSteer,
    RunOutput, StartDelegatedRun, StartRun, SteerRun, ToolStdin, TrackedEvent, Until,
};
pub use stored_outputs::StoredOutputLimits;
use tool_output::{Subscriber, ToolOutputStreams};
pub use turn_end::{EndToolFreeTurn, TurnEnd};
pub use usage::GetUsage;
use write_lane::{Durability, WriteLane};

/// How the actor gets its log when it starts.
pub enum Opening {
    /// Create a new log whose first event is `session_created`.
    Create { first: Box<StoredEvent> },
    /// Load the existing log.
    Load,
    /// Copy a prefix of another session into a new log (`session.fork`), then load it.
    Fork { source: Box<troupe_runtime::fork::ForkSource> },
}

/// The session's metadata.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct GetMeta;

/// Sets, clears or resets the title; idempotent by `client_rename_id`. Replies once the event is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct Rename {
    pub client_rename_id: String,
    pub change: TitleChange,
}

/// Registers a subscriber and returns the first page of committed events after `cursor`; the rest follow on the
/// sink, replayed and then live, without a gap or an overlap (see `replay`).
#[derive(Message)]
#[rtype(result = "Result<EventsSubscribeResult, EngineError>")]
pub struct Subscribe {
    pub sink: EventSink,
    pub cursor: Option<u64>,
}

/// Resolves once everything accepted so far is durable and the metadata cache written (used at shutdown).
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct Drain;

/// Test-only fault hook: the handler panics, as a bug in a session would.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "()")]
pub struct InjectPanic;

/// Test-only load hook: the actor handles no message for `duration`, so its mailbox fills as under a burst of
/// requests and senders wait for room.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stall {
    pub duration: std::time::Duration,
}

/// How long a session actor that could not open its log keeps answering the requests already sent to it.
const FAILED_LINGER: Duration = Duration::from_millis(500);

enum Phase {
    /// Creating or loading the log; the mailbox is paused until this ends.
    Starting,
    Ready,
    /// The log could not be opened, or a write failed. Every request gets this error until the actor stops (soon:
    /// the next request after that reloads the session).
    Failed(EngineError),
}

pub struct SessionActor {
    session_id: String,
    session_dir: PathBuf,
    /// Distinguishes this actor from an earlier or later one of the same session in the supervisor's books.
    incarnation: u64,
    supervisor: Addr<SessionSupervisor>,
    opening: Option<Opening>,
    phase: Phase,
    /// The projection, including accepted events that are not durable yet. `None` until started.
    state: Option<SessionState>,
    /// The newest durable events, oldest first, with strictly increasing `seq`; older ones are read from the log.
    tail: EventTail,
    /// Reads durable events from the log, on any thread. `None` until started.
    reader: Option<Arc<dyn EventReader>>,
    /// The path of events to the log: sequences, batches, durability waiters, poisoning (`write_lane`).
    lane: WriteLane<Box<dyn EventStore>>,
    /// Live subscribers: every committed event is offered to them.
    subscribers: Vec<Subscriber>,
    /// Subscribers whose stored events a replay pump is still delivering, by pump id.
    replays: HashMap<u64, Arc<EventSink>>,
    next_replay_id: u64,
    /// The actor of the active run, if this actor started it.
    run_actor: Option<Addr<RunActor>>,
    /// Retained output of running tool calls, for snapshots and gap notices.
    tool_output: ToolOutputStreams,
    /// Whole outputs of loud running calls, stored for `output_ref` (`stored_outputs`).
    stored_outputs: stored_outputs::StoredOutputs,
    /// Runs waiting for answers to their approvals.
    approval_waiters: approvals::ApprovalWaiters,
    /// Producer messages: waking the session for them (`producers`).
    producers: ProducerLane,
    limits: SessionLimits,
    last_request: Instant,
    /// What the supervisor was last told about this session's goal (`goals`).
    goal_reported: Option<crate::goal_actor::GoalReport>,
    /// Whether this session was created by `session.fork` (a run in flight in its log was copied, not lost).
    forked: bool,
    /// The manual compaction in progress (`compaction`): the session is busy while it runs.
    compaction: Option<ActiveCompaction>,
    /// The automatic title job in flight (`title`), to cancel when a client names the session: one at a time,
    /// and the actor waits for it.
    title_job: Option<tokio_util::sync::CancellationToken>,
    /// The log length the newest projection snapshot covers (written or being written; `snapshots`).
    snapshot_len: u64,
    /// Whether a live snapshot is being written (one at a time).
    snapshot_writing: bool,
    /// Where the metadata is published for `session.get` (`published_meta`).
    published: crate::published_meta::PublishedMeta,
}

impl SessionActor {
    pub fn new(
        session_id: String,
        session_dir: PathBuf,
        incarnation: u64,
        supervisor: Addr<SessionSupervisor>,
        opening: Opening,
        limits: SessionLimits,
        producers: ProducerLane,
    ) -> Self {
        SessionActor {
            stored_outputs: stored_outputs::StoredOutputs::new(session_dir.clone(), limits.stored_output),
            session_id,
            session_dir,
            incarnation,
            supervisor,
            opening: Some(opening),
            phase: Phase::Starting,
            state: None,
            tail: EventTail::default(),
            reader: None,
            lane: WriteLane::unopened(),
            subscribers: Vec::new(),
            replays: HashMap::new(),
            next_replay_id: 1,
            run_actor: None,
            tool_output: ToolOutputStreams::default(),
            approval_waiters: Default::default(),
            producers,
            limits,
            last_request: Instant::now(),
            goal_reported: None,
            forked: false,
            compaction: None,
            title_job: None,
            snapshot_len: 0,
            snapshot_writing: false,
            published: Default::default(),
        }
    }

    fn storage_error(&self, detail: impl std::fmt::Display) -> EngineError {
        EngineError::Storage { session_id: self.session_id.clone(), detail: detail.to_string() }
    }

    /// The state, if the actor is ready to serve requests.
    fn ready_state(&mut self) -> Result<&SessionState, EngineError> {
        self.last_request = Instant::now();
        match &self.phase {
            Phase::Ready => {}
            Phase::Failed(error) => return Err(error.clone()),
            Phase::Starting => {
                return Err(EngineError::Unavailable {
                    session_id: self.session_id.clone(),
                    detail: "the session is still starting".into(),
                });
            }
        }
        self.state.as_ref().ok_or_else(|| EngineError::Unavailable {
            session_id: self.session_id.clone(),
            detail: "the session has no state".into(),
        })
    }

    /// The daemon's metrics, which the log counts its commits into (`None` in tests that build actors by hand).
    fn metrics(&self) -> Option<troupe_runtime::metrics::Metrics> {
        self.producers.run_context.as_ref().map(|context| context.services.metrics.clone())
    }

    fn start_from(
        &mut self,
        ctx: &mut Context<Self>,
        state: SessionState,
        tail: VecDeque<LogEntry>,
        mut store: FileEventStore,
    ) {
        if let Some(metrics) = self.metrics() {
            store.observe(metrics);
        }
        self.tail = EventTail::new(tail, self.limits.tail_bytes);
        self.reader = Some(store.reader());
        self.lane.open(Box::new(store));
        let dangling_run = state.runs.active_run_id().map(str::to_owned);
        self.state = Some(state);
        self.phase = Phase::Ready;
        // A run that was active in the log has no actor now: the daemon restarted or this session crashed (or, in
        // a fork, the run was copied from its source, where it goes on).
        if let Some(run_id) = dangling_run {
            let reason = if self.forked {
                "the run was copied by a fork while in flight; it continues only in its source session"
            } else {
                "the daemon stopped or the session restarted while the run was in flight"
            };
            self.close_dangling_run(ctx, run_id, reason);
        }
        self.goals_started(ctx);
        self.recover_producer_messages(ctx);
        // What the load found is published now unless the recovery above appended (a dangling run closed, a goal
        // or a producer's message taken up): the commit of those events publishes, and until then `session.get`
        // asks this actor, which answers after them. The state as loaded is not what the session is any more.
        if !self.lane.has_queued() && self.lane.store().is_some() {
            self.report_meta();
        }
    }

    /// Ends a run that has no actor: its pending approvals are cancelled and it is recorded as interrupted.
    fn close_dangling_run(&mut self, ctx: &mut Context<Self>, run_id: String, reason: &str) {
        if let Err(error) = self.cancel_pending_approvals(ctx, &run_id, "the run was interrupted") {
            tracing::error!(session_id = %self.session_id, %error, "could not cancel approvals of a dangling run");
        }
        // Its delegations whose children were at work end with it (the children's own runs are interrupted by
        // their sessions).
        let open_delegates = self.state.as_ref().and_then(|state| state.runs.active.as_ref());
        let open_delegates = open_delegates.map(|active| active.open_delegates.clone()).unwrap_or_default();
        for (tool_call_id, child_session_id) in open_delegates {
            let finished = EventPayload::DelegateFinished {
                tool_call_id,
                child_session_id,
                status: troupe_protocol::types::events::DelegateStatus::Interrupted,
                summary: "the delegated task was interrupted: the run that delegated it ended without waiting for it"
                    .to_owned(),
            };
            let origin = Some(crate::session_supervisor::DELEGATE_ORIGIN.to_owned());
            if let Err(error) = self.append(ctx, Some(run_id.clone()), origin, finished) {
                tracing::error!(session_id = %self.session_id, %error, "could not close a dangling delegation");
            }
        }
        let interrupted = EventPayload::RunInterrupted { reason: Some(reason.to_owned()) };
        if let Err(error) = self.append(ctx, Some(run_id), None, interrupted) {
            tracing::error!(session_id = %self.session_id, %error, "could not interrupt a dangling run");
        }
    }

    /// Publishes the metadata for `session.get` and tells the supervisor's index.
    fn report_meta(&self) {
        if let Some(state) = &self.state {
            let meta = state.meta();
            self.published.publish(meta.clone());
            self.supervisor.do_send(SessionMetaChanged { meta });
        }
    }

    /// Publishes the metadata to `published` (the engine's view of this live session) from now on.
    pub fn publishing_to(mut self, published: crate::published_meta::PublishedMeta) -> Self {
        self.published = published;
        self
    }

    /// Accepts an event: assigns its `seq`, encodes it once, applies it, and queues it for the next batch.
    fn append(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: Option<String>,
        origin: Option<String>,
        payload: EventPayload,
    ) -> Result<u64, EngineError> {
        let seq = self.lane.next_seq();
        if seq == 1 {
            // Only `session_created` may be sequence 1, and it is written when the log is created. A log with no
            // readable event at all (empty, or every line damaged) has nothing to anchor a sequence on: an event
            // numbered 1 here would be refused by the next load, after it was acknowledged.
            return Err(EngineError::SessionDamaged { session_id: self.session_id.clone() });
        }
        let event =
            StoredEvent { session_id: self.session_id.clone(), run_id, seq, timestamp: now_rfc3339(), origin, payload };
        let json = EventJson::encode(&event).map_err(|error| self.storage_error(format!("encoding: {error}")))?;
        let Some(state) = self.state.as_mut() else {
            return Err(EngineError::Unavailable {
                session_id: self.session_id.clone(),
                detail: "the session has no state".into(),
            });
        };
        self.lane.enqueue(LogEntry { seq, json })?;
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
            self.tool_output.finish_call(&self.session_id, tool_call_id, &mut self.subscribers);
            self.stored_outputs.forget(tool_call_id);
        }
        self.write_next_batch(ctx);
        self.follow_producer_messages(ctx, &event);
        Ok(seq)
    }

    /// Runs `accept`, which appends events, without starting a batch before it returns; then the events go to the
    /// writer together, in one batch unless one is already in flight (they then join the next one, together). A
    /// run's last turn, its usage and its end become durable with one `fdatasync` this way.
    fn append_together<T>(
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
    fn when_durable(&mut self, seq: u64) -> Durability {
        self.lane.when_durable(seq)
    }

    /// Hands the queued events to a log writer thread (`log_writers`) unless a batch is already being written.
    fn write_next_batch(&mut self, ctx: &mut Context<Self>) {
        // Nothing while a batch is in flight (its completion starts the next one), held, or nothing is queued.
        let Some((store, batch)) = self.lane.take_batch() else { return };
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
                actor.commit(durable.entries);
                actor.maybe_snapshot(ctx);
                actor.write_next_batch(ctx);
            }
            Ok(Written { outcome: Err(error), .. }) => actor.poison(ctx, actor.storage_error(error)),
            // The store went with the job: nothing more can be written by this actor.
            Err(error) => actor.poison(ctx, actor.storage_error(error)),
        }));
    }

    /// Publishes a durable batch: to the tail, to live subscribers, then to waiting requests. (Replaying
    /// subscribers get these events from their pump.)
    fn commit(&mut self, batch: Vec<LogEntry>) {
        let (Some(first), Some(last)) = (batch.first().map(|event| event.seq), batch.last().map(|event| event.seq))
        else {
            return;
        };
        // Before the events reach anyone: a client that holds an event, or was told its write is durable, reads
        // it back with `session.get`.
        self.report_meta();
        for event in batch {
            if !self.subscribers.is_empty() {
                let frame = encode_event_notification(&self.session_id, &event.json);
                self.subscribers.retain(|subscriber| subscriber.sink.offer(event.seq, &frame).is_ok());
            }
            self.tail.push(event);
        }
        self.report_goal();
        self.lane.release_waiters();
        self.report_usage(first, last);
    }

    /// A write failed: nothing more may be written by this actor. Everything pending fails and the actor stops,
    /// so the next request reloads the session from what is actually on disk.
    fn poison(&mut self, ctx: &mut Context<Self>, error: EngineError) {
        tracing::error!(session_id = %self.session_id, %error, "session log write failed; restarting the session");
        self.lane.poison(error.clone());
        self.phase = Phase::Failed(error);
        ctx.stop();
    }

    /// Loading or creating the log failed. Requests already sent here get the error; the supervisor forgets this
    /// actor at once, so the next request starts a fresh one, which tries again (the cause may be gone: a full disk,
    /// a file put back); and the actor stops soon after, leaving nothing behind.
    fn fail_to_open(&mut self, ctx: &mut Context<Self>, error: EngineError) {
        tracing::warn!(session_id = %self.session_id, %error, "the session could not be opened");
        self.phase = Phase::Failed(error);
        self.supervisor.do_send(SessionStopped { session_id: self.session_id.clone(), incarnation: self.incarnation });
        ctx.run_later(FAILED_LINGER, |_, ctx| ctx.stop());
    }

    /// Writing the metadata cache (`meta.json`) as of now, to run on a blocking thread; `None` while the log is
    /// not in the actor's hands (a batch in flight, a failed write) or the session has no state.
    fn meta_cache_job(&self) -> Option<impl FnOnce() + Send + use<>> {
        let (Some(state), Some(store)) = (&self.state, self.lane.store()) else { return None };
        let (session_dir, meta, len) = (self.session_dir.clone(), state.meta(), store.len_bytes());
        let (session_id, usage) = (self.session_id.clone(), state.usage.summary().clone());
        Some(move || {
            if let Err(error) = meta_cache::write(&session_dir, &meta, &usage, len) {
                tracing::warn!(%session_id, %error, "could not write the metadata cache");
            }
        })
    }

    /// Ends every subscription this actor still holds, live or replaying, with its one `gap` notice (pointing
    /// after the last event each was sent), so its client resubscribes from its cursor (and reaches the next actor
    /// of the session) instead of waiting for events this actor will never send.
    fn end_subscriptions(&mut self) {
        for subscriber in self.subscribers.drain(..) {
            subscriber.sink.end_with_gap();
        }
        for (_, sink) in self.replays.drain() {
            sink.end_with_gap();
        }
    }

    fn maybe_hibernate(&mut self, ctx: &mut Context<Self>) {
        self.subscribers.retain(|subscriber| !subscriber.sink.is_closed());
        self.replays.retain(|_, sink| !sink.is_closed());
        let running = self.state.as_ref().is_some_and(|state| state.runs.active.is_some())
            || self.compaction.is_some()
            || self.title_job.is_some();
        let idle = !running
            && self.subscribers.is_empty()
            && self.replays.is_empty()
            && self.lane.is_settled()
            && self.last_request.elapsed() >= self.limits.hibernate_after;
        if idle && matches!(self.phase, Phase::Ready) {
            tracing::debug!(session_id = %self.session_id, "hibernating idle session");
            ctx.stop();
        } else if matches!(self.phase, Phase::Ready) {
            self.maybe_snapshot(ctx);
        }
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let session_dir = self.session_dir.clone();
        match self.opening.take() {
            Some(Opening::Create { first }) => {
                let metrics = self.metrics();
                let open = async move {
                    tokio::task::spawn_blocking(move || {
                        let json = EventJson::encode(&first).map_err(|error| error.to_string())?;
                        let writer = LogWriter::create_observed(&session_dir, &json, metrics)
                            .map_err(|error| error.to_string())?;
                        let entry = LogEntry { seq: first.seq, json };
                        let store = FileEventStore::created(writer, &entry);
                        Ok::<_, String>((first, entry, store))
                    })
                    .await
                };
                ctx.wait(open.into_actor(self).map(|joined, actor, ctx| {
                    let created = joined.map_err(|error| error.to_string()).and_then(|result| result);
                    match created.and_then(|(first, entry, store)| {
                        let state = SessionState::created(&first).map_err(|error| error.to_string())?;
                        Ok((state, entry, store))
                    }) {
                        Ok((state, entry, store)) => actor.start_from(ctx, state, VecDeque::from([entry]), store),
                        Err(detail) => {
                            let error = actor.storage_error(detail);
                            actor.fail_to_open(ctx, error);
                        }
                    }
                }));
            }
            opening @ (Some(Opening::Load) | Some(Opening::Fork { .. }) | None) => {
                let tail_bytes = self.limits.tail_bytes;
                let fork = match opening {
                    Some(Opening::Fork { source }) => Some(source),
                    _ => None,
                };
                self.forked = fork.is_some();
                let load = async move {
                    tokio::task::spawn_blocking(move || {
                        if let Some(source) = fork {
                            history::copy_fork(&session_dir, &source)?;
                        }
                        let started = Instant::now();
                        // Through the projection snapshot when it matches the log (`snapshots`).
                        let projected =
                            event_log::open_projected(&session_dir, tail_bytes).map_err(history::OpenError::Runtime)?;
                        let snapshot_len = snapshots::after_load(&session_dir, &projected);
                        let (mut state, opened, snapshot) = (projected.state, projected.opened, projected.snapshot);
                        troupe_runtime::branch::settle_loaded(&mut state, &*opened.store.reader())
                            .map_err(history::OpenError::Runtime)?;
                        let measured = (SnapshotOutcome::from(&snapshot), started.elapsed());
                        Ok::<_, history::OpenError>((state, opened, snapshot_len, measured))
                    })
                    .await
                };
                ctx.wait(load.into_actor(self).map(|joined, actor, ctx| {
                    let (state, opened, snapshot_len, (outcome, elapsed)) = match joined {
                        Ok(Ok(loaded)) => loaded,
                        Ok(Err(error)) => {
                            let error = actor.open_error(error);
                            return actor.fail_to_open(ctx, error);
                        }
                        Err(error) => {
                            let error = actor.storage_error(error);
                            return actor.fail_to_open(ctx, error);
                        }
                    };
                    for diagnostic in &opened.diagnostics {
                        tracing::warn!(
                            session_id = %actor.session_id, seq = diagnostic.seq, detail = %diagnostic.detail,
                            "an event of the log was repaired while loading"
                        );
                    }
                    if let Some(metrics) = actor.metrics() {
                        metrics.session_loaded(outcome, elapsed);
                    }
                    actor.snapshot_len = snapshot_len;
                    actor.start_from(ctx, state, opened.tail, opened.store);
                }));
            }
        }
        let check_every = (self.limits.hibernate_after / 2).clamp(Duration::from_millis(20), Duration::from_secs(5));
        ctx.run_interval(check_every, |actor, ctx| actor.maybe_hibernate(ctx));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.snapshot_at_stop();
        if let Some(write) = self.meta_cache_job() {
            // The cache is only a cache (validated by the log's length), so it is written off the actor's thread
            // and nothing waits for it.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(write)),
                // The arbiter's runtime is already gone (the daemon is exiting). The cache is optional: the next
                // start finds it stale or missing and reads the log instead.
                Err(_) => drop(write),
            }
        }
        self.supervisor.do_send(SessionStopped { session_id: self.session_id.clone(), incarnation: self.incarnation });
    }
}

/// Every way an actor ends passes here: a poisoned log, retirement, hibernation, shutdown, and a panic, whose unwinding
/// drops the actor without running `stopped`. Its subscribers are ended here, not on each path, so no path can leave
/// a subscription open with nobody to feed it (an already closed one is left as it is).
impl Drop for SessionActor {
    fn drop(&mut self) {
        self.end_subscriptions();
    }
}

impl Handler<GetMeta> for SessionActor {
    type Result = Result<SessionMeta, EngineError>;

    fn handle(&mut self, _: GetMeta, _: &mut Context<Self>) -> Self::Result {
        Ok(self.ready_state()?.meta())
    }
}

impl SessionActor {
    /// Accepts a rename, or recognizes its redelivery; returns the `seq` whose durability answers it.
    fn accept_rename(&mut self, ctx: &mut Context<Self>, message: Rename) -> Result<u64, EngineError> {
        self.ready_state()?;
        let change = match message.change {
            TitleChange::Set { title } => TitleChange::Set {
                title: normalize_title(&title).map_err(|reason| EngineError::InvalidTitle {
                    session_id: self.session_id.clone(),
                    client_rename_id: message.client_rename_id.clone(),
                    reason,
                })?,
            },
            other => other,
        };
        let recorded = self.state.as_ref().and_then(|state| state.recorded_rename(&message.client_rename_id));
        if let Some(recorded) = recorded {
            if recorded.change != change {
                return Err(EngineError::RenameIdempotencyConflict {
                    session_id: self.session_id.clone(),
                    client_rename_id: message.client_rename_id,
                });
            }
            // A redelivery: answered like the original, once the original is durable.
            return Ok(recorded.seq);
        }
        let title = match &change {
            TitleChange::Set { title } => Some(title.clone()),
            TitleChange::Clear | TitleChange::Reset => None,
        };
        if change != TitleChange::Reset {
            // A client's title wins over an automatic one still being asked for.
            self.cancel_title_job();
        }
        let payload = EventPayload::SessionTitleCommitted {
            title,
            change: (&change).into(),
            client_rename_id: message.client_rename_id,
        };
        self.append(ctx, None, Some("user".to_owned()), payload)
    }
}

impl Handler<Rename> for SessionActor {
    type Result = ResponseFuture<Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: Rename, ctx: &mut Context<Self>) -> Self::Result {
        let durable = self.accept_rename(ctx, message).map(|seq| self.when_durable(seq));
        let meta = self.state.as_ref().map(SessionState::meta);
        let session_id = self.session_id.clone();
        Box::pin(async move {
            durable?
                .await
                .map_err(|_| EngineError::Unavailable { session_id, detail: "the session stopped".into() })??;
            meta.ok_or(EngineError::ShuttingDown)
        })
    }
}

impl Handler<Drain> for SessionActor {
    type Result = ResponseActFuture<Self, Result<(), EngineError>>;

    fn handle(&mut self, _: Drain, _: &mut Context<Self>) -> Self::Result {
        let last_accepted = self.lane.next_seq().saturating_sub(1);
        let durable = self.when_durable(last_accepted);
        Box::pin(async move { durable.await.unwrap_or(Ok(())) }.into_actor(self).then(|drained, actor, _| {
            // The daemon is stopping, and its session threads stop without running `stopped`: the metadata cache is
            // written here, and waited for, so the next start finds it current instead of reading every log that
            // was live again before its first `session.list`.
            let write = actor.meta_cache_job();
            async move {
                if let Some(write) = write
                    && let Err(error) = tokio::task::spawn_blocking(write).await
                {
                    tracing::warn!(%error, "the metadata cache's writer thread failed");
                }
                drained
            }
            .into_actor(actor)
        }))
    }
}

#[cfg(feature = "test-hooks")]
impl Handler<Stall> for SessionActor {
    type Result = ();

    fn handle(&mut self, message: Stall, ctx: &mut Context<Self>) {
        // `wait` holds back every other message until the timer ends.
        ctx.wait(actix::clock::sleep(message.duration).into_actor(self));
    }
}

#[cfg(feature = "test-hooks")]
impl Handler<InjectPanic> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: InjectPanic, _: &mut Context<Self>) {
        panic!("injected fault in session {}", self.session_id);
    }
}
