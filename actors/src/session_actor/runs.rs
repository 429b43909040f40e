//! The session actor's side of runs: starting one (idempotent by `client_run_id`, one at a time), appending the
//! run's events, live tool output, and forwarding cancel and stdin to the run's actor. The steering lane is in
//! `steering.rs`.

use actix::prelude::*;
use tokio::sync::oneshot;
use troupe_protocol::types::common::{RunSelection, SessionOrigin};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::new_id;
use troupe_runtime::run_ledger::{RunLedger, RunPlan};
use troupe_runtime::tool_stdin::{MAX_QUEUED_STDIN_BYTES, StdinRefused};
use troupe_runtime::tools::StdinInput;

use super::SessionActor;
use super::durable::DurableWait;
use super::tool_output::OutputChunkRef;
use super::write_lane::Start;
use crate::error::EngineError;
use crate::ports::session::{
    AppendRunEvent, AppendTrackedRunEvent, CancelActiveRun, RunOutput, StartDelegatedRun, StartRun, TrackedEvent,
    Until, WriteBatchNow,
};
use crate::run_actor::{CancelRun, RunActor, RunSetup, WriteToolStdin};
use troupe_runtime::live_output_share::SharedOutput;

/// The selection the session's next run is expected to use, when a request names none: its latest run's
/// effective selection, else its creation selection.
#[derive(Message)]
#[rtype(result = "Result<RunSelection, EngineError>")]
pub struct NextRunSelection;

/// Writes to the stdin of a running tool call of the active run.
#[derive(Message)]
#[rtype(result = "Result<bool, EngineError>")]
pub struct ToolStdin {
    pub run_id: String,
    pub tool_call_id: String,
    pub data: Option<String>,
    pub eof: bool,
}

impl SessionActor {
    pub(super) fn run_not_active(&self, run_id: &str) -> EngineError {
        EngineError::RunNotActive { run_id: run_id.to_owned() }
    }

    /// Fails unless the session is ready and `run_id` is its active run.
    pub(super) fn require_active_run(&mut self, run_id: &str) -> Result<(), EngineError> {
        let state = self.ready_state()?;
        if state.runs.active_run_id() != Some(run_id) {
            return Err(self.run_not_active(run_id));
        }
        Ok(())
    }

    /// The active run's actor when `run_id` is the active run.
    fn active_run_actor(&mut self, run_id: &str) -> Result<Addr<RunActor>, EngineError> {
        self.require_active_run(run_id)?;
        self.run_actor.clone().ok_or_else(|| self.run_not_active(run_id))
    }

    pub(super) fn durable_reply<T: Send + 'static>(
        &mut self,
        accepted: Result<(u64, T), EngineError>,
    ) -> ResponseFuture<Result<T, EngineError>> {
        let session_id = self.session_id.clone();
        let durable: Result<(oneshot::Receiver<Result<(), EngineError>>, T), EngineError> =
            accepted.map(|(seq, value)| (self.when_durable(seq), value));
        Box::pin(async move {
            let (durable, value) = durable?;
            DurableWait::of(durable).wait(&session_id).await?;
            Ok(value)
        })
    }

    fn start_run(&mut self, ctx: &mut Context<Self>, message: StartRun) -> Result<(u64, String), EngineError> {
        self.start_run_as(ctx, message, Origin::User)
    }

    /// Starts a run whose `run_started` has `origin` (`user` for `run.start`; the engine's own runs, such as a
    /// producer message waking the session, name themselves).
    pub(super) fn start_run_as(
        &mut self,
        ctx: &mut Context<Self>,
        message: StartRun,
        origin: Origin,
    ) -> Result<(u64, String), EngineError> {
        self.ready_state()?;
        let last_accepted = self.lane.next_seq() - 1;
        let session_id = self.session_id.clone();
        let Some(state) = self.state.as_ref() else {
            return Err(EngineError::ShuttingDown);
        };
        let StartRun { request, prepared } = message;
        if let Some(recorded) = state.runs.recorded(&request.client_run_id) {
            let same = RunLedger::is_redelivery(
                recorded,
                &prepared.selection,
                &request.input,
                &request.attachments,
                request.reset_fallback,
                &prepared.agent_chain,
                prepared.requested_index,
            );
            if !same {
                return Err(EngineError::RunIdempotencyConflict { session_id, client_run_id: request.client_run_id });
            }
            // A redelivery: the same run, answered once its start is durable.
            // Waiting for everything accepted so far covers the original `run_started`.
            return Ok((last_accepted, recorded.run_id.clone()));
        }
        if let Some(active) = state.runs.active_run_id().or(self.jobs.busy()) {
            return Err(EngineError::SessionBusy { session_id, active_run_id: active.to_owned() });
        }
        if state.creation_lost {
            return Err(EngineError::SessionDamaged { session_id });
        }
        // The chain: the agent's chain from the requested model on, trimmed to a sticky fallback of this scope.
        let RunPlan { selection, fallback_index, model_chain } = state.runs.plan(
            &prepared.selection,
            request.reset_fallback,
            &prepared.agent_chain,
            prepared.requested_index,
        );
        let cwd = std::path::PathBuf::from(&state.cwd);
        let run_id = new_id();
        let title_input = state.awaits_auto_title().then(|| request.input.clone());
        let payload = EventPayload::RunStarted {
            client_run_id: request.client_run_id,
            selection: selection.clone(),
            input: request.input,
            fallback_index: fallback_index as u32,
            model_chain: model_chain.clone(),
            reset_fallback: request.reset_fallback,
            skill: request.skill,
            requested_model: Some(prepared.selection.model.clone()),
            attachments: request.attachments,
        };
        // Offered the goal tools when the root session has a goal now: frozen for the run's life.
        let goal_tools = state.origin == SessionOrigin::Root && state.goals.current().is_some();
        let delegation = self.producers.run_context.clone().map(|run_context| {
            crate::run_actor::DelegationContext::new(&state.origin, self.supervisor.clone(), run_context)
        });
        let seq = self.append(ctx, Some(run_id.clone()), Some(origin), payload)?;
        if let Some(input) = title_input {
            let request = super::title::TitleRequest {
                input: &input,
                agent: &selection.agent,
                chain: &model_chain,
                services: &prepared.services,
            };
            self.begin_auto_title(ctx, request);
        }
        let history = self.state.as_ref().map(|state| state.transcript.messages().to_vec()).unwrap_or_default();
        let setup = RunSetup {
            run_id: run_id.clone(),
            session_id: self.session_id.clone(),
            session: crate::ports::SessionPort::new(&ctx.address()),
            // The lease goes with this message; the run keeps the tree's actor in use through the run registry.
            approvals: (*prepared.approvals).clone(),
            policy: prepared.policy.clone(),
            cwd,
            selection,
            model_chain,
            history,
            services: prepared.services.clone(),
            goal_tools,
            delegation,
        };
        self.run_actor = Some(RunActor::new(setup).start());
        Ok((seq, run_id))
    }
}

