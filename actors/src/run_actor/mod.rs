//! `RunActor`: one per active run, the agent loop.
//!
//! It owns nothing durable: every fact of the run is an event it sends to its `SessionActor`, which appends it.
//! The loop requests a model turn (streaming deltas, retrying transient failures on the same model while no
//! output was produced, falling back along the run's model chain otherwise), commits the turn, runs the tool
//! calls it asked for (each after a permission check), and at every boundary (a completed tool batch, or a turn
//! with no tool calls) has the session promote pending steering inputs. A turn with no tool calls and nothing
//! pending completes the run.
//!
//! The engine reaches the run through this actor's messages: `CancelRun` (stops the model stream and kills the
//! running tool's process group) and `WriteToolStdin`. The loop itself runs as a future in the actor's context
//! and shares a small [`RunControl`] with the handlers.

mod compaction;
mod delegate;
mod ending;
mod goal_tools;
mod masking;
mod model_turn;
mod permission;
mod progress;
mod prompt;
mod tool_call;
mod turn_end;

use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::common::{ModelErrorSummary, ModelSelection, RunSelection};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::model::{ChatMessage, ToolCallRequest, ToolSpec};
use troupe_runtime::policy::Policy;
use troupe_runtime::tool_stdin::{StdinRefused, StdinSender};
use troupe_runtime::tools::StdinInput;
use troupe_runtime::transcript::ToolUnit;

pub use delegate::DelegationContext;
use model_turn::TurnError;
use turn_end::TurnOutcome;

use crate::error::EngineError;
use crate::ports::session::{AppendRunEvent, PromotePendingInputs, PromotedInput, Until};
use crate::ports::{ApprovalPort, SessionPort};
use crate::run_services::RunServices;
use crate::run_workspace::RunWorkspace;

/// Stops the run: the model stream is dropped and a running tool's process group is killed. Replies whether the
/// run was still running.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct CancelRun;

/// Writes to the stdin of the running tool call. Replies whether it was queued: refused when that call is not
/// running or no longer reads stdin (`Closed`), or when its unread input would pass its bound (`Full`).
#[derive(Message)]
#[rtype(result = "Result<(), StdinRefused>")]
pub struct WriteToolStdin {
    pub tool_call_id: String,
    pub input: StdinInput,
}

/// Everything a run needs to start.
pub struct RunSetup {
    pub run_id: String,
    pub session_id: String,
    pub session: SessionPort,
    /// The tree's mode and grants.
    pub approvals: ApprovalPort,
    /// The policy of the run's agent.
    pub policy: Arc<Policy>,
    pub cwd: PathBuf,
    pub selection: RunSelection,
    /// The models the run may use, in order.
    pub model_chain: Vec<ModelSelection>,
    /// The session's model history up to and including this run's input.
    pub history: Vec<ChatMessage>,
    pub services: Arc<RunServices>,
    /// Whether the run is offered `goal_get` and `goal_update` (its root session had a goal at admission).
    pub goal_tools: bool,
    /// How the run may delegate (`delegate.rs`): offered the `delegate` tool when its session is shallower than
    /// `[delegation] max_depth`. `None` only for runs of hand-built session actors in tests.
    pub delegation: Option<DelegationContext>,
}

/// What the actor's handlers share with the loop.
#[derive(Default)]
struct RunControl {
    cancel: CancellationToken,
    /// The running tool call that reads stdin, and where its input goes.
    stdin: Mutex<Option<(String, StdinSender)>>,
}

pub struct RunActor {
    /// Taken by `started`, which moves it into the loop.
    setup: Option<RunSetup>,
    control: Arc<RunControl>,
    /// Keeps the run known to the engine as active while this actor exists: dropped with the actor when the run
    /// ends (or the daemon stops), which moves the run to the engine's bounded list of recently ended runs.
    _registration: crate::run_registry::RunRegistration,
}

impl RunActor {
    pub fn new(setup: RunSetup) -> Self {
        let _registration = setup.services.runs.register(&setup.run_id, &setup.session_id);
        RunActor { setup: Some(setup), control: Arc::default(), _registration }
    }
}

impl Actor for RunActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some(setup) = self.setup.take() else {
            return;
        };
        let control = self.control.clone();
        // Every line the run logs, down to its tool calls and model requests, carries the run and its session.
        let span = tracing::info_span!("run", session_id = %setup.session_id, run_id = %setup.run_id);
        let run = async move {
            let started_at = std::time::Instant::now();
            tracing::info!(
                session = %setup.session_id,
                run = %setup.run_id,
                agent = %setup.selection.agent,
                model = %setup.selection.model.model,
                "run started"
            );
            let mut run_loop = RunLoop::new(setup, control);
            let outcome = run_loop.run().await;
            run_loop.log_end(&outcome, started_at.elapsed());
            run_loop.finish(outcome).await;
            if let Some(workspace) = run_loop.workspace.take() {
                workspace.remove().await;
            }
        };
        let run = tracing::Instrument::instrument(run, span);
        ctx.spawn(run.into_actor(self).map(|(), _, ctx| ctx.stop()));
    }
}

