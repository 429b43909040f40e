//! The session actor's life: opening its log (created, loaded or forked) before it serves anything, closing a run
//! left without an actor, hibernating when idle, draining at shutdown, and what every way of stopping does (the
//! supervisor is told, subscriptions end with a gap notice, the metadata cache is written).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use actix::prelude::*;
use troupe_protocol::types::events::{EventJson, EventPayload};
use troupe_protocol::types::origin::Origin;
use troupe_runtime::event_log::{self, EventStore, LogEntry};
use troupe_runtime::meta_cache;
use troupe_runtime::metrics::SnapshotOutcome;
use troupe_runtime::session_state::SessionState;

use super::history::OpenError;
use super::replay::EventTail;
use super::{Opening, Phase, SessionActor};
use super::{history, snapshots};
use crate::error::EngineError;
use crate::ports::supervisor::SessionStopped;

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

impl SessionActor {
    pub(super) fn start_from(
        &mut self,
        ctx: &mut Context<Self>,
        state: SessionState,
        tail: VecDeque<LogEntry>,
        mut store: Box<dyn EventStore>,
    ) {
        if let Some(metrics) = self.metrics() {
            store.observe(metrics);
        }
        self.tail = EventTail::new(tail, self.limits.tail_bytes);
        self.reader = Some(store.reader());
        self.lane.open(store);
        let dangling_run = state.runs.active_run_id().map(str::to_owned);
        // Its spent usage as its log has it, for the supervisor's usage index, which may hold less: it was read from
        // a cache or from the session index a clean stop wrote, and the check of that index leaves a session alone
        // once its actor has loaded it (`session_supervisor/index_check.rs`). Everything loaded is durable.
        self.published_usage.leave(state.usage.summary().clone());
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
            self.report_meta(ctx);
            self.report_artifacts();
        }
    }

    /// Ends a run that has no actor: its pending approvals are cancelled and it is recorded as interrupted.
    pub(super) fn close_dangling_run(&mut self, ctx: &mut Context<Self>, run_id: String, reason: &str) {
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
            let origin = Some(Origin::DELEGATE);
            if let Err(error) = self.append(ctx, Some(run_id.clone()), origin, finished) {
                tracing::error!(session_id = %self.session_id, %error, "could not close a dangling delegation");
            }
        }
        let interrupted = EventPayload::RunInterrupted { reason: Some(reason.to_owned()) };
        if let Err(error) = self.append(ctx, Some(run_id), None, interrupted) {
            tracing::error!(session_id = %self.session_id, %error, "could not interrupt a dangling run");
        }
    }

    /// Loading or creating the log failed. Requests already sent here get the error; the supervisor forgets this
    /// actor at once, so the next request starts a fresh one, which tries again (the cause may be gone: a full disk,
    /// a file put back); and the actor stops soon after, leaving nothing behind.
    pub(super) fn fail_to_open(&mut self, ctx: &mut Context<Self>, error: EngineError) {
        match &error {
            // A cluster node asked for a session another node hosts: expected, and the request goes there.
            EngineError::SessionHostedElsewhere { .. } => {
                tracing::debug!(session_id = %self.session_id, %error, "the session is hosted by another node")
            }
            _ => tracing::warn!(session_id = %self.session_id, %error, "the session could not be opened"),
        }
        self.phase = Phase::Failed(error);
        self.supervisor.do_send(SessionStopped { session_id: self.session_id.clone(), incarnation: self.incarnation });
        ctx.run_later(FAILED_LINGER, |_, ctx| ctx.stop());
    }

    /// Writing the metadata cache (`meta.json`) as of now, to run on a blocking thread; `None` while the log is
    /// not in the actor's hands (a batch in flight, a failed write) or the session has no state.
    pub(super) fn meta_cache_job(&self) -> Option<impl FnOnce() + Send + use<>> {
        let (Some(state), Some(store)) = (&self.state, self.lane.store()) else { return None };
        let (session_dir, meta, len) = (self.session_dir.clone(), state.meta(), store.len_bytes());
        let (session_id, usage, artifacts) =
            (self.session_id.clone(), state.usage.summary().clone(), state.artifacts.clone());
        Some(move || {
            let described = meta_cache::Described { meta: &meta, usage: &usage, artifacts: &artifacts };
            if let Err(error) = meta_cache::write(&session_dir, described, len) {
                tracing::warn!(%session_id, %error, "could not write the metadata cache");
            }
        })
    }

    /// Ends every subscription this actor still holds, live or replaying, with its one `gap` notice (pointing
    /// after the last event each was sent), so its client resubscribes from its cursor (and reaches the next actor
    /// of the session) instead of waiting for events this actor will never send.
    pub(super) fn end_subscriptions(&mut self) {
        self.subscribers.end_all_with_gap();
    }

    pub(super) fn maybe_hibernate(&mut self, ctx: &mut Context<Self>) {
        self.subscribers.prune_closed();
        let running = self.state.as_ref().is_some_and(|state| state.runs.active.is_some()) || self.jobs.keep_awake();
        let idle = !running
            && self.subscribers.is_empty()
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
                let replica = self.log_replica();
                let session_id = self.session_id.clone();
                let open = async move {
                    tokio::task::spawn_blocking(move || {
                        let json = EventJson::encode(&first).map_err(|error| OpenError::Other(error.to_string()))?;
                        let entry = LogEntry { seq: first.seq, json };
                        // The replica first: the session is this node's, and its first event stored beyond it,
                        // before the local log exists.
                        let replica = replica.map(|replica| replica.create(&session_id, &entry)).transpose()?;
                        let local = event_log::create_store(&session_dir, &entry, metrics)
                            .map_err(|error| OpenError::Other(error.to_string()))?;
                        Ok::<_, OpenError>((first, entry, replicated(replica, local)))
                    })
                    .await
                };
                ctx.wait(open.into_actor(self).map(|joined, actor, ctx| {
                    let created = joined.map_err(|error| OpenError::Other(error.to_string())).and_then(|result| result);
                    match created.and_then(|(first, entry, store)| {
                        let state =
                            SessionState::created(&first).map_err(|error| OpenError::Other(error.to_string()))?;
                        Ok((state, entry, store))
                    }) {
                        Ok((state, entry, store)) => actor.start_from(ctx, state, VecDeque::from([entry]), store),
                        Err(error) => {
                            let error = actor.open_error(error);
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
                let replica = self.log_replica();
                let load = async move {
                    tokio::task::spawn_blocking(move || {
                        if let Some(source) = fork {
                            history::copy_fork(&session_dir, &source)?;
                        }
                        // The replica first: the session is this node's, and its local log holds exactly the
                        // replica's events (a fork's copy is stored in the replica here).
                        let replica = replica.map(|replica| replica.open(&session_dir)).transpose()?;
                        let started = Instant::now();
                        // Through the projection snapshot when it matches the log (`snapshots`).
                        let projected =
                            event_log::open_projected(&session_dir, tail_bytes).map_err(OpenError::Runtime)?;
                        let snapshot_len = snapshots::after_load(&session_dir, &projected);
                        let (mut state, opened, snapshot) = (projected.state, projected.opened, projected.snapshot);
                        troupe_runtime::branch::settle_loaded(&mut state, &*opened.store.reader())
                            .map_err(OpenError::Runtime)?;
                        let measured = (SnapshotOutcome::from(&snapshot), started.elapsed());
                        let store = replicated(replica, Box::new(opened.store));
                        let opened = (opened.tail, opened.diagnostics, store);
                        Ok::<_, OpenError>((state, opened, snapshot_len, measured))
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
                    let (tail, diagnostics, store) = opened;
                    for diagnostic in &diagnostics {
                        tracing::warn!(
                            session_id = %actor.session_id, seq = diagnostic.seq, detail = %diagnostic.detail,
                            "an event of the log was repaired while loading"
                        );
                    }
                    if let Some(metrics) = actor.metrics() {
                        metrics.session_loaded(outcome, elapsed);
                    }
                    actor.snapshots.covered(snapshot_len);
                    actor.start_from(ctx, state, tail, store);
                }));
            }
        }
        let check_every = (self.limits.hibernate_after / 2).clamp(Duration::from_millis(20), Duration::from_secs(5));
        ctx.run_interval(check_every, |actor, ctx| actor.maybe_hibernate(ctx));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // Before `SessionStopped`, so the supervisor's index holds the session's last progress and usage when it
        // hibernates.
        self.flush_reports();
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

/// The store a session actor writes through: the local log alone on one node, behind its replica in a cluster.
fn replicated(replica: Option<Box<dyn event_log::ReplicaWriter>>, local: Box<dyn EventStore>) -> Box<dyn EventStore> {
    match replica {
        Some(replica) => Box::new(event_log::ReplicatedStore::new(replica, local)),
        None => local,
    }
}

/// Every way an actor ends passes here: a poisoned log, retirement, hibernation, shutdown, and a panic, whose unwinding
/// drops the actor without running `stopped`. Its subscribers are ended here, not on each path, so no path can leave
/// a subscription open with nobody to feed it (an already closed one is left as it is).
impl Drop for SessionActor {
    fn drop(&mut self) {
        // A panic skips `stopped`: the supervisor's index still gets the session's last progress and usage.
        self.flush_reports();
        self.end_subscriptions();
    }
}

impl Handler<Drain> for SessionActor {
    type Result = ResponseActFuture<Self, Result<(), EngineError>>;

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) -> Self::Result {
        let last_accepted = self.lane.next_seq().saturating_sub(1);
        let durable = self.when_durable(last_accepted);
        // Events waiting for company in the next batch are written now.
        self.lane.want_now();
        self.schedule_batch(ctx);
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