impl Handler<StartRun> for SessionActor {
    type Result = ResponseFuture<Result<String, EngineError>>;

    fn handle(&mut self, message: StartRun, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.start_run(ctx, message);
        self.durable_reply(accepted)
    }
}

impl Handler<StartDelegatedRun> for SessionActor {
    type Result = ResponseFuture<Result<String, EngineError>>;

    fn handle(&mut self, message: StartDelegatedRun, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.start_run_as(ctx, message.0, Origin::DELEGATE);
        self.durable_reply(accepted)
    }
}

impl Handler<NextRunSelection> for SessionActor {
    type Result = Result<RunSelection, EngineError>;

    fn handle(&mut self, _: NextRunSelection, _: &mut Context<Self>) -> Self::Result {
        let state = self.ready_state()?;
        Ok(state.runs.latest_selection().unwrap_or(&state.creation_selection).clone())
    }
}

impl Handler<AppendRunEvent> for SessionActor {
    type Result = ResponseActFuture<Self, Result<u64, EngineError>>;

    fn handle(&mut self, mut message: AppendRunEvent, ctx: &mut Context<Self>) -> Self::Result {
        let finishing = match &message.payload {
            EventPayload::ToolCallTerminated { tool_call_id, .. } => self.stored_outputs.finish(tool_call_id),
            _ => None,
        };
        let Some((output_ref, finishing)) = finishing else {
            return Box::pin(self.append_run_event(message, ctx).into_actor(self));
        };
        // The result names the stored output only once it is durable. The run waits for this reply before it
        // sends anything else, so its events keep their order meanwhile.
        Box::pin(finishing.into_actor(self).then(move |finished, actor, ctx| {
            match finished {
                Ok(()) => {
                    if let EventPayload::ToolCallTerminated { result, .. } = &mut message.payload {
                        result.output_ref = Some(output_ref);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "a tool call's whole output could not be stored; its result has no output_ref")
                }
            }
            actor.append_run_event(message, ctx).into_actor(actor)
        }))
    }
}

impl SessionActor {
    fn append_run_event(
        &mut self,
        message: AppendRunEvent,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<Result<u64, EngineError>> {
        let accepted = self.require_active_run(&message.run_id);
        match message.until {
            Until::Durable => {
                let accepted =
                    accepted.and_then(|()| self.append(ctx, Some(message.run_id), message.origin, message.payload));
                self.durable_reply(accepted.map(|seq| (seq, seq)))
            }
            Until::Accepted => {
                // Text is what a watcher waits for: a delta goes with the next batch, never waits for company.
                let start = match message.payload {
                    EventPayload::TextDelta { .. } | EventPayload::ReasoningDelta { .. } => Start::Now,
                    _ => Start::Soon,
                };
                let accepted = accepted.and_then(|()| {
                    self.append_starting(ctx, Some(message.run_id), message.origin, message.payload, start)
                });
                Box::pin(std::future::ready(accepted))
            }
        }
    }
}

impl Handler<AppendTrackedRunEvent> for SessionActor {
    type Result = Result<TrackedEvent, EngineError>;