impl Handler<CancelRun> for RunActor {
    type Result = bool;

    fn handle(&mut self, _: CancelRun, _: &mut Context<Self>) -> bool {
        let was_running = !self.control.cancel.is_cancelled();
        self.control.cancel.cancel();
        was_running
    }
}

impl Handler<WriteToolStdin> for RunActor {
    type Result = Result<(), StdinRefused>;

    fn handle(&mut self, message: WriteToolStdin, _: &mut Context<Self>) -> Self::Result {
        let stdin = self.control.stdin.lock();
        match stdin.as_ref() {
            Some((tool_call_id, sender)) if *tool_call_id == message.tool_call_id => sender.try_send(message.input),
            _ => Err(StdinRefused::Closed),
        }
    }
}

/// How a run ends.
enum RunOutcome {
    /// `run_completed` is durable already: a run completes only at a turn without tool calls, whose events and
    /// the run's end are appended together (`end_tool_free_turn`).
    Completed {
        final_text: String,
    },
    Failed {
        error: String,
        model_error: Option<ModelErrorSummary>,
        resolved_model: Option<String>,
    },
    Cancelled,
    /// The session went away (crashed or shut down); it records `run_interrupted` when it comes back.
    SessionLost,
}

struct RunLoop {
    setup: RunSetup,
    control: Arc<RunControl>,
    /// Position in `setup.model_chain` of the model in use; sticky for the rest of the run.
    chain_index: usize,
    /// Who the agent is, its tools, sandbox and mode, and the project's instructions (`prompt.rs`).
    system_prompt: String,
    /// The run's model history, shared with each request in flight; appended to between requests, when no
    /// request holds it, so appending never copies it.
    history: Arc<Vec<ChatMessage>>,
    tool_specs: Arc<Vec<ToolSpec>>,
    /// Where tool calls work; prepared at the first tool call, removed when the run ends.
    workspace: Option<RunWorkspace>,
}

impl RunLoop {
    fn new(mut setup: RunSetup, control: Arc<RunControl>) -> Self {
        let history = Arc::new(std::mem::take(&mut setup.history));
        let mut tool_specs: Vec<ToolSpec> = setup
            .services
            .tool_definitions()
            .into_iter()
            .map(|definition| ToolSpec {
                name: definition.name,
                description: definition.description,
                parameters: definition.parameters,
            })
            .collect();
        if setup.goal_tools {
            tool_specs.extend(goal_tools::specs());
        }
        RunLoop {
            setup,
            control,
            chain_index: 0,
            // Built when the run starts (`prompt.rs`), once its tools are known.
            system_prompt: String::new(),
            history,
            tool_specs: Arc::new(tool_specs),
            workspace: None,
        }
    }

    /// Sends an event in order without waiting for it to be durable (deltas, progress, tool results): it is
    /// written with the next group commit, before any later event of the run. Waits until the session accepted
    /// it, which bounds what a fast producer can queue. A failure means the session is gone; the run's next
    /// durable point notices it.
    async fn emit(&self, payload: EventPayload) {
        self.emit_as(payload, None).await;
    }

    async fn emit_as(&self, payload: EventPayload, origin: Option<Origin>) {
        let _ = self.setup.session.send(self.append(payload, origin, Until::Accepted)).await;
    }

    /// This run's event, to be appended with `origin` and answered at `until`.
    fn append(&self, payload: EventPayload, origin: Option<Origin>, until: Until) -> AppendRunEvent {
        AppendRunEvent { run_id: self.setup.run_id.clone(), origin, payload, until }
    }

    /// Queues an event in the session's mailbox without waiting for its reply: for an event the run sends once per
    /// model attempt (its start, its usage, its abandonment, a fall back), which needs no back pressure. The mailbox
    /// is FIFO and every later event of the run goes through it, so the order holds; a session that is gone or no
    /// longer has this run active drops it, and the run's next durable point notices. Never for a
    /// `tool_call_terminated`: the session may hold its append back until the call's stored output is durable, and
    /// only a run that waits for that reply keeps its later events behind it.
    fn post(&self, payload: EventPayload) {
        self.setup.session.do_send(self.append(payload, None, Until::Accepted));
    }

    /// Sends an event and waits until it is durable.
    async fn commit(&self, payload: EventPayload, origin: Option<Origin>) -> Result<u64, EngineError> {
        self.setup.session.send(self.append(payload, origin, Until::Durable)).await.map_err(|_| {
            EngineError::Unavailable {
                session_id: self.setup.session_id.clone(),
                detail: "the session stopped during the run".into(),
            }
        })?
    }

    async fn run(&mut self) -> RunOutcome {
        let history = std::mem::take(Arc::make_mut(&mut self.history));
        self.history = Arc::new(self.with_attachments(history).await);
        if let Some(spec) = self.delegate_spec().await {
            Arc::make_mut(&mut self.tool_specs).push(spec);
        }
        self.system_prompt = self.build_system_prompt().await;
        loop {
            let mut turn = match self.request_turn().await {
                Ok(turn) => turn,
                Err(TurnError::Outcome(outcome)) => return outcome,
            };
            Arc::make_mut(&mut self.history)
                .push(ChatMessage::Assistant { text: turn.text.clone(), tool_calls: turn.tool_calls.clone() });
            if let Some(events) = turn.unrecorded.take() {
                match self.end_tool_free_turn(events, turn.text).await {
                    TurnOutcome::Ended(outcome) => return outcome,
                    TurnOutcome::Continue(promoted) => {
                        self.admit_inputs(promoted).await;
                        continue;
                    }
                }
            }
            // All of the turn's results enter the history before any message its tools emitted: the vendors
            // reject a user turn between the tool results of one assistant turn.
            let mut emitted: Vec<ChatMessage> = Vec::new();
            for batch in call_batches(&turn.tool_calls) {
                if self.control.cancel.is_cancelled() {
                    return RunOutcome::Cancelled;
                }
                if self.workspace.is_none() {
                    let sandbox = self.setup.services.sandbox.clone();
                    let workspace =
                        RunWorkspace::prepare(self.setup.cwd.clone(), self.setup.run_id.clone(), sandbox).await;
                    self.workspace = Some(workspace);
                }
                // The calls of a batch run concurrently (each with its own permission check); their results are
                // recorded in the model's call order once all have ended.
                let results = futures::future::join_all(batch.iter().map(|call| self.execute_tool_call(call))).await;
                for (call, result) in batch.iter().zip(results) {
                    // Counted by the tools the run offered: a name the model made up is `unknown`, not a new series.
                    let offered = self.tool_specs.iter().any(|spec| spec.name == call.tool);
                    let tool = if offered { call.tool.as_str() } else { "unknown" };
                    self.setup.services.metrics.tool_call(tool, result.status);
                    let terminated = EventPayload::ToolCallTerminated {
                        tool_call_id: call.tool_call_id.clone(),
                        result: result.clone(),
                    };
                    // Not awaited: the next durable point of the run (its next committed turn, or its end) covers
                    // it, and nothing irreversible depends on it being on disk first.
                    self.emit_as(terminated, Some(Origin::TOOL_RESULT)).await;
                    let unit = tool_history(call, &result);
                    Arc::make_mut(&mut self.history).push(unit.result);
                    emitted.extend(unit.emitted);
                }
            }
            if self.control.cancel.is_cancelled() {
                return RunOutcome::Cancelled;
            }
            if !emitted.is_empty() {
                let emitted = self.with_attachments(emitted).await;
                Arc::make_mut(&mut self.history).extend(emitted);
            }
            // A boundary: pending steering inputs enter the history before the next request.
            let promoted =
                match self.setup.session.send(PromotePendingInputs { run_id: self.setup.run_id.clone() }).await {
                    Ok(Ok(promoted)) => promoted,
                    _ => return RunOutcome::SessionLost,
                };
            self.admit_inputs(promoted).await;
        }
    }

    /// The inputs submitted at a boundary enter the history as user messages, in order, the files they attached
    /// read so the next request carries them.
    async fn admit_inputs(&mut self, promoted: Vec<PromotedInput>) {
        let messages = promoted
            .iter()
            .map(|input| troupe_runtime::transcript::user_message(&input.text, &input.attachments))
            .collect();
        let messages = self.with_attachments(messages).await;
        Arc::make_mut(&mut self.history).extend(messages);
    }
}

/// The turn's calls in batches, in order: each run of consecutive `delegate` calls is one batch (they run
/// concurrently), every other call a batch of its own (tools that touch files and processes run one by one).
fn call_batches(calls: &[ToolCallRequest]) -> Vec<&[ToolCallRequest]> {
    let mut batches = Vec::new();
    let mut start = 0;
    while start < calls.len() {
        let mut end = start + 1;
        if delegate::is_delegate(&calls[start]) {
            while end < calls.len() && delegate::is_delegate(&calls[end]) {
                end += 1;
            }
        }
        batches.push(&calls[start..end]);
        start = end;
    }
    batches
}

fn tool_result(status: ToolResultStatus, output: String) -> PersistedToolResult {
    PersistedToolResult { status, output, display: None, output_ref: None, additional_messages: Vec::new() }
}

/// The history entries of a terminated call: the same materialization the session's transcript applies.
fn tool_history(call: &ToolCallRequest, result: &PersistedToolResult) -> ToolUnit {
    troupe_runtime::transcript::tool_unit(&call.tool_call_id, call.tool.clone(), result)
}
#[cfg(test)]
mod tests;