    fn handle(&mut self, message: AppendTrackedRunEvent, ctx: &mut Context<Self>) -> Self::Result {
        self.require_active_run(&message.run_id)?;
        // Nothing waits for it but the call's first chunk of output, which may wait the linger too.
        let seq = self.append_starting(ctx, Some(message.run_id), None, message.payload, Start::Soon)?;
        Ok(TrackedEvent { seq, durable: self.when_durable(seq) })
    }
}

impl Handler<WriteBatchNow> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: WriteBatchNow, ctx: &mut Context<Self>) {
        self.lane.want_now();
        self.schedule_batch(ctx);
    }
}

impl Handler<RunOutput> for SessionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, message: RunOutput, _: &mut Context<Self>) -> Self::Result {
        let chunk = OutputChunkRef {
            run_id: &message.run_id,
            tool_call_id: &message.tool_call_id,
            stream: message.stream,
            offset: message.offset,
            data: &message.data,
        };
        self.tool_output.publish(&self.session_id, chunk, self.subscribers.live_mut());
        self.share_output(|| SharedOutput::Chunk {
            run_id: message.run_id.clone(),
            tool_call_id: message.tool_call_id.clone(),
            stream: message.stream,
            offset: message.offset,
            data: message.data.to_vec(),
        });
        // The run awaits this reply before its next chunk: a writer with no room slows the tool down.
        match self.stored_outputs.record(&message.tool_call_id, message.stream, &message.data) {
            Some(room) => Box::pin(room),
            None => Box::pin(std::future::ready(())),
        }
    }
}

impl Handler<CancelActiveRun> for SessionActor {
    type Result = ResponseFuture<Result<bool, EngineError>>;

    fn handle(&mut self, message: CancelActiveRun, _: &mut Context<Self>) -> Self::Result {
        if let Some(cancelled) = self.cancel_compaction(&message.run_id) {
            return Box::pin(std::future::ready(Ok(cancelled)));
        }
        let run = self.active_run_actor(&message.run_id);
        Box::pin(async move {
            match run {
                Ok(run) => Ok(run.send(CancelRun).await.unwrap_or(false)),
                // Cancelling a run that already ended is not an error: it just did nothing.
                Err(EngineError::RunNotActive { .. }) => Ok(false),
                Err(error) => Err(error),
            }
        })
    }
}

impl Handler<ToolStdin> for SessionActor {
    type Result = ResponseFuture<Result<bool, EngineError>>;

    fn handle(&mut self, message: ToolStdin, ctx: &mut Context<Self>) -> Self::Result {
        let run = self.active_run_actor(&message.run_id);
        let session = ctx.address();
        // As `run.start` and `run.steer`: one request carries at most `[limits] max_input_bytes`. (Without a run
        // context, in tests that build actors by hand, the queue's own bound is the only one.)
        let limit =
            self.producers.run_context.as_ref().map_or(MAX_QUEUED_STDIN_BYTES, |context| context.max_input_bytes);
        Box::pin(async move {
            let bytes = message.data.as_ref().map_or(0, String::len);
            if bytes > limit {
                return Err(EngineError::ToolStdinTooLarge { size: bytes, limit });
            }
            let run = run?;
            let write = |input| WriteToolStdin { tool_call_id: message.tool_call_id.clone(), input };
            let mut queued = Ok(());
            if let Some(data) = message.data {
                queued =
                    run.send(write(StdinInput::Data(data.into_bytes()))).await.unwrap_or(Err(StdinRefused::Closed));
            }
            if queued.is_ok() && message.eof {
                queued = run.send(write(StdinInput::Eof)).await.unwrap_or(Err(StdinRefused::Closed));
            }
            let accepted = match queued {
                Ok(()) => true,
                Err(StdinRefused::Closed) => false,
                Err(StdinRefused::Full { queued_bytes, max_bytes }) => {
                    return Err(EngineError::ToolStdinBacklogFull {
                        run_id: message.run_id,
                        tool_call_id: message.tool_call_id,
                        queued_bytes,
                        max_bytes,
                    });
                }
            };
            let bytes = bytes as u64;
            if accepted {
                let payload =
                    EventPayload::ToolStdinSubmitted { tool_call_id: message.tool_call_id, bytes, eof: message.eof };
                session
                    .send(AppendRunEvent {
                        run_id: message.run_id,
                        origin: Some(Origin::User),
                        payload,
                        until: Until::Durable,
                    })
                    .await
                    .map_err(|_| EngineError::ShuttingDown)??;
            }
            Ok(accepted)
        })
    }
}
